package cachemgr

import (
	"context"
	"errors"
	"sync"
	"time"

	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/state"
	"snfs/sunrpc"
)

// The name cache (names.go) as the core's Ops sees it: lookups, listings,
// the kernel's name lifetime, this mount's own changes; the promise's break
// (dirCallback); the lease (leaseWatch).

// maxCachedName: a longer name is not answered from a listing (NAME_MAX).
const maxCachedName = 255

// LookupName is FS.Lookup in snfs mode: from dir's cached listing (a name
// not in it does not exist), after listing dir if it is small and not
// cached; ok false sends a LOOKUP.
func (sn *snfsFS) LookupName(ctx context.Context, dir *vfs.Inode, c vfs.Cred, name string) (vfs.Entry, bool, error) {
	nc := sn.names
	if sn.disc.offline() && name != "." && name != ".." {
		if e, ok, err := nc.offlineName(dir, name); ok {
			return e, true, err // disconnectednames.go
		}
		return sn.offlineLookup(dir, name) // disconnected.go
	}
	if isProvFH(dir.FH) {
		return sn.provLookup(ctx, dir, c, name) // permitmake.go
	}
	if name == "." || name == ".." || len(name) > maxCachedName || !dir.IsDir() {
		// A name longer than a component may be is the server's to refuse
		// (NFS3ERR_NAMETOOLONG), not a miss.
		return vfs.Entry{}, false, nil
	}
	d := nc.usable(ctx, dir)
	if d == nil {
		sn.beforeDirRead(ctx, dir) // permitlocal.go
		if !nc.shouldFill(dir) {
			return vfs.Entry{}, false, nil
		}
		if _, err := nc.fill(ctx, dir, c); err != nil {
			return vfs.Entry{}, false, nil // the LOOKUP tells
		}
		if d = nc.usable(ctx, dir); d == nil {
			return vfs.Entry{}, false, nil
		}
	}
	start := sn.FS.AttrStart()
	nc.mu.Lock()
	k, found := d.index[name]
	var e cent
	if found {
		e = d.ents[k]
	}
	if found && e.fh == nil {
		nc.mu.Unlock()
		return vfs.Entry{}, false, nil
	}
	if !found {
		nc.stats.Misses++
		n, age := len(d.index), time.Since(d.filled)
		nc.mu.Unlock()
		sn.FS.Logger().Debug("name cache: not listed", "dir", dir.FileID, "name", name, "names", n, "listed", age.Round(time.Millisecond))
		return vfs.Entry{}, true, nfs3.ErrNoEnt
	}
	nc.stats.Hits++
	nc.mu.Unlock()
	i := sn.FS.LookupInode(e.fh)
	if i == nil {
		i = sn.FS.Inode(e.fh, &e.attr, start)
		nc.mu.Lock()
		broken := d.broken
		nc.mu.Unlock()
		if broken || e.noAttr {
			i.Invalidate() // the break may have looked for it before it was made
		}
	}
	i.NameMu.Lock()
	i.Dir, i.Name = dir.FH, name
	i.NameMu.Unlock()
	a, ttl, err := sn.FS.Getattr(ctx, i, c)
	if err != nil {
		return vfs.Entry{}, true, err
	}
	return vfs.Entry{Inode: i, Attr: a, AttrTTL: ttl, EntryTTL: nc.keptTTLOf(dir.FH, i.FH)}, true, nil // permitnames.go
}

// ListNames is a listing of dir in snfs mode: from the cache for
// credentials that listed it under the promise (the kernel may keep its
// own copy then: cached), else LISTDIR (the kernel's copy dropped).
func (sn *snfsFS) ListNames(ctx context.Context, dir *vfs.Inode, c vfs.Cred, open bool) ([]vfs.DirEntry, bool, bool, error) {
	nc := sn.names
	if sn.disc.offline() {
		ents, err := nc.offlineList(dir) // disconnectednames.go
		return ents, false, true, err
	}
	if isProvFH(dir.FH) {
		return sn.provList(ctx, dir, c, open) // permitmake.go
	}
	key := credKey(c)
	if d := nc.usable(ctx, dir); d != nil {
		nc.mu.Lock()
		if d.by[key] {
			nc.stats.Hits++
			if open {
				nc.mu.Unlock()
				return nil, true, true, nil
			}
			ents := direntsOf(d.ents)
			nc.mu.Unlock()
			sn.FS.Stats().ListingsKept.Add(1)
			return ents, false, true, nil
		}
		nc.mu.Unlock()
	}
	sn.beforeDirRead(ctx, dir) // permitlocal.go
	if nc.unpromised(dir) {
		return nil, false, false, nil // the core's listing, kept by the kernel by version
	}
	ents, err := nc.fill(ctx, dir, c)
	if err != nil {
		return nil, false, false, nil // the core's READDIRPLUS tells
	}
	// ents is the installed listing's (cdir.ents), which others change
	// under nc.mu (forgetLocked, a local change's entry): read under it.
	nc.mu.Lock()
	out := direntsOf(ents)
	nc.mu.Unlock()
	return out, false, true, nil
}

// direntsOf is a listing's names for the kernel (no attributes: a lookup
// after it is answered from the cache).
func direntsOf(ents []cent) []vfs.DirEntry {
	out := make([]vfs.DirEntry, 0, len(ents))
	for _, e := range ents {
		if e.name != "" {
			out = append(out, vfs.DirEntry{Name: e.name, FileID: e.fileID, Type: e.typ})
		}
	}
	return out
}

// EntryTTLLocked is the kernel's lifetime of a name of dir (names.go).
func (sn *snfsFS) EntryTTLLocked(dir, child *vfs.Inode) (time.Duration, bool) {
	return sn.names.entryTTLLocked(dir, child)
}

// DirChanged applies this mount's own change of name in dir to dir's
// cached listing (the server breaks no promise of the changer: section
// 20.3); a change whose outcome is not known makes the listing stale, one
// the server refused changes nothing. A fill of dir in flight installs
// nothing: it may have read before the change.
func (sn *snfsFS) DirChanged(dir *vfs.Inode, name string, child *vfs.Inode, err error) {
	nc := sn.names
	var st nfs3.Status
	if err != nil && errors.As(err, &st) {
		return
	}
	var ce cent
	unknown := false // child is a provisional object settled without an inode here
	if err == nil && child != nil {
		if real, ok := sn.realOfProv(child.FH); ok {
			// A provisional object made on the server since (a silly
			// rename of a file made locally, still open): the name is
			// the real object's, never the provisional handle's.
			if ri := sn.FS.LookupInode(real); ri != nil {
				child = ri
			} else {
				unknown = true
			}
		}
		child.Mu.Lock()
		ce = cent{name: name, fileID: child.FileID, typ: child.Type, fh: child.FH, attr: child.Attr}
		child.Mu.Unlock()
	}
	dir.Mu.Lock()
	gen := dir.ModGen
	dir.Mu.Unlock()
	removed := false
	defer func() { // after nc.mu is released
		if removed {
			sn.FS.Logger().Debug("name cache: own change", "dir", dir.FileID, "name", name, "child", child != nil)
		}
	}()
	nc.mu.Lock()
	defer nc.mu.Unlock()
	for _, t := range nc.fills[string(dir.FH)] {
		t.broken = true
	}
	nc.offlineChangedLocked(dir, name, err)
	d := nc.dirs[string(dir.FH)]
	if d == nil || d.ino != dir {
		return
	}
	if err != nil || unknown {
		d.stale = true
		d.unsureLocked(name)
		return
	}
	if k, ok := d.index[name]; ok {
		removed = true
		d.ents[k].name = ""
		delete(d.index, name)
		d.gone++
		if e := d.ents[k]; e.fh != nil && nc.covered[string(e.fh)] == d &&
			(e.typ == nfs3.TypeDir || e.attr.Nlink <= 1 || !d.namesLocked(e.fh)) {
			// Still covered while another name of it is listed here
			// (a name removed of a multiply linked file).
			delete(nc.covered, string(e.fh))
		}
	}
	if child != nil {
		d.index[name] = len(d.ents)
		d.ents = append(d.ents, ce)
		nc.covered[string(ce.fh)] = d
	}
	if d.gone > 64 && d.gone > len(d.ents)/2 {
		live := d.ents[:0]
		for _, e := range d.ents {
			if e.name != "" {
				d.index[e.name] = len(live)
				live = append(live, e)
			}
		}
		d.ents, d.gone = live, 0
	}
	d.modGen = gen
}

// keepListing: dir's attributes were invalidated (generation old to gen)
// by a reintegration of changes its cached listing holds already: the
// listing stays valid, unless something else changed dir since it was
// last set.
func (nc *nameCache) keepListing(dir *vfs.Inode, old, gen uint64) {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	if d := nc.dirs[string(dir.FH)]; d != nil && d.ino == dir && !d.stale && d.modGen == old {
		d.modGen = gen
	}
}

// dirCallback serves a CB_CALLBACK with a directory's handle: the break of
// its promise (section 20.3). The cached listing goes, then the kernel's
// attributes of the directory and of what it lists and its listing pages,
// and then the answer: CB_OK, or CB_STALE when nothing of it was held. ok
// is false for a handle that is not a directory's (a file's callback).
func (sn *snfsFS) dirCallback(fh nfs3.FH, mode state.CallbackMode) (state.Outcome, bool) {
	nc := sn.names
	key := string(fh)
	nc.mu.Lock()
	d := nc.dirs[key]
	toks := nc.fills[key]
	queued := indexFH(nc.queue, fh) >= 0 || nc.releasing[key] > 0
	// A copy kept for disconnected operation is known stale now, unless
	// this mount changed it offline (offline.go: its changes are checked
	// against the server's names when they are sent).
	if c := nc.offl[key]; c == nil || !c.offChanged {
		queued = nc.dropOfflineLocked(key) || queued
	}
	if d == nil && len(toks) == 0 && !queued {
		nc.mu.Unlock()
		if i := sn.FS.LookupInode(fh); i == nil || !i.IsDir() {
			return 0, false
		}
		return state.Stale, true
	}
	nc.stats.Breaks++
	for _, t := range toks {
		t.broken = true
	}
	if k := indexFH(nc.queue, fh); k >= 0 {
		nc.queue = append(nc.queue[:k], nc.queue[k+1:]...) // broken: nothing to give back
	}
	if d != nil {
		nc.removeLocked(d)
	}
	nc.mu.Unlock()
	sn.FS.Logger().Debug("directory promise broken", "fh", fh, "mode", mode)
	if d != nil {
		sn.dropKernel(d)
	} else if i := sn.FS.LookupInode(fh); i != nil {
		i.Invalidate()
		sn.FS.NotifyAttr(i)
		sn.FS.NotifyData(i)
	}
	return state.OK, true
}

// dropKernel drops what was kept of d's listing outside the cache: the
// attributes of the directory and of the objects it lists (this mount's
// and the kernel's), unless the file protocol holds the object (its
// attributes are the protocol's), and the kernel's listing pages.
func (sn *snfsFS) dropKernel(d *cdir) {
	fs := sn.FS
	for _, e := range d.ents {
		if e.fh == nil || e.name == "" {
			continue
		}
		i := fs.LookupInode(e.fh)
		if i == nil {
			continue
		}
		i.Mu.Lock()
		held := stOf(i).Held() > 0
		if !held {
			i.InvalidateLocked()
		}
		i.Mu.Unlock()
		if !held {
			fs.NotifyAttr(i)
		}
	}
	if i := fs.LookupInode(d.fh); i != nil {
		i.Invalidate()
		fs.NotifyAttr(i)
		fs.NotifyData(i)
	}
}

// leaseWatch follows the session's calls (an Observer in front of the
// mount's own): the send time of the latest call answered since the latest
// REGISTER, and how many REGISTERs there were (a new connection, a server
// restart, a forgotten registration). Section 20.4: a promise may be used
// at t only if a call sent after t - callback_timeout/2 on the current
// connection was answered.
type leaseWatch struct {
	next sunrpc.Observer // may be nil

	mu    sync.Mutex
	regs  uint64
	since time.Time // the latest REGISTER's send time: calls sent before do not count
	sent  time.Time
}

// ObserveCall implements sunrpc.Observer.
func (l *leaseWatch) ObserveCall(program string, vers uint32, proc string, d time.Duration) {
	now := time.Now()
	s := now.Add(-d)
	l.mu.Lock()
	switch {
	case program == "snfs" && proc == "REGISTER":
		l.regs++
		l.since, l.sent = s, s
	case s.After(l.since) && s.After(l.sent):
		l.sent = s
	}
	l.mu.Unlock()
	if l.next != nil {
		l.next.ObserveCall(program, vers, proc, d)
	}
}

// state is the REGISTER count and the latest answered call's send time.
func (l *leaseWatch) state() (regs uint64, sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.regs, l.sent
}

// lease is the session's lease watch (nil: none, and nothing is cached).
func (sn *snfsFS) lease() *leaseWatch {
	if sn.cfg.handler == nil {
		return nil
	}
	return sn.cfg.handler.lease
}

// namesLocked reports whether a live entry of d names fh (nc.mu held).
func (d *cdir) namesLocked(fh nfs3.FH) bool {
	for _, e := range d.ents {
		if e.name != "" && string(e.fh) == string(fh) {
			return true
		}
	}
	return false
}
