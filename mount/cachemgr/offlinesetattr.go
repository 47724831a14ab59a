package cachemgr

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/snfs1"
)

// SETATTRs made offline (docs/mount.md, "Disconnected operation"): a
// chmod, a chown to the object's own owner, a chgrp to its own group or
// the caller's, and utimes (tar's after each file and directory, cp -p,
// touch) of an object made here and not yet on the server (a live
// provisional object: made offline, or under a permit before going
// offline), by the session's credentials, of an object the caller owns,
// are logged as CML_SETATTR (the record shape the log has for SETATTRs
// under permits: the object by its provisional id, snfs1.CMLSetattr) and
// applied to the inode's attributes and to its entry in its directory's
// offline copy. Nobody but this mount sees such an object before its
// making record is sent, so nothing can conflict with its attributes.
//
// The data of a file made offline is written to the server after the log
// is reintegrated (offlinedata.go, pushOffData), and those WRITEs would set
// its mtime to the time of the push: so the times a SETATTR set last (not
// followed by a write or truncation) are kept with the data (a file
// ID.times beside the data file ID, for a mount killed offline) and set
// again after the data is written.
//
// Those of objects the server made are made too, with a base checked at
// reconnection (offlineattr.go: another client may change their attributes
// meanwhile).
//
// Not made offline (ErrDisconnected, as before): a size (a truncation of a
// file made offline is made: offTruncate; of a cached file open for
// writing, in its cache: snfsSetattrLocal; of one whose open for writing
// may be granted offline, through such an open: offlineTruncate), a
// set-ID bit on a regular
// file, an owner other than the object's own or a group other than its own
// or the caller's, another user's change.

// offlineSetattr is Setattr while offline; done false: not made here.
func (sn *snfsFS) offlineSetattr(i *vfs.Inode, c vfs.Cred, s vfs.SetAttr) (nfs3.Fattr, bool, error) {
	p := sn.permits
	if p == nil || !localCred(c) || s.Size != nil || !isProvFH(i.FH) ||
		s.Mode == nil && s.UID == nil && s.GID == nil && s.Atime == nil && s.Mtime == nil {
		return nfs3.Fattr{}, false, nil
	}
	p.off.change.Lock()
	defer p.off.change.Unlock()
	o, ok := p.made.of(i.FH)
	if !ok || !o.live {
		return nfs3.Fattr{}, false, nil
	}
	i.Mu.Lock()
	cur := i.Attr
	i.Mu.Unlock()
	sa, next, ok := offSattr(cur, c, s)
	if !ok {
		return nfs3.Fattr{}, false, nil
	}
	if _, err := p.log.AppendLazy(snfs1.CMLRecord{Op: snfs1.CMLSetattr, Obj: snfs1.ObjRef{Prov: o.id}, Attr: sa}); err != nil {
		sn.FS.Logger().Warn("the modification log", "err", err)
		return nfs3.Fattr{}, false, nil
	}
	p.setPending()
	if sa.Atime.How == nfs3.SetToClientTime || sa.Mtime.How == nfs3.SetToClientTime {
		if od := p.offDataOf(o.id); od != nil {
			od.mu.Lock()
			if !od.pushed {
				od.setTimes(sa.Atime, sa.Mtime)
			}
			od.mu.Unlock()
		}
	}
	i.Mu.Lock()
	i.Attr.Mode, i.Attr.UID, i.Attr.GID = next.Mode, next.UID, next.GID
	i.Attr.Atime, i.Attr.Mtime, i.Attr.Ctime = next.Atime, next.Mtime, next.Ctime
	a := i.ReportLocked()
	i.Mu.Unlock()
	sn.names.offSetAttr(i, a, false)
	sn.stats.LocalChanges.Add(1)
	return a, true, nil
}

// offSattr is localSattr (permitsetattr.go) for the objects made offline:
// regular files and directories only.
func offSattr(cur nfs3.Fattr, c vfs.Cred, s vfs.SetAttr) (sa nfs3.Sattr, next nfs3.Fattr, ok bool) {
	if cur.Type != nfs3.TypeReg && cur.Type != nfs3.TypeDir {
		return nfs3.Sattr{}, cur, false
	}
	return localSattr(cur, c, s)
}

// offSetAttr sets a as the attributes of i's entry in its directory's
// offline copy (an entry served again after the kernel forgot the inode),
// and, for an object with several names (hard links: a.Nlink above one, or
// all, a name of it just gone), of every entry naming it in the offline
// copies.
func (nc *nameCache) offSetAttr(i *vfs.Inode, a nfs3.Fattr, all bool) {
	i.NameMu.Lock()
	dir, name := i.Dir, i.Name
	i.NameMu.Unlock()
	nc.mu.Lock()
	defer nc.mu.Unlock()
	if (all || a.Nlink > 1) && a.Type != nfs3.TypeDir {
		for _, c := range nc.offl {
			for k := range c.ents {
				if e := &c.ents[k]; e.name != "" && string(e.fh) == string(i.FH) {
					e.attr = a
				}
			}
		}
		return
	}
	c := nc.offl[string(dir)]
	if c == nil {
		return
	}
	if k, ok := c.index[name]; ok && string(c.ents[k].fh) == string(i.FH) {
		c.ents[k].attr = a
	}
}

// offTimes is the times file of a file made offline (offData.times).
type offTimes struct {
	Atime nfs3.SetTime `json:"atime"`
	Mtime nfs3.SetTime `json:"mtime"`
}

func (od *offData) timesPath() string { return od.path + ".times" }

// setTimes keeps the times a SETATTR set (od.mu held); a time not set
// keeps the one set before.
func (od *offData) setTimes(atime, mtime nfs3.SetTime) {
	t := od.loadTimes()
	if t == nil {
		t = &offTimes{}
	}
	if atime.How == nfs3.SetToClientTime {
		t.Atime = atime
	}
	if mtime.How == nfs3.SetToClientTime {
		t.Mtime = mtime
	}
	od.timed = true
	b, err := json.Marshal(t)
	if err == nil {
		err = os.WriteFile(od.timesPath(), b, 0o600)
	}
	if err != nil {
		os.Remove(od.timesPath())
	}
}

// loadTimes is the times kept (nil: none; od.mu held).
func (od *offData) loadTimes() *offTimes {
	if !od.timed {
		return nil
	}
	b, err := os.ReadFile(od.timesPath())
	if err != nil {
		return nil
	}
	var t offTimes
	if json.Unmarshal(b, &t) != nil {
		return nil
	}
	return &t
}

// dropTimes: the data changed after the times were set (od.mu held): its
// mtime is the write's.
func (od *offData) dropTimes() {
	od.stored = 0 // the data changed: a STORE logged before carries older data (permitstore.go)
	if od.timed {
		od.timed = false
		os.Remove(od.timesPath())
	}
}

// pushTimes sets the times kept for od on fh, once its data is written
// (od.mu held).
func (p *permits) pushTimes(ctx context.Context, od *offData, fh nfs3.FH) error {
	t := od.loadTimes()
	if t == nil {
		return nil
	}
	nc := p.sn.FS.Client(sessionCred())
	if _, err := vfs.RPC(ctx, p.sn.FS, func() (*nfs3.WccRes, error) {
		return nc.Setattr(ctx, &nfs3.SetattrArgs{Object: fh, New: nfs3.Sattr{Atime: t.Atime, Mtime: t.Mtime}})
	}); err != nil {
		return fmt.Errorf("SETATTR of the times of a file made offline: %w", err)
	}
	return nil
}
