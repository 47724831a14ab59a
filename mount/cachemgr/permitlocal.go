package cachemgr

import (
	"context"
	"os"
	"slices"
	"sync"

	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/snfs1"
)

// Changes made locally under a write-back permit (docs/mount.md "The
// client modification log"): so far the REMOVE, RMDIR and RENAME of objects
// the server made (no provisional object is involved). Such a change is made
// only when all of these hold, else it goes through the server as without
// permits:
//
//   - the directory is in the name cache under its promise, within the
//     lease (nameCache.usable): the mount then answers every lookup and
//     listing of it from what it changed, and it would have heard of a
//     recall (docs/protocol.md section 21.4, "Lease");
//   - the mount holds the directory's permit (asked here at the first
//     change; a refusal is remembered for a while) and no recall of it is
//     being served;
//   - the caller's credentials are the session's (REINTEGRATE carries the
//     session's: a change another user makes would be applied with the
//     mount's rights), and the object named is not open (a removed open
//     file is hidden by a RENAME through the server) and, for RMDIR, is a
//     cached directory with no entries.
//
// A change is logged (AppendLazy) and applied to the name cache while the
// recall is held off (permits.changing), so the recall's reintegration
// sends every change the mount made before it answers. A change that the
// core sends to the server (BeforeDirChange) first sends the log: the server
// applies the changes in the order the mount made them.

// localCred reports whether c is the session's credentials.
func localCred(c vfs.Cred) bool {
	return c.UID == uint32(os.Getuid()) && c.GID == uint32(os.Getgid())
}

// LocalRemove is vfs.Ops.LocalRemove in snfs mode.
func (sn *snfsFS) LocalRemove(ctx context.Context, dir *vfs.Inode, c vfs.Cred, name string, child *vfs.Inode, rmdir bool) (bool, error) {
	if sn.disc.offline() {
		done, err := sn.offlineRemove(ctx, dir, c, name, rmdir) // offline.go
		if done && err == nil && child != nil {
			child.Invalidate() // its link count and ctime changed
		}
		return done, err
	}
	p := sn.permits
	if p == nil || !p.online || !localCred(c) || name == "." || name == ".." || len(name) > maxCachedName {
		return false, nil
	}
	if child != nil {
		if isProvFH(child.FH) {
			sn.waitOffRelease(ctx, child) // permitcreate.go, offlinedata.go
		}
		child.Mu.Lock()
		open := child.Opens > 0
		child.Mu.Unlock()
		if open {
			return false, nil
		}
	}
	nc := sn.names
	d := nc.usable(ctx, dir)
	if d == nil {
		return false, nil
	}
	nc.mu.Lock()
	k, found := d.index[name]
	var e cent
	if found {
		e = d.ents[k]
	}
	nc.mu.Unlock()
	if !found || e.fh == nil || (e.typ == nfs3.TypeDir) != rmdir {
		return false, nil // the server's error (ENOENT, EISDIR, ENOTDIR) as without permits
	}
	if rmdir && !sn.emptyCached(ctx, e.fh) {
		return false, nil
	}
	if _, ok := p.get(ctx, dir.FH, false); !ok {
		return false, nil
	}
	op := snfs1.CMLUnlink
	if rmdir {
		op = snfs1.CMLRmdir
	}
	done, err := p.logged(func() error {
		// Checked again under the recall's hold-off: a break or a recall
		// may have come since.
		if nc.usable(ctx, dir) != d {
			return errNotLocal
		}
		rec := snfs1.CMLRecord{Op: op, Dir: snfs1.ObjRef{FH: dir.FH}, Name: name}
		if _, err := p.log.AppendLazyBased(rec, p.permitBase(dir.FH, name, e, true)); err != nil { // permitlost.go
			sn.FS.Logger().Warn("the modification log", "err", err)
			return errNotLocal
		}
		sn.DirChanged(dir, name, nil, nil)
		now := nowNFS()
		if rmdir {
			sn.localDirChanged(dir, -1, now) // permittimes.go
		} else {
			sn.localDirChanged(dir, 0, now)
			sn.localUnlinked(e.fh, e.attr, now)
		}
		return nil
	}, dir.FH)
	if !done {
		return false, nil
	}
	if err == nil && isProvFH(e.fh) {
		p.offGone(e.fh) // its local data too (permitdata.go)
	} else if err == nil && rmdir {
		p.removedDir(e.fh) // its permit given back (permitrelease.go)
	}
	sn.stats.LocalChanges.Add(1)
	return true, err
}

// emptyCached reports whether the directory fh is cached under its promise
// and lists nothing but "." and "..".
func (sn *snfsFS) emptyCached(ctx context.Context, fh nfs3.FH) bool {
	i := sn.FS.LookupInode(fh)
	if i == nil {
		return false
	}
	nc := sn.names
	d := nc.usable(ctx, i)
	if d == nil {
		return false
	}
	nc.mu.Lock()
	defer nc.mu.Unlock()
	for _, e := range d.ents {
		if e.name != "" && e.name != "." && e.name != ".." {
			return false
		}
	}
	return true
}

// errNotLocal: the change cannot be made locally after all.
var errNotLocal = &notLocal{}

type notLocal struct{}

func (*notLocal) Error() string { return "cachemgr: not made locally" }

// BeforeDirChange is vfs.Ops.BeforeDirChange in snfs mode: a change the core
// sends to the server waits for the log to be sent (the whole log: it is
// applied in order, and a change through the server must come after what the
// mount made before it).
func (sn *snfsFS) BeforeDirChange(ctx context.Context, _ ...*vfs.Inode) error {
	p := sn.permits
	if p == nil || p.log.Len() == 0 {
		return nil
	}
	return p.flush(ctx, "a change through the server")
}

// changeGate holds off a recall while a local change is logged and applied.
type changeGate struct {
	mu        sync.RWMutex
	recalling map[string]int // directories whose recall is being served
}

// logged runs fn, a local change of dirs, if their permits are held and
// none is being recalled, with recalls held off until fn returns; done
// reports whether fn ran and made the change.
func (p *permits) logged(fn func() error, dirs ...nfs3.FH) (done bool, err error) {
	p.gate.mu.RLock()
	defer p.gate.mu.RUnlock()
	for _, dir := range dirs {
		p.mu.Lock()
		_, held := p.held[string(dir)]
		p.mu.Unlock()
		if !held || p.gate.recallingLocked(dir) {
			return false, nil
		}
	}
	if err := fn(); err != errNotLocal {
		return true, err
	}
	return false, nil
}

// recallingLocked reports whether dir's recall is being served (gate.mu
// held, either way).
func (g *changeGate) recallingLocked(dir nfs3.FH) bool {
	return g.recalling[string(dir)] > 0
}

// beginRecall marks dir's recall as being served once no local change is
// in progress: changes after it go through the server.
func (p *permits) beginRecall(dir nfs3.FH) func() {
	p.gate.mu.Lock()
	if p.gate.recalling == nil {
		p.gate.recalling = map[string]int{}
	}
	p.gate.recalling[string(dir)]++
	p.gate.mu.Unlock()
	return func() {
		p.gate.mu.Lock()
		if p.gate.recalling[string(dir)]--; p.gate.recalling[string(dir)] <= 0 {
			delete(p.gate.recalling, string(dir))
		}
		p.gate.mu.Unlock()
	}
}

// beforeDirRead runs before dir is read from the server (a LOOKUP, a
// listing: the name cache does not answer): if the log changes dir's
// entries, or the attributes of an object last seen in dir (a chmod made
// locally of a child directory, a file's link count: the reply's
// attributes of it would replace those made here), it goes first, so that
// what the server answers holds the changes made here (a listing dropped
// by its lease's end, an eviction or this mount's own reintegration is
// read again from the server). Records of other directories stay, those
// changing a child directory's entries too: a lookup in a directory not
// cached (each path walk through it asks the mount) must not send the log
// (a known limit: the child's mtime and link count made here read as the
// server's until the log is in).
func (sn *snfsFS) beforeDirRead(ctx context.Context, dir *vfs.Inode) {
	p := sn.permits
	if p == nil || p.log.Len() == 0 {
		return
	}
	in := func(fh nfs3.FH) bool {
		i := sn.FS.LookupInode(fh)
		if i == nil {
			return false
		}
		i.NameMu.Lock()
		defer i.NameMu.Unlock()
		return string(i.Dir) == string(dir.FH)
	}
	// Collected first, checked without the log's and links' locks.
	linked, many := p.links.list()
	if !many && !p.log.ChangesDir(dir.FH) && !slices.ContainsFunc(append(p.log.AttrsChanged(), linked...), in) {
		return
	}
	if err := p.flush(ctx, "a directory read from the server"); err != nil {
		sn.FS.Logger().Warn("reintegration before a directory read", "err", err)
	}
}

// cachedEntry returns name's entry in dir's cached listing d.
func (nc *nameCache) cachedEntry(d *cdir, name string) (cent, bool) {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	k, ok := d.index[name]
	if !ok {
		return cent{}, false
	}
	return d.ents[k], true
}

// LocalRename is vfs.Ops.LocalRename in snfs mode: a RENAME made locally
// under the permits of both directories, as LocalRemove's conditions say,
// and these: the object moved is not a directory unless it stays in its
// directory (a directory moved elsewhere changes its own "..", which its
// cached listing would not show); the name it replaces, if any, is not a
// directory's nor an open file's (the server decides those, or hides the
// open file); with noReplace, newName is free.
func (sn *snfsFS) LocalRename(ctx context.Context, from *vfs.Inode, name string, to *vfs.Inode, newName string, c vfs.Cred, target *vfs.Inode, noReplace bool) (bool, error) {
	if sn.disc.offline() {
		done, err := sn.offlineRename(ctx, from, name, to, newName, c, noReplace) // offline.go
		if done && err == nil && target != nil {
			target.Invalidate() // its link count and ctime changed
		}
		return done, err
	}
	p := sn.permits
	if p == nil || !p.online || !localCred(c) || from == to && name == newName {
		return false, nil
	}
	for _, n := range []string{name, newName} {
		if n == "." || n == ".." || n == "" || len(n) > maxCachedName {
			return false, nil
		}
	}
	if target != nil {
		target.Mu.Lock()
		open := target.Opens > 0
		target.Mu.Unlock()
		if open {
			return false, nil
		}
	}
	nc := sn.names
	df, dt := nc.usable(ctx, from), nc.usable(ctx, to)
	if df == nil || dt == nil {
		return false, nil
	}
	moved, ok := nc.cachedEntry(df, name)
	if !ok || moved.fh == nil || moved.typ == nfs3.TypeDir && from != to {
		return false, nil
	}
	old, replaced := nc.cachedEntry(dt, newName)
	if replaced {
		if noReplace || old.fh == nil || old.typ == nfs3.TypeDir || moved.typ == nfs3.TypeDir {
			return false, nil
		}
	}
	for _, d := range []*vfs.Inode{from, to} {
		if _, ok := p.get(ctx, d.FH, false); !ok {
			return false, nil
		}
	}
	start := sn.FS.AttrStart()
	mi := sn.FS.LookupInode(moved.fh)
	if mi == nil {
		mi = sn.FS.Inode(moved.fh, &moved.attr, start)
	}
	done, err := p.logged(func() error {
		if nc.usable(ctx, from) != df || nc.usable(ctx, to) != dt {
			return errNotLocal
		}
		if e, ok := nc.cachedEntry(df, name); !ok || string(e.fh) != string(moved.fh) {
			return errNotLocal
		}
		rec := snfs1.CMLRecord{Op: snfs1.CMLRename, Dir: snfs1.ObjRef{FH: from.FH}, Name: name,
			ToDir: snfs1.ObjRef{FH: to.FH}, ToName: newName}
		bases := append(p.permitBase(from.FH, name, moved, true), p.permitBase(to.FH, newName, old, replaced)...)
		if _, err := p.log.AppendLazyBased(rec, bases); err != nil { // permitlost.go
			sn.FS.Logger().Warn("the modification log", "err", err)
			return errNotLocal
		}
		sn.DirChanged(from, name, nil, nil)
		sn.DirChanged(to, newName, mi, nil)
		now := nowNFS()
		sn.localDirChanged(from, 0, now) // permittimes.go
		if to != from {
			sn.localDirChanged(to, 0, now)
		}
		if replaced {
			sn.localUnlinked(old.fh, old.attr, now)
		}
		return nil
	}, from.FH, to.FH)
	if !done {
		return false, nil
	}
	if err == nil && replaced && isProvFH(old.fh) && !p.made.dropName(old.fh) { // another name: kept (offlinelink.go)
		if o, ok := p.made.of(old.fh); ok {
			p.dropOffData(o.id) // replaced: its data never goes (permitdata.go)
		}
	}
	sn.stats.LocalChanges.Add(1)
	return true, err
}
