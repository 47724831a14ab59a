package cachemgr

import (
	"context"
	"time"

	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/snfs1"
)

// SETATTRs made locally under a write-back permit (docs/mount.md "The
// mount's side"): those of a provisional object (permitmake.go,
// permitcreate.go, permitsymlink.go) whose making record is still in the
// log (nobody but this mount can see the object before that record is
// sent, so its attributes are this mount's to change, as its name is), and
// those of a directory the server made whose permit is held (a directory's
// own attributes are covered by its permit: anyone else's SETATTR of it
// recalls the permit first, docs/protocol.md section 21.4). A chmod, a
// chown to the object's own owner, a chgrp to its group or the caller's,
// and utimes (touch, cp -p, tar's chmod and utimes after each file), by
// the session's credentials, of an object the caller owns, are logged as
// CML_SETATTR (naming the object by its provisional id, or the directory
// by its handle), applied to the inode's attributes and to the cached
// entries naming it, and cost no call; the optimiser merges repeated
// SETATTRs of one object (mount/cml, Optimize's rule 2), and drops them
// with an object removed before it is sent (rule 1). The server applies
// the record in log order, with the session's credentials.
//
// Not local (a provisional object is resolved first, and the SETATTR goes
// through the server): a size (a truncation of a file made locally would
// have to agree with the data its writes send by WRITE outside the log,
// and those resolve it anyway), a set-ID bit on a regular file (localMake
// makes none: a write must clear it), a mode of a link (the server cannot
// set one), an owner other than the object's own and a group other than
// its own or the caller's (whether the caller may give it is the server's
// to decide), another user's change (REINTEGRATE carries the session's
// identity), and a change of an object the caller does not own.
//
// A SETATTR of another object the server made (not a directory) is not
// made locally: its attributes are not covered by a directory's permit
// (they are under the file callbacks of Table 1: another client's change
// of the file recalls no permit), and the mount has nothing that would
// keep a changed mode over a GETATTR answered before the reintegration. It
// goes through the server; a directory's SETATTR not made locally sends
// the log first (Setattr: the records made in it were made under its mode
// before the change, and a chmod that takes write permission away applied
// first would refuse them).

// localSetattr makes s on i locally: i is a live provisional object, or a
// directory the server made whose permit is held (localDirSetattr); done
// false: not made (the caller resolves i and sends it).
func (sn *snfsFS) localSetattr(ctx context.Context, i *vfs.Inode, c vfs.Cred, s vfs.SetAttr) (a nfs3.Fattr, ttl time.Duration, done bool, err error) {
	p := sn.permits
	if p == nil || !localCred(c) || s.Size != nil ||
		s.Mode == nil && s.UID == nil && s.GID == nil && s.Atime == nil && s.Mtime == nil {
		return nfs3.Fattr{}, 0, false, nil
	}
	if !isProvFH(i.FH) {
		return sn.localDirSetattr(ctx, i, c, s)
	}
	// One reintegration at a time sends the log and settles what it made:
	// held, the object stays live (its making record unsent) until this
	// record is appended after it, so the provisional id it names is
	// always made earlier in the batch that carries it.
	p.reint.Lock()
	defer p.reint.Unlock()
	if !p.made.live(i.FH) {
		return nfs3.Fattr{}, 0, false, nil
	}
	od := sn.provDataHeld(i) // permitdata.go
	if od != nil && s.Mode != nil && *s.Mode&0o200 == 0 {
		// Applied before its data is written, it would refuse the WRITEs.
		return nfs3.Fattr{}, 0, false, nil
	}
	o, ok := p.made.of(i.FH)
	if !ok {
		return nfs3.Fattr{}, 0, false, nil
	}
	i.Mu.Lock()
	cur := i.Attr
	i.Mu.Unlock()
	sa, next, ok := localSattr(cur, c, s)
	if !ok {
		return nfs3.Fattr{}, 0, false, nil
	}
	if _, err := p.log.AppendLazy(snfs1.CMLRecord{Op: snfs1.CMLSetattr, Obj: snfs1.ObjRef{Prov: o.id}, Attr: sa}); err != nil {
		sn.FS.Logger().Warn("the modification log", "err", err)
		return nfs3.Fattr{}, 0, false, nil
	}
	if od != nil && (sa.Atime.How == nfs3.SetToClientTime || sa.Mtime.How == nfs3.SetToClientTime) {
		// Kept with the local data, as offline (offlinesetattr.go): a
		// mount restarted before the push has no inode to take them from
		// (pushInodeTimes), and the push would stamp the server's time.
		od.mu.Lock()
		if !od.pushed {
			od.setTimes(sa.Atime, sa.Mtime)
		}
		od.mu.Unlock()
	}
	a, ttl = sn.setLocalAttr(i, &next)
	sn.stats.LocalChanges.Add(1)
	return a, ttl, true, nil
}

// localDirSetattr makes s on the directory dir (one the server made)
// locally, under LocalRemove's conditions for its entries: its listing
// cached under its promise within the lease, its permit held and not
// being recalled. A directory's own attributes are covered by its permit
// (docs/protocol.md section 21.1): anyone else's SETATTR of it recalls the
// permit first, so the log (this record with it) is in before that change
// is made.
func (sn *snfsFS) localDirSetattr(ctx context.Context, dir *vfs.Inode, c vfs.Cred, s vfs.SetAttr) (a nfs3.Fattr, ttl time.Duration, done bool, err error) {
	p := sn.permits
	if dir.Type != nfs3.TypeDir || sn.disc.offline() {
		return nfs3.Fattr{}, 0, false, nil
	}
	nc := sn.names
	d := nc.usable(ctx, dir)
	if d == nil {
		return nfs3.Fattr{}, 0, false, nil
	}
	if _, ok := p.get(ctx, dir.FH, false); !ok {
		return nfs3.Fattr{}, 0, false, nil
	}
	done, err = p.logged(func() error {
		if nc.usable(ctx, dir) != d {
			return errNotLocal
		}
		dir.Mu.Lock()
		cur := dir.Attr
		dir.Mu.Unlock()
		sa, next, ok := localSattr(cur, c, s)
		if !ok {
			return errNotLocal
		}
		if _, err := p.log.AppendLazy(snfs1.CMLRecord{Op: snfs1.CMLSetattr, Obj: snfs1.ObjRef{FH: dir.FH}, Attr: sa}); err != nil {
			sn.FS.Logger().Warn("the modification log", "err", err)
			return errNotLocal
		}
		a, ttl = sn.setLocalAttr(dir, &next)
		return nil
	}, dir.FH)
	if !done {
		return nfs3.Fattr{}, 0, false, nil
	}
	sn.stats.LocalChanges.Add(1)
	return a, ttl, true, err
}

// localSattr is s as a CML_SETATTR's attributes and cur with them applied,
// or ok false when s is not one the mount makes locally: see the comment
// at the top of this file. cur is an object the caller may change (its
// owner: the server would refuse anyone else's chmod).
func localSattr(cur nfs3.Fattr, c vfs.Cred, s vfs.SetAttr) (sa nfs3.Sattr, next nfs3.Fattr, ok bool) {
	if cur.UID != c.UID {
		return nfs3.Sattr{}, cur, false
	}
	if s.Mode != nil {
		m := *s.Mode & 0o7777
		if cur.Type == nfs3.TypeLnk || cur.Type == nfs3.TypeReg && m&0o6000 != 0 {
			return nfs3.Sattr{}, cur, false
		}
		sa.Mode, cur.Mode = &m, m
	}
	if s.UID != nil {
		if *s.UID != cur.UID {
			return nfs3.Sattr{}, cur, false
		}
		u := *s.UID
		sa.UID = &u
	}
	if s.GID != nil {
		if *s.GID != cur.GID && *s.GID != c.GID {
			return nfs3.Sattr{}, cur, false
		}
		g := *s.GID
		sa.GID, cur.GID = &g, g
	}
	now := time.Now()
	// A time "now" is the mount's clock, sent as the client's time: the
	// object the server has then shows what this mount reported.
	at := func(t *time.Time) (nfs3.SetTime, nfs3.Time) {
		v := vfs.NFSTime(now)
		if !t.IsZero() {
			v = vfs.NFSTime(*t)
		}
		return nfs3.SetTime{How: nfs3.SetToClientTime, Time: v}, v
	}
	if s.Atime != nil {
		sa.Atime, cur.Atime = at(s.Atime)
	}
	if s.Mtime != nil {
		sa.Mtime, cur.Mtime = at(s.Mtime)
	}
	cur.Ctime = vfs.NFSTime(now)
	return sa, cur, true
}

// setLocalAttr gives i the attributes a, changed locally, and the cached
// entries naming it too; a directory's cached listing stays valid (it is
// not changed by its own attributes).
func (sn *snfsFS) setLocalAttr(i *vfs.Inode, a *nfs3.Fattr) (nfs3.Fattr, time.Duration) {
	now := sn.FS.Now()
	i.Mu.Lock()
	old := i.ModGen
	i.ModifiedLocked(a, now)
	gen := i.ModGen
	rep, ttl := i.ReportLocked(), i.TTLLocked(now)
	i.Mu.Unlock()
	if i.Type == nfs3.TypeDir {
		sn.names.keepListing(i, old, gen)
	}
	sn.names.entryAttr(i.FH, a)
	return rep, ttl
}

// entryAttr gives the cached entries naming fh the attributes a (a change
// made locally: a lookup answered from the listing must not bring the
// old ones back).
func (nc *nameCache) entryAttr(fh nfs3.FH, a *nfs3.Fattr) {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	set := func(d *cdir) {
		for k := range d.ents {
			if e := &d.ents[k]; e.name != "" && string(e.fh) == string(fh) {
				e.attr, e.noAttr = *a, false
			}
		}
	}
	if d := nc.covered[string(fh)]; d != nil && (a.Type == nfs3.TypeDir || a.Nlink <= 1) {
		set(d) // its only listing (a directory's "." names no handle)
		return
	}
	for _, d := range nc.dirs {
		set(d)
	}
}

// provSetattr is Setattr of a provisional inode: made locally, or on the
// real inode it resolves to.
func (sn *snfsFS) provSetattr(ctx context.Context, i *vfs.Inode, c vfs.Cred, s vfs.SetAttr) (*vfs.Inode, nfs3.Fattr, time.Duration, bool, error) {
	if a, ttl, done, err := sn.localSetattr(ctx, i, c, s); done {
		return nil, a, ttl, true, err
	}
	ri, err := sn.Resolve(ctx, i, false)
	if err != nil {
		return nil, nfs3.Fattr{}, 0, true, err
	}
	return ri, nfs3.Fattr{}, 0, false, nil
}
