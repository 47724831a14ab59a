package store

import (
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"snfs/rawsys"
)

// dirStreams keeps directories open between the READDIR calls of one listing, so
// that the next call continues where the last one stopped instead of reopening the
// directory and seeking to the cookie (which makes ext4 rebuild its hash-order
// state). A stream is keyed by the directory and the cookie the client will send
// next, holds the entries already read but not yet returned, and is used by one
// call at a time (taken out of the cache while in use). Bounded in count and age.
type dirStreams struct {
	mu      sync.Mutex
	streams map[streamKey]*dirStream // guarded by mu
}

type streamKey struct {
	dir    string
	cookie uint64
}

type dirStream struct {
	fd      int
	pending []DirEntry // read from the kernel, not yet returned
	last    time.Time
}

const (
	maxStreams = 64
	streamTTL  = 10 * time.Second
)

// take returns the stream continuing dir at cookie, or nil.
func (d *dirStreams) take(dir string, cookie uint64) *dirStream {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := streamKey{dir, cookie}
	st := d.streams[k]
	if st != nil {
		delete(d.streams, k)
	}
	return st
}

// put keeps st for the call that will continue dir at cookie.
func (d *dirStreams) put(dir string, cookie uint64, st *dirStream) {
	now := time.Now()
	st.last = now
	var victims []*dirStream
	d.mu.Lock()
	if d.streams == nil {
		d.streams = map[streamKey]*dirStream{}
	}
	for k, o := range d.streams {
		if now.Sub(o.last) > streamTTL || len(d.streams) >= maxStreams {
			delete(d.streams, k)
			victims = append(victims, o)
		}
	}
	k := streamKey{dir, cookie}
	if o := d.streams[k]; o != nil {
		victims = append(victims, o)
	}
	d.streams[k] = st
	d.mu.Unlock()
	for _, v := range victims {
		rawsys.Close(v.fd)
	}
}

// dropDev closes every kept stream of a directory on device dev (a removed
// export's file system). A stream in use is put back by its call, and closed
// by the first put more than streamTTL later.
func (d *dirStreams) dropDev(dev uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for k, st := range d.streams {
		var s unix.Stat_t
		if rawsys.Fstat(st.fd, &s) == nil && uint64(s.Dev) == dev {
			rawsys.Close(st.fd)
			delete(d.streams, k)
		}
	}
}

// closeAll closes every kept stream.
func (d *dirStreams) closeAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for k, st := range d.streams {
		rawsys.Close(st.fd)
		delete(d.streams, k)
	}
}
