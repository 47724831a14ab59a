package cachemgr

import (
	"context"
	"time"

	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/snfs1"
)

// SETATTRs made locally under a write-back permit (docs/mount.md "The
// mount's side"): so far those of a provisional object (permitmake.go,
// permitcreate.go, permitsymlink.go) whose making record is still in the
// log: nobody but this mount can see the object before that record is
// sent, so its attributes are this mount's to change, as its name is. A
// chmod, a chown to its own owner and to its group or the caller's, and
// utimes of it (touch, cp -p, tar's chmod and utimes after each file) are
// logged as CML_SETATTR naming the object by its provisional id, applied to
// its inode's attributes and to its entry in the cached listing, and cost
// no call; the optimiser merges repeated SETATTRs of it (mount/cml,
// Optimize's rule 2), and drops them with the object when it is removed
// before it is sent (rule 1). The server applies the record after the
// making record, in the same REINTEGRATE, with the session's credentials.
//
// Not local (the object is resolved first, and the SETATTR goes through
// the server): a size (a truncation of a file made locally would have to
// agree with the data its writes send by WRITE outside the log, and those
// resolve it anyway), a set-ID bit on a regular file (localMake makes none:
// a write must clear it), a mode of a link (the server cannot set one), an
// owner other than the object's own and a group other than its own or the
// caller's (whether the caller may give it is the server's to decide), and
// another user's change (REINTEGRATE carries the session's identity).
//
// A SETATTR of an object the server made is not made locally: its
// attributes are not covered by a directory's permit (they are under the
// file callbacks of Table 1), and the mount has nothing that would keep a
// changed mode over a GETATTR answered before the reintegration. It goes
// through the server; a directory's sends the log first (Setattr: the
// records made in it were made under its mode before the change, and a
// chmod that takes write permission away applied first would refuse them).

// localSetattr makes s on the live provisional object i locally; done
// false: not made (the caller resolves i and sends it).
func (sn *snfsFS) localSetattr(i *vfs.Inode, c vfs.Cred, s vfs.SetAttr) (a nfs3.Fattr, ttl time.Duration, done bool, err error) {
	p := sn.permits
	if p == nil || !isProvFH(i.FH) || !localCred(c) || s.Size != nil ||
		s.Mode == nil && s.UID == nil && s.GID == nil && s.Atime == nil && s.Mtime == nil {
		return nfs3.Fattr{}, 0, false, nil
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
	o, ok := p.made.of(i.FH)
	if !ok {
		return nfs3.Fattr{}, 0, false, nil
	}
	i.Mu.Lock()
	cur := i.Attr
	i.Mu.Unlock()
	var sa nfs3.Sattr
	if s.Mode != nil {
		m := *s.Mode & 0o7777
		if cur.Type == nfs3.TypeLnk || cur.Type == nfs3.TypeReg && m&0o6000 != 0 {
			return nfs3.Fattr{}, 0, false, nil
		}
		sa.Mode, cur.Mode = &m, m
	}
	if s.UID != nil {
		if *s.UID != cur.UID {
			return nfs3.Fattr{}, 0, false, nil
		}
		u := *s.UID
		sa.UID = &u
	}
	if s.GID != nil {
		if *s.GID != cur.GID && *s.GID != c.GID {
			return nfs3.Fattr{}, 0, false, nil
		}
		g := *s.GID
		sa.GID, cur.GID = &g, g
	}
	now := time.Now()
	// A time "now" is the mount's clock, sent as the client's time: the
	// object the server makes shows what this mount reported.
	at := func(t *time.Time) (nfs3.SetTime, nfs3.Time) {
		if t.IsZero() {
			return nfs3.SetTime{How: nfs3.SetToClientTime, Time: vfs.NFSTime(now)}, vfs.NFSTime(now)
		}
		return nfs3.SetTime{How: nfs3.SetToClientTime, Time: vfs.NFSTime(*t)}, vfs.NFSTime(*t)
	}
	if s.Atime != nil {
		sa.Atime, cur.Atime = at(s.Atime)
	}
	if s.Mtime != nil {
		sa.Mtime, cur.Mtime = at(s.Mtime)
	}
	cur.Ctime = vfs.NFSTime(now)
	if _, err := p.log.AppendLazy(snfs1.CMLRecord{Op: snfs1.CMLSetattr, Obj: snfs1.ObjRef{Prov: o.id}, Attr: sa}); err != nil {
		sn.FS.Logger().Warn("the modification log", "err", err)
		return nfs3.Fattr{}, 0, false, nil
	}
	fnow := sn.FS.Now()
	i.Mu.Lock()
	i.ModifiedLocked(&cur, fnow)
	a, ttl = i.ReportLocked(), i.TTLLocked(fnow)
	i.Mu.Unlock()
	sn.names.entryAttr(i.FH, &cur)
	sn.stats.LocalChanges.Add(1)
	return a, ttl, true, nil
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
	if d := nc.covered[string(fh)]; d != nil {
		set(d)
		return
	}
	for _, d := range nc.dirs {
		set(d)
	}
}

// provSetattr is Setattr of a provisional inode: made locally, or on the
// real inode it resolves to.
func (sn *snfsFS) provSetattr(ctx context.Context, i *vfs.Inode, c vfs.Cred, s vfs.SetAttr) (*vfs.Inode, nfs3.Fattr, time.Duration, bool, error) {
	if a, ttl, done, err := sn.localSetattr(i, c, s); done {
		return nil, a, ttl, true, err
	}
	ri, err := sn.Resolve(ctx, i, false)
	if err != nil {
		return nil, nfs3.Fattr{}, 0, true, err
	}
	return ri, nfs3.Fattr{}, 0, false, nil
}
