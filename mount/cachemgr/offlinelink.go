package cachemgr

import (
	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/snfs1"
)

// LINKs made offline (docs/mount.md, "Disconnected operation"): a new
// name, in a directory with an offline copy (offline.go's rules), of an
// object that is not a directory and whose attributes the mount has (the
// link count it reports is theirs plus one), by the session's
// credentials. It is logged as CML_LINK, as permitlink.go logs one under a
// permit, with the new name's base (none: a name another client made
// meanwhile is a real conflict at reconnection, offlinereint.go's check),
// and made in the copy. The object is named by its handle if the server
// made it; if it was made here and is not on the server yet (a live
// provisional object: tar x of an archive with hard-linked members), by
// its provisional id, as the records after its making record name it
// (the server resolves the id from the CREATE earlier in the batch). Such
// an object keeps a count of the names it has besides one (provObj.more):
// the loss of one of them offline (REMOVE, RENAME over it) takes a link
// away (localUnlinked) and leaves its data, which is written once, under
// its real handle, after the reintegration (offlinedata.go); only its
// last name's loss drops it (offGone). The optimiser counts a LINK of an
// object the log made as a name of it (mount/cml, rule 1). If the
// server's object is gone by the reconnection, the record is refused (a
// real conflict: another client removed it) and kept as a line of the
// conflicts file.
//
// Online, a link of a provisional object is not made locally: it is
// resolved first (permitlink.go).

// offlineLink is LocalLink while offline; done false: ErrDisconnected, as
// before.
func (sn *snfsFS) offlineLink(i, dir *vfs.Inode, c vfs.Cred, name string) (vfs.Entry, bool, error) {
	p := sn.permits
	if !sn.offlineUsable(c, name) || i.IsDir() {
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
	i.Mu.Lock()
	a := i.Attr
	i.Mu.Unlock()
	if a.Type == 0 || a.Type == nfs3.TypeDir {
		return vfs.Entry{}, false, nil // attributes not known
	}
	obj := snfs1.ObjRef{FH: i.FH}
	if isProvFH(i.FH) {
		o, ok := p.made.of(i.FH)
		if !ok || !o.live {
			return vfs.Entry{}, false, nil // sent, or gone: the server's
		}
		obj = snfs1.ObjRef{Prov: o.id}
	}
	p.noteBase(dir, name, old, false)
	rec := snfs1.CMLRecord{Op: snfs1.CMLLink, Obj: obj, Dir: ref, Name: name}
	if _, err := p.log.AppendLazyBased(rec, p.permitBase(dir.FH, name, old, false)); err != nil {
		sn.FS.Logger().Warn("the modification log", "err", err)
		return vfs.Entry{}, false, nil
	}
	p.setPending()
	if obj.Prov != 0 {
		p.made.addName(i.FH) // live: p.off.change held, nothing settles it offline
	}
	a.Nlink++
	now := nowNFS()
	a.Ctime = now
	a, _ = sn.setLocalAttr(i, &a) // permitsetattr.go
	p.links.add(i.FH)             // permittimes.go
	e := cent{fileID: a.FileID, typ: a.Type, fh: i.FH, attr: a}
	gen := modGenOf(dir)
	nc.mu.Lock()
	nc.offApplyLocked(cp, gen, name, &e)
	nc.mu.Unlock()
	nc.offSetAttr(i, a, true) // its other names' entries: one link more (offlinesetattr.go)
	sn.offDirChanged(dir, 0, now)
	sn.stats.LocalChanges.Add(1)
	sn.FS.Logger().Debug("disconnected: made locally", "op", snfs1.CMLLink, "dir", sn.PathOf(dir), "name", name)
	return vfs.Entry{Inode: i, Attr: a, AttrTTL: offlineAttrTTL}, true, nil
}
