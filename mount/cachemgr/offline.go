package cachemgr

import (
	"context"
	"sync"
	"syscall"
	"time"

	"snfs/mount/cachedir"
	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/snfs1"
)

// Namespace changes while disconnected (docs/mount.md, "Disconnected
// operation"; issue 26 item 4, Coda's emulation mode). Offline, a
// directory whose offline copy the mount has (disconnectednames.go) is
// treated as if its write-back permit were held: CREATE, MKDIR, SYMLINK,
// LINK, REMOVE, RMDIR and RENAME within and between such directories are made in the
// copies and logged in the modification log (mount/cml), as permitlocal.go
// and permitmake.go make them under a permit; what they make is a
// provisional object (permitmake.go), and a directory made so gets an
// offline copy of its own (listed, empty), so that changes in it are made
// offline too. A regular file made offline keeps its data in a file of the
// cache directory's offline/ directory, named by its provisional id
// (offlinedata.go), durable at close and fsync as a cached file's data is.
// On reconnection the log is reintegrated under permits asked for first,
// with the names it changes checked against what the copies said as the
// mount went offline (offlinereint.go).
//
// What is not made offline fails with ErrDisconnected (EHOSTDOWN), as
// before: a change in a directory without an offline copy; a LINK of a
// directory (those of files, made here or by the server: offlinelink.go);
// MKNOD; a SETATTR other than those of offlinesetattr.go (objects made
// here) and offlineattr.go (objects the server made), and a truncation
// other than a file made offline's (offlinedata.go) or a cached file's
// open for writing; a RENAME of a directory to another directory; a
// REMOVE or RENAME over a file open here; another user's change (the log
// is applied with the session's credentials).

// offBase is what a name of a directory the server made held as the mount
// went offline (its offline copy's entry, or none): what the server must
// still hold there for the log's records of that name to be applied
// (offlinereint.go).
type offBase struct {
	dir  nfs3.FH
	name string
	fh   nfs3.FH // nil: no such name
	// ver: the version of fh (a regular file) the mount last knew: its
	// size and mtime as the server last gave them (the data's version, as
	// checkBase compares a dirty file's base); nil: not known, or not a
	// regular file (the name's object alone is compared).
	ver *cachedir.Base
}

// offLog is the permits' state of the changes made offline.
type offLog struct {
	// change: one offline change at a time (the log's order is the
	// copies'); taken before mu.
	change sync.Mutex
	mu     sync.Mutex
	// base: by offNameKey, the first offline change's view of each name
	// of a directory the server made that the log changes (also in the
	// bases file: offlinebase.go).
	base map[string]offBase
	// pending: records logged offline (or left by a killed mount with
	// disconnected operation) are in the log: the next reintegration asks
	// for the permits of the log's directories first and does not send
	// without them (offlinereint.go).
	pending bool
	// poison: names (by refKey) a refused record or a changed base made
	// unsure: later records that remove, move or replace them are kept as
	// conflicts instead of being sent (they would act on someone else's
	// object).
	poison map[string]bool
	// data: the offline data of files made offline, by provisional id.
	data map[uint64]*offData
	// refused: when a permit the log needs was last refused (zero: not
	// lately); not asked again for permitRefusal.
	refused time.Time
	// checked: names were checked against their bases after their permits
	// were lost (permitlost.go): a refused record poisons its names too.
	checked bool
	// durable: the bases file holds what the check found (offlinebase.go's
	// saveChecked): a name poisoned since is added to it.
	durable bool
	// attr: by handle, the bases of the objects the server made whose
	// attributes were changed offline (offlineattr.go), until checked;
	// attrChecked: those checked, until the log is in (a refused
	// SETATTR's conflict is named by them).
	attr, attrChecked map[string]attrBase
	// localDirs: the directories (by handle) records in the log changed,
	// and the objects whose attributes they changed (SETATTR, LINK), as
	// the mount last went offline: their attributes may be this mount's
	// own, made under their permits (permittimes.go, permitsetattr.go),
	// not the server's (offlineattr.go takes no base from them).
	localDirs map[string]bool
	// timesDirs: the directories the server made whose mtime an offline
	// change of their entries set here (offDirChanged): their attributes
	// are asked of the server again once the log is in after the
	// reconnection (a log the optimiser emptied sends none back).
	timesDirs map[string]*vfs.Inode
}

// offNameKey is the key of name in the directory dir names.
func offNameKey(dir snfs1.ObjRef, name string) string {
	if dir.Prov != 0 {
		return "p" + string(provFH(dir.Prov)) + "/" + name
	}
	return "h" + string(dir.FH) + "/" + name
}

// offDirRef is how the log names dir: by handle, or by the provisional id
// of a live object made here (false: a provisional object already sent or
// gone: not changed offline).
func (p *permits) offDirRef(dir *vfs.Inode) (snfs1.ObjRef, bool) {
	if !isProvFH(dir.FH) {
		return snfs1.ObjRef{FH: dir.FH}, true
	}
	o, ok := p.made.of(dir.FH)
	if !ok || !o.live {
		return snfs1.ObjRef{}, false
	}
	return snfs1.ObjRef{Prov: o.id}, true
}

// noteBase records name's entry e (found) in dir as its base, if this is
// the first offline change of it; names of provisional directories have
// none (the server has nothing there).
func (p *permits) noteBase(dir *vfs.Inode, name string, e cent, found bool) {
	if isProvFH(dir.FH) {
		return
	}
	k := offNameKey(snfs1.ObjRef{FH: dir.FH}, name)
	p.off.mu.Lock()
	defer p.off.mu.Unlock()
	if p.off.base == nil {
		p.off.base = map[string]offBase{}
	}
	if _, ok := p.off.base[k]; ok {
		return
	}
	b := offBase{dir: append(nfs3.FH(nil), dir.FH...), name: name}
	if found && !isProvFH(e.fh) {
		b.fh = append(nfs3.FH(nil), e.fh...)
		b.ver = p.versionOf(e)
	}
	if found && isProvFH(e.fh) {
		return // made here under a permit before going offline: the log's own
	}
	p.off.base[k] = b
	p.saveBase(b) // offlinebase.go
}

// versionOf is the version of e's object (a regular file) the mount last
// knew from the server (nil: none known): the base of its dirty data if
// the cache holds some (the inode's attributes are then this mount's own,
// not the server's), else the inode's attributes, else the listing's.
func (p *permits) versionOf(e cent) *cachedir.Base {
	if e.typ != nfs3.TypeReg {
		return nil
	}
	if i := p.sn.FS.LookupInode(e.fh); i != nil {
		if cf := cacheFileOrNil(i); cf != nil && cf.NeedsWriteBack() {
			if b, ok := cf.Base(); ok {
				return &b
			}
			return nil // dirty since before bases were kept: not known
		}
		i.Mu.Lock()
		a := i.Attr
		i.Mu.Unlock()
		if a.Type == nfs3.TypeReg {
			b := baseOf(&a)
			return &b
		}
	}
	if e.noAttr || e.attr.Type != nfs3.TypeReg {
		return nil
	}
	b := baseOf(&e.attr)
	return &b
}

// offCopy is dir's offline copy if changes may be made in it offline.
func (nc *nameCache) offCopy(dir *vfs.Inode) *cdir {
	dir.Mu.Lock()
	gen := dir.ModGen
	dir.Mu.Unlock()
	nc.mu.Lock()
	defer nc.mu.Unlock()
	return nc.offlineCopyLocked(dir, gen)
}

// offEntry is name's entry in c.
func (nc *nameCache) offEntry(c *cdir, name string) (cent, bool, bool) {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	if c.unsure[name] {
		return cent{}, false, true
	}
	k, ok := c.index[name]
	if !ok {
		return cent{}, false, false
	}
	return c.ents[k], true, false
}

// offApplyLocked changes name in the offline copy c of a directory whose
// attribute generation is gen (read before nc.mu: an inode's Mu is taken
// before nc.mu, never after): removed, then set to e unless e is nil.
// nc.mu held.
func (nc *nameCache) offApplyLocked(c *cdir, gen uint64, name string, e *cent) {
	if k, ok := c.index[name]; ok {
		c.ents[k].name = ""
		delete(c.index, name)
		c.gone++
	}
	if e != nil {
		ce := *e
		ce.name = name
		c.index[name] = len(c.ents)
		c.ents = append(c.ents, ce)
	}
	c.offChanged = true
	c.modGen = gen
}

// modGenOf is i's attribute generation.
func modGenOf(i *vfs.Inode) uint64 {
	i.Mu.Lock()
	defer i.Mu.Unlock()
	return i.ModGen
}

// offInstallEmpty gives i, a directory made offline, an offline copy:
// listed and empty.
func (nc *nameCache) offInstallEmpty(i, parent *vfs.Inode) {
	i.Mu.Lock()
	gen, a := i.ModGen, i.Attr
	i.Mu.Unlock()
	parent.Mu.Lock()
	pa := parent.Attr
	parent.Mu.Unlock()
	d := &cdir{key: string(i.FH), fh: i.FH, ino: i, modGen: gen,
		ents:  []cent{{name: ".", fileID: i.FileID, typ: nfs3.TypeDir, attr: a}, {name: "..", fileID: parent.FileID, typ: nfs3.TypeDir, attr: pa}},
		index: map[string]int{".": 0, "..": 1}, by: map[string]bool{}, offChanged: true}
	nc.mu.Lock()
	defer nc.mu.Unlock()
	nc.dropOfflineLocked(d.key)
	d.offElem = nc.offLRU.PushFront(d)
	nc.offl[d.key] = d
}

// offlineUsable reports whether a change of names may be made offline by c.
func (sn *snfsFS) offlineUsable(c vfs.Cred, names ...string) bool {
	if sn.permits == nil || !localCred(c) {
		return false
	}
	for _, n := range names {
		if n == "" || n == "." || n == ".." || len(n) > maxCachedName {
			return false
		}
	}
	return true
}

// offlineMake makes name in dir offline (offline.go's rules): a directory
// or a regular file, a provisional object as localMake's. done false:
// ErrDisconnected, as before.
func (sn *snfsFS) offlineMake(dir *vfs.Inode, c vfs.Cred, name string, typ nfs3.FType, mode uint32) (vfs.Entry, bool, error) {
	return sn.offlineMakeObj(dir, c, name, typ, mode, "")
}

// offlineMakeObj is offlineMake, with a symbolic link's target (typ
// nfs3.TypeLnk: mode is ignored, a link's is 0777), as localMakeObj.
func (sn *snfsFS) offlineMakeObj(dir *vfs.Inode, c vfs.Cred, name string, typ nfs3.FType, mode uint32, target string) (vfs.Entry, bool, error) {
	p := sn.permits
	if !sn.offlineUsable(c, name) || typ == nfs3.TypeReg && mode&0o6000 != 0 {
		return vfs.Entry{}, false, nil
	}
	nc := sn.names
	cp := nc.offCopy(dir)
	if cp == nil {
		return vfs.Entry{}, false, nil
	}
	ref, ok := p.offDirRef(dir)
	if !ok {
		return vfs.Entry{}, false, nil
	}
	p.off.change.Lock()
	defer p.off.change.Unlock()
	old, found, unsure := nc.offEntry(cp, name)
	if unsure {
		return vfs.Entry{}, false, nil
	}
	if found {
		return vfs.Entry{}, true, nfs3.ErrExist // the copy is complete
	}
	dir.Mu.Lock()
	pa := dir.Attr
	dir.Mu.Unlock()
	m := mode & 0o7777
	now := vfs.NFSTime(time.Now())
	a := nfs3.Fattr{Type: typ, Mode: m, Nlink: 1, UID: c.UID, GID: c.GID, FSID: pa.FSID, Atime: now, Mtime: now, Ctime: now}
	op := snfs1.CMLCreate
	switch typ {
	case nfs3.TypeDir:
		op = snfs1.CMLMkdir
		a.Nlink, a.Size, a.Used = 2, 4096, 4096
	case nfs3.TypeLnk:
		op = snfs1.CMLSymlink // localMakeObj's: what the server's symlink(2) makes
		m, a.Mode, a.Size = 0o777, 0o777, uint64(len(target))
	}
	if pa.Mode&syscall.S_ISGID != 0 {
		a.GID = pa.GID
		if typ == nfs3.TypeDir {
			a.Mode |= syscall.S_ISGID
		}
	}
	p.noteBase(dir, name, old, false)
	at := nfs3.SetTime{How: nfs3.SetToClientTime, Time: now}
	rec := snfs1.CMLRecord{Op: op, Dir: ref, Name: name, Attr: nfs3.Sattr{Mode: &m, Atime: at, Mtime: at}}
	if typ == nfs3.TypeLnk {
		rec.Attr.Mode, rec.Target = nil, target // its times only, as localMakeObj's
	}
	id, err := p.log.AppendLazyBased(rec,
		p.permitBase(dir.FH, name, old, false)) // permitlost.go: if the permit asked at reconnection is lost too
	if err != nil {
		sn.FS.Logger().Warn("the modification log", "err", err)
		return vfs.Entry{}, false, nil
	}
	p.setPending()
	fh := provFH(id)
	a.FileID = provFileID(id)
	o := &provObj{id: id, fh: fh, live: true}
	if typ == nfs3.TypeReg {
		o.creator = &c
		if err := p.newOffData(id); err != nil {
			sn.FS.Logger().Warn("offline data file", "err", err)
		}
	}
	p.made.add(o)
	i := sn.FS.Inode(fh, &a, sn.FS.AttrStart())
	i.NameMu.Lock()
	i.Dir, i.Name = dir.FH, name
	i.NameMu.Unlock()
	switch typ {
	case nfs3.TypeDir:
		nc.offInstallEmpty(i, dir)
	case nfs3.TypeLnk:
		i.Mu.Lock()
		i.SetTargetLocked(target) // readlink answered here, offline too
		i.Mu.Unlock()
	}
	e := cent{fileID: a.FileID, typ: typ, fh: fh, attr: a}
	gen := modGenOf(dir)
	nc.mu.Lock()
	nc.offApplyLocked(cp, gen, name, &e)
	nc.mu.Unlock()
	links := 0
	if typ == nfs3.TypeDir {
		links = 1
	}
	sn.offDirChanged(dir, links, now)
	sn.stats.LocalChanges.Add(1)
	sn.FS.Logger().Debug("disconnected: made locally", "op", op, "dir", sn.PathOf(dir), "name", name, "prov", id)
	return vfs.Entry{Inode: i, Attr: a, AttrTTL: offlineAttrTTL}, true, nil
}

// offlineCreate is Create while offline: the file made (offlineMake) and
// opened on its offline data (offlinedata.go).
func (sn *snfsFS) offlineCreate(dir *vfs.Inode, c vfs.Cred, name string, mode uint32, flags int) (vfs.Entry, *vfs.File, bool, error) {
	e, done, err := sn.offlineMake(dir, c, name, nfs3.TypeReg, mode)
	if !done || err != nil {
		return vfs.Entry{}, nil, done, err
	}
	f, err := sn.offlineOpenFile(e.Inode, c, flags&^(syscall.O_CREAT|syscall.O_EXCL|syscall.O_TRUNC))
	if err != nil {
		return vfs.Entry{}, nil, true, err
	}
	return e, f, true, nil
}

// offlineRemove is LocalRemove while offline.
func (sn *snfsFS) offlineRemove(ctx context.Context, dir *vfs.Inode, c vfs.Cred, name string, rmdir bool) (bool, error) {
	p := sn.permits
	if !sn.offlineUsable(c, name) {
		return false, nil
	}
	nc := sn.names
	cp := nc.offCopy(dir)
	if cp == nil {
		return false, nil
	}
	ref, ok := p.offDirRef(dir)
	if !ok {
		return false, nil
	}
	p.off.change.Lock()
	defer p.off.change.Unlock()
	e, found, unsure := nc.offEntry(cp, name)
	switch {
	case unsure:
		return false, nil
	case !found:
		return true, nfs3.ErrNoEnt
	case e.fh == nil:
		return false, nil
	case rmdir && e.typ != nfs3.TypeDir:
		return true, nfs3.ErrNotDir
	case !rmdir && e.typ == nfs3.TypeDir:
		return true, nfs3.ErrIsDir
	}
	if rmdir {
		ci := sn.FS.LookupInode(e.fh)
		if ci == nil {
			return false, nil
		}
		sub := nc.offCopy(ci)
		if sub == nil {
			return false, nil
		}
		nc.mu.Lock()
		empty := true
		for _, se := range sub.ents {
			if se.name != "" && se.name != "." && se.name != ".." {
				empty = false
			}
		}
		nc.mu.Unlock()
		if !empty {
			return true, nfs3.ErrNotEmpty
		}
	} else if sn.offlineOpen(ctx, e.fh) {
		return false, nil // an open file is hidden by a RENAME through the server
	}
	sn.offRemoving.run(dir)
	p.noteBase(dir, name, e, true)
	op := snfs1.CMLUnlink
	if rmdir {
		op = snfs1.CMLRmdir
	}
	if _, err := p.log.AppendLazyBased(snfs1.CMLRecord{Op: op, Dir: ref, Name: name}, p.permitBase(dir.FH, name, e, true)); err != nil {
		sn.FS.Logger().Warn("the modification log", "err", err)
		return false, nil
	}
	p.setPending()
	gen := modGenOf(dir)
	nc.mu.Lock()
	nc.offApplyLocked(cp, gen, name, nil)
	if rmdir {
		nc.dropOfflineLocked(string(e.fh))
	}
	nc.mu.Unlock()
	links := 0
	if rmdir {
		links = -1
	}
	sn.offDirChanged(dir, links, nowNFS())
	if !rmdir {
		// Its other names, if any, have one link fewer: a server's file
		// with several names as much as one made offline.
		sn.offUnlinked(e.fh, e.attr)
	}
	if isProvFH(e.fh) {
		p.offGone(e.fh)
	}
	sn.stats.LocalChanges.Add(1)
	return true, nil
}

// offlineOpen reports whether the object fh is open here (a provisional
// file's open whose close was seen is waited for a moment: its RELEASE
// follows the close).
func (sn *snfsFS) offlineOpen(ctx context.Context, fh nfs3.FH) bool {
	i := sn.FS.LookupInode(fh)
	if i == nil {
		return false
	}
	open := func() bool {
		i.Mu.Lock()
		defer i.Mu.Unlock()
		return i.Opens > 0
	}
	if !open() || !isProvFH(fh) {
		return open()
	}
	sn.waitOffRelease(ctx, i)
	return open()
}

// offUnlinked: the object fh (its entry's attributes ea), not a
// directory, lost a name offline: another name of it, if any (a link made
// offline, offlinelink.go, or the server's), has one link fewer, in its
// inode and the offline copies' entries.
func (sn *snfsFS) offUnlinked(fh nfs3.FH, ea nfs3.Fattr) {
	sn.localUnlinked(fh, ea, nowNFS()) // permittimes.go
	if i := sn.FS.LookupInode(fh); i != nil {
		i.Mu.Lock()
		a := i.Attr
		i.Mu.Unlock()
		if a.Type != 0 && a.Type != nfs3.TypeDir && a.Nlink >= 1 {
			sn.names.offSetAttr(i, a, true) // offlinesetattr.go
		}
	}
}

// offGone: the provisional object fh lost its name offline: it will never
// be on the server (its making record and this one cancel in the
// optimiser), nor its data; unless it has another name.
func (p *permits) offGone(fh nfs3.FH) {
	if p.made.dropName(fh) {
		return // it has another name (a link made offline, offlinelink.go): its data kept
	}
	if o, ok := p.made.of(fh); ok {
		p.dropOffData(o.id)
	}
	p.removedLocally(fh)
}

// offlineRename is LocalRename while offline.
func (sn *snfsFS) offlineRename(ctx context.Context, from *vfs.Inode, name string, to *vfs.Inode, newName string, c vfs.Cred, noReplace bool) (bool, error) {
	p := sn.permits
	if !sn.offlineUsable(c, name, newName) {
		return false, nil
	}
	nc := sn.names
	cf, ct := nc.offCopy(from), nc.offCopy(to)
	if cf == nil || ct == nil {
		return false, nil
	}
	fref, ok1 := p.offDirRef(from)
	tref, ok2 := p.offDirRef(to)
	if !ok1 || !ok2 {
		return false, nil
	}
	p.off.change.Lock()
	defer p.off.change.Unlock()
	moved, found, unsure := nc.offEntry(cf, name)
	switch {
	case unsure:
		return false, nil
	case !found:
		return true, nfs3.ErrNoEnt
	case moved.fh == nil || moved.typ == nfs3.TypeDir && from != to:
		return false, nil
	}
	if from == to && name == newName {
		return true, nil
	}
	old, exists, unsure := nc.offEntry(ct, newName)
	if unsure {
		return false, nil
	}
	if exists {
		switch {
		case noReplace:
			return true, nfs3.ErrExist
		case old.fh == nil || old.typ == nfs3.TypeDir || moved.typ == nfs3.TypeDir:
			return false, nil
		case string(old.fh) == string(moved.fh):
			return true, nil // two links of one file: rename(2) does nothing
		case sn.offlineOpen(ctx, old.fh):
			return false, nil
		}
	}
	p.noteBase(from, name, moved, true)
	p.noteBase(to, newName, old, exists)
	rec := snfs1.CMLRecord{Op: snfs1.CMLRename, Dir: fref, Name: name, ToDir: tref, ToName: newName}
	bases := append(p.permitBase(from.FH, name, moved, true), p.permitBase(to.FH, newName, old, exists)...)
	if _, err := p.log.AppendLazyBased(rec, bases); err != nil {
		sn.FS.Logger().Warn("the modification log", "err", err)
		return false, nil
	}
	p.setPending()
	fgen, tgen := modGenOf(from), modGenOf(to)
	nc.mu.Lock()
	nc.offApplyLocked(cf, fgen, name, nil)
	nc.offApplyLocked(ct, tgen, newName, &moved)
	nc.mu.Unlock()
	now := nowNFS()
	sn.offDirChanged(from, 0, now)
	if to != from {
		sn.offDirChanged(to, 0, now)
	}
	if mi := sn.FS.LookupInode(moved.fh); mi != nil {
		mi.NameMu.Lock()
		mi.Dir, mi.Name = to.FH, newName
		mi.NameMu.Unlock()
	}
	if exists {
		sn.offUnlinked(old.fh, old.attr) // its other names: one link fewer
	}
	if exists && isProvFH(old.fh) {
		p.offGone(old.fh)
	}
	sn.stats.LocalChanges.Add(1)
	return true, nil
}

// offDirChanged is localDirChanged (permittimes.go) offline: dir, whose
// entries a change made offline at now changed, gets its mtime now and
// links more links (an MKDIR: 1, an RMDIR: -1), in its inode and in its
// entry in its parent's offline copy, as POSIX says and as the server's
// file system will when the log is reintegrated (with the reintegration's
// time). A directory made offline gets its ctime now too; one the server
// made keeps the server's, the base an offline SETATTR of it is checked
// against at reconnection (offlineattr.go: the server's ctime, unchanged
// by another client meanwhile), and is asked of the server again once the
// log is in (timesDirs). Its attribute generation stays: the offline
// copies are checked against it (offCopy), and no reply of the server's
// can race this offline. Called with p.off.change held, not nc.mu.
func (sn *snfsFS) offDirChanged(dir *vfs.Inode, links int, now nfs3.Time) {
	prov := isProvFH(dir.FH)
	if !prov {
		p := sn.permits
		p.off.mu.Lock()
		if p.off.timesDirs == nil {
			p.off.timesDirs = map[string]*vfs.Inode{}
		}
		p.off.timesDirs[string(dir.FH)] = dir
		p.off.mu.Unlock()
	}
	dir.Mu.Lock()
	if dir.Attr.Type != nfs3.TypeDir {
		dir.Mu.Unlock()
		return // its attributes not known: the server's, when asked
	}
	dir.Attr.Mtime = now
	if prov {
		dir.Attr.Ctime = now
	}
	switch {
	case links > 0:
		dir.Attr.Nlink += uint32(links)
	case links < 0 && dir.Attr.Nlink > uint32(-links):
		dir.Attr.Nlink -= uint32(-links)
	}
	a := dir.ReportLocked()
	dir.Mu.Unlock()
	sn.names.offSetAttr(dir, a, false) // offlinesetattr.go
}

// offTimesAsked: the log is in after a reconnection: the directories the
// server made whose times offline changes set here are asked of the
// server again (their next use).
func (p *permits) offTimesAsked() {
	p.off.mu.Lock()
	dirs := p.off.timesDirs
	p.off.timesDirs = nil
	p.off.mu.Unlock()
	for _, i := range dirs {
		i.Invalidate()
	}
}

// setPending: a record was logged offline.
func (p *permits) setPending() {
	p.off.mu.Lock()
	p.off.pending = true
	p.off.mu.Unlock()
}
