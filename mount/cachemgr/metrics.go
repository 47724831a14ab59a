package cachemgr

import (
	"sync/atomic"
	"time"

	"snfs/state"
)

// cacheStats are the snfs-mode counters behind the mount's metrics that
// SNFSStats' older fields do not cover.
type cacheStats struct {
	// CacheHits and CacheHitBytes count the reads the daemon served from the
	// cache directory without asking the server (reads the kernel serves from
	// its page cache or through passthrough never reach the daemon).
	CacheHits, CacheHitBytes atomic.Uint64
	// PassthroughOpens counts the opens handed to the kernel with FUSE
	// passthrough; Reads counts every read that reached the daemon in snfs
	// mode (served from the cache directory or the server).
	PassthroughOpens, Reads atomic.Uint64
	// Pinned counts the callbacks that made this client a file's pinned
	// holder (its kernel writes the file through passthrough; pinned.go).
	Pinned atomic.Uint64
	// XattrHits counts the extended-attribute reads (GetXattr, ListXattrs)
	// served from the cache of a cached file (xattr.go).
	XattrHits atomic.Uint64
	callbacks [state.Relinquish + 1]atomic.Uint64 // by mode; 0: unknown modes
}

// callback counts one callback of mode.
func (c *cacheStats) callback(mode state.CallbackMode) {
	if mode > state.Relinquish {
		mode = 0
	}
	c.callbacks[mode].Add(1)
}

// cacheRead counts a read of n bytes answered by the cache directory; try 0
// means nothing had to be read from the server first (a hit).
func (c *cacheStats) cacheRead(try, n int) {
	if try == 0 {
		c.CacheHits.Add(1)
		c.CacheHitBytes.Add(uint64(n))
	}
}

// CallbackModes lists the callback modes counted (CallbacksByMode's keys).
var CallbackModes = []state.CallbackMode{state.Writeback, state.Invalidate, state.WritebackInvalidate, state.Relinquish}

// CallbacksByMode returns the callbacks received with mode.
func (c *cacheStats) CallbacksByMode(mode state.CallbackMode) uint64 {
	if mode > state.Relinquish {
		mode = 0
	}
	return c.callbacks[mode].Load()
}

// DirtyBytes is the data in the cache directory not yet written back: the
// dirty ranges of the files waiting for write-back.
func (sn *snfsFS) DirtyBytes() int64 {
	var n int64
	for _, i := range sn.dirtyInodes(time.Time{}) {
		cf := cacheFileOrNil(i)
		if cf == nil {
			continue
		}
		for _, r := range cf.Info().Dirty {
			n += r.Len
		}
	}
	return n
}
