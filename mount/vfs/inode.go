package vfs

import (
	"hash/fnv"
	"sync"
	"time"

	"snfs/nfs3"
)

// Inode is one file, directory or other object, named by its file handle.
type Inode struct {
	fs     *FS
	FH     nfs3.FH
	Type   nfs3.FType
	FileID uint64
	Gen    uint64 // a hash of the handle: tells a reused inode number apart

	// An inode's locks are taken in this order, each only after those
	// above it (state/clientfile/doc.go): openMu (snfs mode's, in ext:
	// snfsInode), appendMu, cacheW (snfs mode's, in ext), flushMu, mu,
	// nameMu. None is held across the kernel's notifications.

	// flushMu: one write-back at a time, held across its WRITEs and COMMIT.
	// Taken after openMu, appendMu and cacheW (a cached append or write
	// waits for a write-back, not the other way), before mu.
	flushMu sync.Mutex
	// appendMu: snfs mode, cached: one append's size read and write at a
	// time (append.go). Taken after openMu, before cacheW, flushMu and mu.
	appendMu sync.Mutex

	// nameMu guards dir and name only, and is a leaf: nothing is locked
	// while it is held, so a log line may name a file's path (paths.go)
	// whatever locks its caller holds (i.mu in a write-back, say): taken
	// last, after any of the inode's other locks.
	nameMu sync.Mutex
	dir    nfs3.FH // the directory it was last seen in, and its name there (paths.go)
	name   string

	// mu guards the fields below (and most of ext's: snfsInode, snfs.go,
	// among them snfs mode's state machine, state/clientfile's File), held
	// only while they are read or changed, never across a call to the
	// server or the kernel (a cache file's dirty record may be read under
	// it, a leaf). Taken after openMu,
	// appendMu, cacheW and flushMu; before nameMu, FS.mu, and snfs mode's
	// FS-wide locks that come after it (snfsFS.mu; delayedSet.mu is taken
	// before it).
	mu       sync.Mutex
	attr     nfs3.Fattr    // the server's, as last seen
	attrAt   time.Time     // when attr was fetched; zero: must be fetched again
	timeo    time.Duration // current adaptive timeout
	cached   change        // change attributes the kernel's cached data belongs to
	cachedOK bool
	pairs    []wccPair // own changes whose pre-op did not (yet) chain to cached
	opens    int
	sillyDir nfs3.FH // set while renamed away because removed while open
	// A directory: listed is its version when the kernel was last let
	// cache its listing (listedOK), listedBy the credentials that listed it
	// at that version (OpenDirCached), and listing that listing (names and
	// types, no attributes) for a kernel that asks again (ListedDir).
	listed    change
	listedOK  bool
	listedBy  map[string]bool
	listing   []DirEntry
	sillyName string
	nlinkDrop uint32 // links removed while open (reported nlink is lower)
	modGen    uint64 // fs.attrGen when a modifying call's reply last set (or invalidated) attr
	w         wstate
	node      any // the bridge's node (SetNode), for notifications
	// ext is the mode's own state of the inode, set as it is made
	// (Ops.newInode): nil in nfs mode, snfs mode's *snfsInode (snfs.go).
	ext any
}

// change is what tells one version of a file's data from another.
type change struct {
	Size         uint64
	Mtime, Ctime nfs3.Time
}

func changeOf(a *nfs3.Fattr) change { return change{a.Size, a.Mtime, a.Ctime} }

type wccPair struct{ pre, post change }

func fhHash(fh nfs3.FH) uint64 {
	h := fnv.New64a()
	h.Write(fh)
	return h.Sum64()
}

func (i *Inode) isDir() bool { return i.Type == nfs3.TypeDir }

func (i *Inode) acRange() (lo, hi time.Duration) {
	if i.isDir() {
		return i.fs.cfg.AcDirMin, i.fs.cfg.AcDirMax
	}
	return i.fs.cfg.AcRegMin, i.fs.cfg.AcRegMax
}

// setAttrLocked records attributes fetched at now. The timeout adapts as
// Linux's does: reset to the minimum when the attributes changed, doubled (up
// to the maximum) when a revalidation after expiry found them unchanged.
func (i *Inode) setAttrLocked(a *nfs3.Fattr, now time.Time) {
	lo, hi := i.acRange()
	switch {
	case i.timeo == 0 || changeOf(&i.attr) != changeOf(a):
		i.timeo = lo
	case !i.attrAt.IsZero() && now.After(i.attrAt.Add(i.timeo)) || i.attrAt.IsZero():
		if i.timeo *= 2; i.timeo > hi {
			i.timeo = hi
		}
	}
	i.attr = *a
	i.attrAt = now
}

// invalidateLocked makes the next Getattr ask the server. It counts as a
// change for postOpLocked: a call sent before it (a GETATTR, the kernel's
// readahead READ) and answered after it must not refill the cache with
// attributes older than the reason for the invalidation (a lock grant: the
// holder's writes since).
func (i *Inode) invalidateLocked() {
	i.attrAt = time.Time{}
	i.modGen = i.fs.attrGen.Add(1)
}

// Invalidate makes the next Getattr ask the server.
func (i *Inode) Invalidate() {
	i.mu.Lock()
	i.invalidateLocked()
	i.mu.Unlock()
}

// ttlLocked is how much longer the cached attributes are good for.
func (i *Inode) ttlLocked(now time.Time) time.Duration {
	if d, ok := i.fs.ops.attrTTLLocked(i); ok {
		return d
	}
	if i.attrAt.IsZero() {
		return 0
	}
	d := i.attrAt.Add(i.timeo).Sub(now)
	if d < 0 {
		return 0
	}
	return d
}

// reportLocked is what the application sees: the server's attributes with
// this client's unwritten data applied (size, times) and links removed while
// open subtracted.
func (i *Inode) reportLocked() nfs3.Fattr {
	a := i.attr
	if i.w.pending() {
		if end := i.w.end(); end > a.Size {
			a.Size = end
		}
		if !i.w.mtime.IsZero() {
			t := nfsTime(i.w.mtime)
			if timeAfter(t, a.Mtime) {
				a.Mtime, a.Ctime = t, t
			}
		}
	}
	if i.nlinkDrop > 0 {
		if a.Nlink > i.nlinkDrop {
			a.Nlink -= i.nlinkDrop
		} else {
			a.Nlink = 0
		}
	}
	i.fs.ops.adjustLocked(i, &a)
	return a
}

func nfsTime(t time.Time) nfs3.Time {
	return nfs3.Time{Sec: uint32(t.Unix()), Nsec: uint32(t.Nanosecond())}
}

func timeAfter(a, b nfs3.Time) bool {
	return a.Sec > b.Sec || a.Sec == b.Sec && a.Nsec > b.Nsec
}

// wccLocked applies a modifying call's wcc_data (weak cache consistency,
// RFC 1813 section 2.6): a change from the version the cached data belongs
// to keeps the cached data valid at the new version.
func (i *Inode) wccLocked(w *nfs3.WccData, now time.Time) {
	i.modGen = i.fs.attrGen.Add(1)
	if w.After == nil {
		i.invalidateLocked()
		return
	}
	if w.Before != nil && i.cachedOK {
		i.pairs = append(i.pairs, wccPair{pre: change{w.Before.Size, w.Before.Mtime, w.Before.Ctime}, post: changeOf(w.After)})
		i.chainLocked()
	}
	i.setAttrLocked(w.After, now)
}

// chainLocked follows recorded own changes from the cached version.
func (i *Inode) chainLocked() {
	for moved := true; moved; {
		moved = false
		for k, p := range i.pairs {
			if p.pre == i.cached {
				i.cached = p.post
				i.pairs = append(i.pairs[:k], i.pairs[k+1:]...)
				moved = true
				break
			}
		}
	}
	if len(i.pairs) > 256 {
		i.pairs = i.pairs[len(i.pairs)-256:]
	}
}

// modifiedLocked records the post-op attributes of a modifying call without
// wcc_data (LINK).
func (i *Inode) modifiedLocked(a *nfs3.Fattr, now time.Time) {
	i.modGen = i.fs.attrGen.Add(1)
	i.setAttrLocked(a, now)
}

// postOpLocked records attributes returned by a non-modifying call (GETATTR,
// ACCESS, READ, LOOKUP, ...) that began when fs.attrGen was start (attrStart).
// They are dropped when a reply to one of this client's modifying calls set
// the attributes since: that reply may have overtaken this one, whose
// attributes can then be older (a READ sent before a SETATTR that truncated
// or extended the file, answered after it, would put the old size back), as
// Linux's attribute generation counter does.
func (i *Inode) postOpLocked(a *nfs3.Fattr, start uint64, now time.Time) {
	if a == nil || i.modGen > start {
		return
	}
	i.setAttrLocked(a, now)
}
