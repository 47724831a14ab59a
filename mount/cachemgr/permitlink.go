package cachemgr

import (
	"context"

	"snfs/mount/vfs"
	"snfs/snfs1"
)

// LINKs made locally under a write-back permit (docs/mount.md "The mount's
// side"): a new name of an object the server made, in a directory under
// LocalRemove's conditions (its listing cached under its promise within
// the lease, its permit held and not being recalled, the session's
// credentials), when the name is not in the listing (an existing name is
// the server's EEXIST), the object is not a directory and its attributes
// are known (the link count the mount reports is theirs plus one). The
// LINK is logged (CML_LINK, the object by its handle), the name cached in
// the directory's listing, and the object's link count and change time
// updated in its inode and in the entries that list it: the kernel is
// answered without a call.
//
// The link count is the object's, not a directory's: no permit covers it
// (the permit of the directory the link is made in covers that directory's
// entries), and another client's view of it stays the server's until the
// reintegration, as its view of the directory does (reads do not recall a
// permit). This mount's own view of it stays what the mount made as long
// as its attributes are served from its cache (under the directory's
// promise, or a file's caching); a GETATTR answered before the
// reintegration would give the server's count again until then.
//
// An object made locally (provisional) is resolved first (fusefs resolves
// the link's source: one REINTEGRATE), then linked here. Offline, where
// nothing can be resolved, such a link is logged by the provisional id and
// the provisional table counts the object's names (offlinelink.go).

// LocalLink is vfs.Ops.LocalLink in snfs mode.
func (sn *snfsFS) LocalLink(ctx context.Context, i, dir *vfs.Inode, c vfs.Cred, name string) (vfs.Entry, bool, error) {
	if sn.disc.offline() {
		return sn.offlineLink(i, dir, c, name) // offlinelink.go
	}
	p := sn.permits
	if p == nil || !localCred(c) || name == "" || name == "." || name == ".." || len(name) > maxCachedName ||
		isProvFH(dir.FH) || isProvFH(i.FH) || i.IsDir() || sn.disc.offline() {
		return vfs.Entry{}, false, nil
	}
	i.Mu.Lock()
	fresh := i.TTLLocked(sn.FS.Now()) > 0
	i.Mu.Unlock()
	if !fresh {
		return vfs.Entry{}, false, nil
	}
	nc := sn.names
	d := nc.usable(ctx, dir)
	if d == nil {
		return vfs.Entry{}, false, nil
	}
	if _, ok := nc.cachedEntry(d, name); ok {
		return vfs.Entry{}, false, nil
	}
	if _, ok := p.get(ctx, dir.FH, false); !ok {
		return vfs.Entry{}, false, nil
	}
	done, err := p.logged(func() error {
		if nc.usable(ctx, dir) != d {
			return errNotLocal
		}
		if _, ok := nc.cachedEntry(d, name); ok {
			return errNotLocal
		}
		if _, err := p.log.AppendLazyBased(snfs1.CMLRecord{Op: snfs1.CMLLink, Obj: snfs1.ObjRef{FH: i.FH},
			Dir: snfs1.ObjRef{FH: dir.FH}, Name: name}, p.permitBase(dir.FH, name, cent{}, false)); err != nil { // permitlost.go
			sn.FS.Logger().Warn("the modification log", "err", err)
			return errNotLocal
		}
		i.Mu.Lock()
		a := i.Attr
		i.Mu.Unlock()
		now := nowNFS()
		a.Nlink++
		a.Ctime = now
		sn.setLocalAttr(i, &a) // permitsetattr.go
		p.links.add(i.FH)      // permittimes.go
		sn.DirChanged(dir, name, i, nil)
		sn.localDirChanged(dir, 0, now)
		return nil
	}, dir.FH)
	if !done {
		return vfs.Entry{}, false, nil
	}
	sn.stats.LocalChanges.Add(1)
	if err != nil {
		return vfs.Entry{}, true, err
	}
	return sn.FS.EntryOf(dir, i), true, nil
}
