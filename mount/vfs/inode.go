package vfs

import (
	"hash/fnv"
	"sync"
	"sync/atomic"
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
	// alias: the number and generation the kernel is told instead of
	// FileID and Gen (nil: none), those of the local inode the object was
	// made as (FS.KeepIno, inoalias.go). Set before the inode is known to
	// the kernel or while the kernel knows it only by the local inode's.
	alias atomic.Pointer[InoID]

	// An inode's locks are taken in this order, each only after those
	// above it (state/clientfile/doc.go): openMu (snfs mode's, in Ext:
	// snfsInode), AppendMu, cacheW (snfs mode's, in Ext), FlushMu, Mu,
	// NameMu. None is held across the kernel's notifications.

	// FlushMu: one write-back at a time, held across its WRITEs and COMMIT.
	// Taken after openMu, AppendMu and cacheW (a cached append or write
	// waits for a write-back, not the other way), before Mu.
	FlushMu sync.Mutex
	// AppendMu: snfs mode, cached: one append's size read and write at a
	// time (append.go). Taken after openMu, before cacheW, FlushMu and Mu.
	AppendMu sync.Mutex

	// NameMu guards Dir and Name only, and is a leaf: nothing is locked
	// while it is held, so a log line may name a file's path (paths.go)
	// whatever locks its caller holds (i.Mu in a write-back, say): taken
	// last, after any of the inode's other locks.
	NameMu sync.Mutex
	Dir    nfs3.FH // the directory it was last seen in, and its name there (paths.go)
	Name   string

	// Mu guards the fields below (and most of Ext's: snfsInode, snfs.go,
	// among them snfs mode's state machine, state/clientfile's File), held
	// only while they are read or changed, never across a call to the
	// server or the kernel (a cache file's dirty record may be read under
	// it, a leaf). Taken after openMu,
	// AppendMu, cacheW and FlushMu; before NameMu, FS.Mu, and snfs mode's
	// FS-wide locks that come after it (snfsFS.mu; delayedSet.mu is taken
	// before it).
	Mu       sync.Mutex
	Attr     nfs3.Fattr    // the server's, as last seen
	AttrAt   time.Time     // when Attr was fetched; zero: must be fetched again
	timeo    time.Duration // current adaptive timeout
	cached   change        // change attributes the kernel's cached data belongs to
	cachedOK bool
	pairs    []wccPair // own changes whose pre-op did not (yet) chain to cached
	Opens    int
	SillyDir nfs3.FH // set while renamed away because removed while open
	// A directory: listed is its version when the kernel was last let
	// cache its listing (listedOK), listedBy the credentials that listed it
	// at that version (OpenDirCached), and listing that listing (names and
	// types, no attributes) for a kernel that asks again (ListedDir).
	listed    change
	listedOK  bool
	listedBy  map[string]bool
	listing   []DirEntry
	SillyName string
	// target is a symbolic link's, once read (a link's target never
	// changes: another target is another object, another handle).
	target    string
	targetOK  bool
	nlinkDrop uint32 // links removed while open (reported nlink is lower)
	ModGen    uint64 // fs.attrGen when a modifying call's reply last set (or invalidated) Attr
	WState    wstate
	wbErrs    wbErrs // write-back errors that dropped data (wberr.go)
	node      any    // the bridge's node (SetNode), for notifications
	// Ext is the mode's own state of the inode, set as it is made
	// (Ops.newInode): nil in nfs mode, snfs mode's *snfsInode (snfs.go).
	Ext any
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

func (i *Inode) IsDir() bool { return i.Type == nfs3.TypeDir }

func (i *Inode) acRange() (lo, hi time.Duration) {
	if i.IsDir() {
		return i.fs.Cfg.AcDirMin, i.fs.Cfg.AcDirMax
	}
	return i.fs.Cfg.AcRegMin, i.fs.Cfg.AcRegMax
}

// setAttrLocked records attributes fetched at now. The timeout adapts as
// Linux's does: reset to the minimum when the attributes changed, doubled (up
// to the maximum) when a revalidation after expiry found them unchanged.
func (i *Inode) setAttrLocked(a *nfs3.Fattr, now time.Time) {
	lo, hi := i.acRange()
	switch {
	case i.timeo == 0 || changeOf(&i.Attr) != changeOf(a):
		i.timeo = lo
	case !i.AttrAt.IsZero() && now.After(i.AttrAt.Add(i.timeo)) || i.AttrAt.IsZero():
		if i.timeo *= 2; i.timeo > hi {
			i.timeo = hi
		}
	}
	i.Attr = *a
	i.AttrAt = now
}

// InvalidateLocked makes the next Getattr ask the server. It counts as a
// change for postOpLocked: a call sent before it (a GETATTR, the kernel's
// readahead READ) and answered after it must not refill the cache with
// attributes older than the reason for the invalidation (a lock grant: the
// holder's writes since).
func (i *Inode) InvalidateLocked() {
	i.AttrAt = time.Time{}
	i.ModGen = i.fs.attrGen.Add(1)
}

// Invalidate makes the next Getattr ask the server.
func (i *Inode) Invalidate() {
	i.Mu.Lock()
	i.InvalidateLocked()
	i.Mu.Unlock()
}

// TTLLocked is how much longer the cached attributes are good for.
func (i *Inode) TTLLocked(now time.Time) time.Duration {
	if d, ok := i.fs.ops.AttrTTLLocked(i); ok {
		return d
	}
	if i.AttrAt.IsZero() {
		return 0
	}
	d := i.AttrAt.Add(i.timeo).Sub(now)
	if d < 0 {
		return 0
	}
	return d
}

// ReportLocked is what the application sees: the server's attributes with
// this client's unwritten data applied (size, times) and links removed while
// open subtracted.
func (i *Inode) ReportLocked() nfs3.Fattr {
	a := i.Attr
	if i.WState.Pending() {
		if end := i.WState.end(); end > a.Size {
			a.Size = end
		}
		if !i.WState.Mtime.IsZero() {
			t := NFSTime(i.WState.Mtime)
			if TimeAfter(t, a.Mtime) {
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
	i.fs.ops.AdjustLocked(i, &a)
	return a
}

func NFSTime(t time.Time) nfs3.Time {
	return nfs3.Time{Sec: uint32(t.Unix()), Nsec: uint32(t.Nanosecond())}
}

func TimeAfter(a, b nfs3.Time) bool {
	return a.Sec > b.Sec || a.Sec == b.Sec && a.Nsec > b.Nsec
}

// WccLocked applies a modifying call's wcc_data (weak cache consistency,
// RFC 1813 section 2.6): a change from the version the cached data belongs
// to keeps the cached data valid at the new version.
func (i *Inode) WccLocked(w *nfs3.WccData, now time.Time) {
	i.ModGen = i.fs.attrGen.Add(1)
	if w.After == nil {
		i.InvalidateLocked()
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

// ModifiedLocked records the post-op attributes of a modifying call without
// wcc_data (LINK).
func (i *Inode) ModifiedLocked(a *nfs3.Fattr, now time.Time) {
	i.ModGen = i.fs.attrGen.Add(1)
	i.setAttrLocked(a, now)
}

// PostOpLocked records attributes returned by a non-modifying call (GETATTR,
// ACCESS, READ, LOOKUP, ...) that began when fs.attrGen was start (attrStart).
// They are dropped when a reply to one of this client's modifying calls set
// the attributes since: that reply may have overtaken this one, whose
// attributes can then be older (a READ sent before a SETATTR that truncated
// or extended the file, answered after it, would put the old size back), as
// Linux's attribute generation counter does.
func (i *Inode) PostOpLocked(a *nfs3.Fattr, start uint64, now time.Time) {
	if a == nil || i.ModGen > start {
		return
	}
	i.setAttrLocked(a, now)
}

// FS returns the Inode's fs (set once, read without a lock).
func (i *Inode) FS() *FS { return i.fs }
