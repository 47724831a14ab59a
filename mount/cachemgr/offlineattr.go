package cachemgr

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
)

// SETATTRs made offline of objects the server made (docs/mount.md,
// "Disconnected operation"; offlinesetattr.go makes those of objects made
// here). A chmod, a chown to the object's own owner, a chgrp to its own
// group or the caller's, and utimes (touch, cp -p, tar) of a regular file
// or a directory whose attributes the mount has, by the session's
// credentials, of an object the caller owns (localSattr's rules), are
// logged as CML_SETATTR naming the object by its handle (as permitsetattr.go
// logs a directory's under its permit) and applied to the inode's
// attributes and its entry in its directory's offline copy.
//
// Nothing held offline covers such an object's attributes: another client
// may change them, or the file's data, meanwhile. So the first offline
// SETATTR of an object keeps its base: its change time (ctime) as the
// server last gave it, which any change of its attributes or data on the
// server moves. It is kept in offLog.attr and in the bases file
// (offlinebase.go), so that a mount killed offline checks it too. Before the
// log is sent (offPrepare), each object with a base is asked for (GETATTR):
// a change time other than the base's, or no object, is another's change
// meanwhile; the object is poisoned, and its SETATTRs are not sent but kept
// as a conflict (a line of the conflicts file, `snfs conflicts`): the
// server's attributes stay. An object nobody changed gets the SETATTRs as
// they were made.
//
// The server applies a CML_SETATTR of a file by handle when the batch holds
// some permit (docs/protocol.md section 21.4): the permit of the file's
// directory (as last seen) is asked for with those of the log's
// directories; a directory's own SETATTR needs its own permit, asked for
// the same way.
//
// Not made offline (ErrDisconnected, as before): a size (a truncation of a
// cached file open for writing is made in its cache: snfsSetattrLocal), a
// set-ID bit on a regular file, an owner other than the object's own or a
// group other than its own or the caller's, another user's change, an
// object whose attributes are not known, a symbolic link or special file,
// and a regular file whose cached data is dirty or open for writing (its
// write-back at reconnection checks the data's base, size and mtime, which
// a time set here would move: the write-back would take its own times for
// another's change).

// attrBase is an object's base for its offline SETATTRs.
type attrBase struct {
	fh     nfs3.FH
	permit nfs3.FH // the permit asked for: the file's directory, or the directory itself
	parent nfs3.FH // its directory, as last seen (for the conflict's line)
	name   string  // its name in parent, as last seen
	ctime  nfs3.Time
}

// attrKey is the poison key of the object fh's attributes (offNameKey's
// keys start with "p" or "h").
func attrKey(fh nfs3.FH) string { return "o" + string(fh) }

// offlineSetattrServer is offlineSetattr for an object the server made;
// done false: not made here.
func (sn *snfsFS) offlineSetattrServer(i *vfs.Inode, c vfs.Cred, s vfs.SetAttr) (nfs3.Fattr, bool, error) {
	p := sn.permits
	if p == nil || isProvFH(i.FH) || !localCred(c) || s.Size != nil ||
		s.Mode == nil && s.UID == nil && s.GID == nil && s.Atime == nil && s.Mtime == nil {
		return nfs3.Fattr{}, false, nil
	}
	i.Mu.Lock()
	cur := i.Attr
	writing := i.Type == nfs3.TypeReg && stOf(i).Opens(state.Write) > 0
	stale := i.AttrAt.IsZero() // invalidated: perhaps this mount's own, made locally
	i.Mu.Unlock()
	i.NameMu.Lock()
	parent, name := i.Dir, i.Name
	i.NameMu.Unlock()
	dir := parent
	switch cur.Type {
	case nfs3.TypeDir:
		dir = i.FH
	case nfs3.TypeReg:
		if writing || sn.isDirty(i) {
			return nfs3.Fattr{}, false, nil
		}
	default:
		return nfs3.Fattr{}, false, nil // not known, or not made offline
	}
	if len(dir) == 0 || isProvFH(dir) {
		return nfs3.Fattr{}, false, nil
	}
	sa, next, ok := localSattr(cur, c, s)
	if !ok {
		return nfs3.Fattr{}, false, nil
	}
	p.off.change.Lock()
	defer p.off.change.Unlock()
	if !p.hasAttrBase(i.FH) {
		// The base is the server's change time: none if the attributes
		// the mount has may be its own (invalidated since a change made
		// locally; a link count changed here, permittimes.go; a directory
		// changed under its permit, or an object whose SETATTR is in the
		// log, before going offline).
		if stale || cur.Type == nfs3.TypeReg && p.links.has(i.FH) || p.offLocalDir(i.FH) {
			return nfs3.Fattr{}, false, nil
		}
		p.noteAttrBase(attrBase{fh: i.FH, permit: dir, parent: parent, name: name, ctime: cur.Ctime})
	}
	if _, err := p.log.AppendLazy(snfs1.CMLRecord{Op: snfs1.CMLSetattr, Obj: snfs1.ObjRef{FH: i.FH}, Attr: sa}); err != nil {
		sn.FS.Logger().Warn("the modification log", "err", err)
		return nfs3.Fattr{}, false, nil
	}
	p.setPending()
	old := modGenOf(i)
	a, _ := sn.setLocalAttr(i, &next) // permitsetattr.go
	if cur.Type == nfs3.TypeDir {
		// Its own offline copy stays: its entries did not change.
		sn.names.keepOffline(i, old, modGenOf(i))
	}
	sn.names.offSetAttr(i, a, false)
	sn.stats.LocalChanges.Add(1)
	sn.FS.Logger().Debug("disconnected: made locally", "op", snfs1.CMLSetattr, "path", sn.PathOf(i))
	return a, true, nil
}

// attrsApplied: the SETATTRs of objects the server made among recs, up to
// the LSN applied, are on the server now. The attributes the mount holds
// for such an object are those it gave it locally (setLocalAttr: its own
// change time among them), not the server's, which the SETATTR gave
// another change time: they are asked of the server again, so that a
// later offline SETATTR of it takes the server's change time as its base
// (offlineSetattrServer), not one the server never had, which its check
// would take for another's change (a false conflict, the SETATTR lost).
func (p *permits) attrsApplied(recs []snfs1.CMLRecord, applied uint64) {
	seen := map[string]bool{}
	for k := range recs {
		r := &recs[k]
		if r.Op != snfs1.CMLSetattr || r.Obj.Prov != 0 || len(r.Obj.FH) == 0 || r.LSN > applied || seen[string(r.Obj.FH)] {
			continue
		}
		seen[string(r.Obj.FH)] = true
		p.sn.names.dropEntryAttr(r.Obj.FH)
		i := p.sn.FS.LookupInode(r.Obj.FH)
		if i == nil {
			continue
		}
		i.Mu.Lock()
		old := i.ModGen
		i.InvalidateLocked()
		gen := i.ModGen
		dir := i.Type == nfs3.TypeDir
		i.Mu.Unlock()
		if dir {
			p.sn.names.keepListing(i, old, gen) // its entries did not change
		}
	}
}

// dropEntryAttr marks the attributes of the cached entries naming fh as
// not to be used: a lookup answered from a listing asks the server.
func (nc *nameCache) dropEntryAttr(fh nfs3.FH) {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	for _, d := range nc.dirs {
		for k := range d.ents {
			if e := &d.ents[k]; e.name != "" && string(e.fh) == string(fh) {
				e.noAttr = true
			}
		}
	}
}

// offWent: the mount goes offline (goOffline): the directories the log
// changes now, and the objects whose attributes it changes (a directory's
// SETATTR made under its permit; a SETATTR made offline before, whose
// check ran and whose sending did not end), are taken as changed locally
// (offLog.localDirs).
func (p *permits) offWent() {
	dirs := append(p.log.Dirs(), p.log.AttrsChanged()...)
	p.off.mu.Lock()
	defer p.off.mu.Unlock()
	p.off.localDirs = map[string]bool{}
	for _, d := range dirs {
		p.off.localDirs[string(d)] = true
	}
}

// offLocalDir reports whether the attributes of dir (a directory, or an
// object the log changes the attributes of) may be this mount's own.
func (p *permits) offLocalDir(dir nfs3.FH) bool {
	p.off.mu.Lock()
	defer p.off.mu.Unlock()
	return p.off.localDirs[string(dir)]
}

// hasAttrBase reports whether fh has an attribute base (not yet checked:
// one checked is the server's object as the log meets it).
func (p *permits) hasAttrBase(fh nfs3.FH) bool {
	p.off.mu.Lock()
	defer p.off.mu.Unlock()
	_, ok := p.off.attr[string(fh)]
	return ok
}

// keepOffline: the directory dir's own attributes changed offline (its
// generation old is gen now), not its entries: its offline copy stays
// usable, as keepListing keeps a listing.
func (nc *nameCache) keepOffline(dir *vfs.Inode, old, gen uint64) {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	if c := nc.offl[string(dir.FH)]; c != nil && c.ino == dir && c.modGen == old {
		c.modGen = gen
	}
}

// noteAttrBase keeps b as its object's base, if this is the object's first
// offline SETATTR (p.off.change held).
func (p *permits) noteAttrBase(b attrBase) {
	p.off.mu.Lock()
	defer p.off.mu.Unlock()
	if _, ok := p.off.attr[string(b.fh)]; ok {
		return
	}
	if p.off.attr == nil {
		p.off.attr = map[string]attrBase{}
	}
	b.fh, b.permit, b.parent = append(nfs3.FH(nil), b.fh...), append(nfs3.FH(nil), b.permit...), append(nfs3.FH(nil), b.parent...)
	p.off.attr[string(b.fh)] = b
	p.saveAttrBase(b) // offlinebase.go
}

// attrDirs adds to dirs the directories whose permits the objects with
// attribute bases need.
func (p *permits) attrDirs(dirs []nfs3.FH) []nfs3.FH {
	p.off.mu.Lock()
	defer p.off.mu.Unlock()
	seen := map[string]bool{}
	for _, d := range dirs {
		seen[string(d)] = true
	}
	for _, b := range p.off.attr {
		if !seen[string(b.permit)] {
			seen[string(b.permit)] = true
			dirs = append(dirs, b.permit)
		}
	}
	return dirs
}

// checkAttrBases compares each object with an attribute base with what the
// server holds now, and poisons those another changed meanwhile (or
// removed). p.reint held, the permits asked.
func (p *permits) checkAttrBases(ctx context.Context) error {
	p.off.mu.Lock()
	bases := make([]attrBase, 0, len(p.off.attr))
	for _, b := range p.off.attr {
		bases = append(bases, b)
	}
	p.off.mu.Unlock()
	fs := p.sn.FS
	nc := fs.Client(sessionCred())
	for _, b := range bases {
		res, err := vfs.RPC(ctx, fs, func() (*nfs3.GetattrRes, error) { return nc.Getattr(ctx, b.fh) })
		switch {
		case errors.Is(err, nfs3.ErrStale):
			p.poison(attrKey(b.fh))
		case err != nil:
			return fmt.Errorf("GETATTR of an object changed offline: %w", err)
		case res.Attr.Ctime != b.ctime:
			p.sn.FS.Logger().Info("disconnected: an object whose attributes were changed offline changed on the server meanwhile",
				"name", b.name, "base_ctime", b.ctime, "ctime", res.Attr.Ctime)
			p.poison(attrKey(b.fh))
		}
	}
	p.off.mu.Lock()
	defer p.off.mu.Unlock()
	// Only those checked: one an offline change noted meanwhile stays for
	// the next round.
	for _, b := range bases {
		k := string(b.fh)
		if p.off.attrChecked == nil {
			p.off.attrChecked = map[string]attrBase{}
		}
		p.off.attrChecked[k] = b
		if cur, ok := p.off.attr[k]; ok && cur.ctime == b.ctime {
			delete(p.off.attr, k)
		}
	}
	return nil
}

// attrRefused takes in a refused SETATTR of an object the server made,
// changed offline: another's change meanwhile (checkAttrBases), or the
// server's refusal. It is recorded as a conflict under the object's name;
// the mount's view of the object is the server's again (reported false:
// not such a record).
func (p *permits) attrRefused(rec *snfs1.CMLRecord, st snfs1.Status, why string) bool {
	if rec.Op != snfs1.CMLSetattr || rec.Obj.FH == nil {
		return false
	}
	p.off.mu.Lock()
	b, ok := p.off.attrChecked[string(rec.Obj.FH)]
	if !ok {
		b, ok = p.off.attr[string(rec.Obj.FH)]
	}
	p.off.mu.Unlock()
	if !ok {
		return false
	}
	sn := p.sn
	if i := sn.FS.LookupInode(rec.Obj.FH); i != nil {
		i.Invalidate()
	}
	sn.stats.Conflicts.Add(1)
	reason := fmt.Sprintf("disconnected: %s refused (status %d, LSN %d, %s): the server's attributes kept", rec.Op, st, rec.LSN, why)
	sn.FS.Logger().Warn("conflict: attributes changed while disconnected, the server's object changed meanwhile: the server's kept",
		"path", sn.FS.PathFrom(nil, b.parent, b.name), "status", st)
	c := Conflict{Time: time.Now().UTC(), Name: b.name, DirFH: hex.EncodeToString(b.parent), Reason: reason, FileFH: hex.EncodeToString(rec.Obj.FH)}
	if err := appendConflict(sn.cfg.CacheDir, c); err != nil {
		sn.FS.Logger().Error("recording a conflict", "err", err)
	}
	return true
}
