package cachemgr

import (
	"time"

	"snfs/mount/vfs"
	"snfs/nfs3"
)

// Listings served while disconnected (docs/mount.md, "Disconnected
// operation"; issue 26 item 4). Online, a listing is used only under its
// directory's promise (docs/protocol.md section 20.4). When the promise ends
// with the connection or the lease (a lost connection, another REGISTER,
// the mount going offline), the listing is not known stale, only no longer
// promised: it is kept as an offline copy, and while the mount is offline
// its names (a lookup's hit and, the listing being complete, its miss) and
// its listing are answered from it, with the attributes as last seen:
// Coda's disconnected semantics, what the mount last knew. A break from
// the server (the directory changed) drops the copy, so does this mount's
// own change of the directory online; a name whose own change has an
// unknown outcome is not answered from it. Online, no copy is used: the
// mount going online, or a lease held by a call sent after the copies were
// kept (the connection came back before the mount went offline), drops
// them all, and the next use lists again under a new promise.

// keepOfflineLocked keeps d, whose promise ends with the connection or the
// lease, as the offline copy of its directory (bounded as the cache is).
func (nc *nameCache) keepOfflineLocked(d *cdir) {
	if nc.closed || d.broken {
		return
	}
	nc.dropOfflineLocked(d.key)
	nc.offKept = time.Now()
	d.offElem = nc.offLRU.PushFront(d)
	nc.offl[d.key] = d
	for e := nc.offLRU.Back(); e != nil && nc.offLRU.Len() > maxCachedDirs; {
		c := e.Value.(*cdir)
		e = e.Prev()
		if !c.offChanged {
			nc.dropOfflineLocked(c.key)
		}
	}
}

// dropOfflineLocked drops key's offline copy, reporting whether there was
// one.
func (nc *nameCache) dropOfflineLocked(key string) bool {
	c := nc.offl[key]
	if c == nil {
		return false
	}
	delete(nc.offl, key)
	nc.offLRU.Remove(c.offElem)
	c.offElem = nil
	return true
}

// connectedLocked: a lease holds (online) with sent the send time of the
// latest call answered: if it was sent after the latest copy was kept (the
// server answered since the connection was lost, not only before), the
// offline copies are of no more use, listings are promised again.
func (nc *nameCache) connectedLocked(sent time.Time) {
	if len(nc.offl) == 0 || nc.goingOff || nc.sn.disc.offline() || !sent.After(nc.offKept) {
		return
	}
	clear(nc.offl)
	nc.offLRU.Init()
}

// unsureLocked records that name's own change has an unknown outcome.
func (d *cdir) unsureLocked(name string) {
	if d.unsure == nil {
		d.unsure = map[string]bool{}
	}
	d.unsure[name] = true
}

// offlineChangedLocked applies this mount's own change of name in dir
// (DirChanged) to dir's offline copy: done, the copy is stale (dropped); an
// unknown outcome (a call cut by the disconnection) leaves name unanswered.
func (nc *nameCache) offlineChangedLocked(dir *vfs.Inode, name string, err error) {
	key := string(dir.FH)
	c := nc.offl[key]
	if c == nil {
		return
	}
	if err == nil {
		nc.dropOfflineLocked(key)
		return
	}
	c.unsureLocked(name)
}

// wentOffline: the mount goes offline; the listings cached become offline
// copies (their promises are given back once online: backOnline), the fills
// in flight install nothing, nor do those begun until the mount is back
// online. It runs before the mount is offline (goOffline), so that the
// first operation served offline finds the copies.
func (nc *nameCache) wentOffline() {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	nc.goingOff = true
	for _, d := range nc.dirs {
		nc.keepOfflineLocked(d)
		nc.removeLocked(d)
	}
	for _, toks := range nc.fills {
		for _, t := range toks {
			t.off = true
		}
	}
}

// backOnline: the mount is online again; the offline copies go (promises
// the server may still count for them are given back) and each directory
// is listed again at its next use.
func (nc *nameCache) backOnline() {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	for _, c := range nc.offl {
		if !isProvFH(c.fh) { // made offline: never promised, nor sent
			nc.queueLocked(c.fh)
		}
	}
	nc.goingOff = false
	clear(nc.offl)
	nc.offLRU.Init()
	nc.startReleaseLocked()
}

// offlineCopyLocked is dir's offline copy, if it may answer: the directory's
// inode is the one listed and not changed since (a wcc, an invalidation) or
// another one for its handle (the kernel forgot the listed one: the copy
// is all the mount knows).
func (nc *nameCache) offlineCopyLocked(dir *vfs.Inode, gen uint64) *cdir {
	c := nc.offl[string(dir.FH)]
	if c == nil || c.ino == dir && c.modGen != gen {
		return nil
	}
	nc.offLRU.MoveToFront(c.offElem)
	return c
}

// offlineName is LookupName while offline from dir's offline copy: ok false
// when the copy cannot tell (none, or name's own change has an unknown
// outcome, or it carries no handle); a name not in the (complete) listing
// does not exist.
func (nc *nameCache) offlineName(dir *vfs.Inode, name string) (vfs.Entry, bool, error) {
	dir.Mu.Lock()
	gen := dir.ModGen
	dir.Mu.Unlock()
	nc.mu.Lock()
	c := nc.offlineCopyLocked(dir, gen)
	if c == nil || c.unsure[name] {
		nc.mu.Unlock()
		return vfs.Entry{}, false, nil
	}
	k, found := c.index[name]
	if !found {
		nc.mu.Unlock()
		return vfs.Entry{}, true, nfs3.ErrNoEnt
	}
	e := c.ents[k]
	nc.mu.Unlock()
	if e.fh == nil {
		return vfs.Entry{}, false, nil
	}
	fs := nc.sn.FS
	i := fs.LookupInode(e.fh)
	if i == nil {
		if e.noAttr || e.attr.Type == 0 {
			return vfs.Entry{}, false, nil
		}
		i = fs.Inode(e.fh, &e.attr, fs.AttrStart())
	}
	i.NameMu.Lock()
	i.Dir, i.Name = dir.FH, name
	i.NameMu.Unlock()
	i.Mu.Lock()
	defer i.Mu.Unlock()
	if !attrKnownLocked(i) {
		return vfs.Entry{}, true, ErrDisconnected
	}
	return vfs.Entry{Inode: i, Attr: i.ReportLocked(), AttrTTL: offlineAttrTTL}, true, nil
}

// offlineList is ListNames while offline: dir's offline copy's names, or
// ErrDisconnected.
func (nc *nameCache) offlineList(dir *vfs.Inode) ([]vfs.DirEntry, error) {
	dir.Mu.Lock()
	gen := dir.ModGen
	dir.Mu.Unlock()
	nc.mu.Lock()
	c := nc.offlineCopyLocked(dir, gen)
	var ents []vfs.DirEntry
	if c != nil {
		ents = direntsOf(c.ents)
	}
	nc.mu.Unlock()
	if c == nil {
		nc.sn.FS.Logger().Debug("disconnected: no listing kept", "dir", nc.sn.PathOf(dir))
		return nil, ErrDisconnected
	}
	return ents, nil
}
