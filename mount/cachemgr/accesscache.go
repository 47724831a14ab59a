package cachemgr

import (
	"context"
	"slices"

	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/state"
)

// The access cache: what the server said each credential may do with a file,
// as Linux's NFS client keeps per credential. An open served by a kept open
// (no OPEN sent, docs/protocol.md 4.2's checks never run) is checked against
// it, and asks the server (ACCESS) only for a credential or a permission it
// has not answered for the file's current attributes: the kernel checked the
// mode bits (default_permissions), but the server may squash the caller
// (root_squash: root passes the kernel's check) or have ACLs, and the
// write-back of what such an open writes is done as its writer.
//
// An entry holds while the file's mode, owner and group are those it was
// answered for (not its ctime, which every write moves), as Linux's client
// drops its access cache when they change. Another client's chmod or chown
// calls this one back first (server/coexist.go's setattrAccess): its dirty
// data is written back under the old mode and its kept opens go, so the next
// open is an OPEN the server checks. A local process's chmod on the server
// machine is seen only after the fact (its change notification), so until
// then an entry, like the kernel's own check of the mode bits, can be stale:
// a write it lets through that the server then refuses is reported at the
// next close or fsync (errseq). A change of an ACL alone is seen at the next
// OPEN sent.
//
// The creator of a file is its owner at the server (also when squashed: the
// squashed identity owns it), so a create records the owner's bits of the
// new file's mode as its creator's answer (seedCreatorAccess): reopening
// what this mount wrote costs nothing.

// accessEntry is one credential's answer.
type accessEntry struct {
	perm    accessPerm
	allowed uint32 // ACCESS3 bits answered allowed
	asked   uint32 // ACCESS3 bits answered at all
}

// accessPerm is what of a file's attributes an access answer belongs to.
type accessPerm struct{ mode, uid, gid uint32 }

func permOf(a *nfs3.Fattr) accessPerm { return accessPerm{a.Mode, a.UID, a.GID} }

// accessNeeded is what an open of mode with flags needs (ACCESS3 bits).
func accessNeeded(rdwr bool, mode state.Mode) uint32 {
	switch {
	case rdwr:
		return nfs3.AccessRead | nfs3.AccessModify | nfs3.AccessExtend
	case mode == state.Write:
		return nfs3.AccessModify | nfs3.AccessExtend
	}
	return nfs3.AccessRead
}

// maxAccessEntries bounds an inode's access cache (a file opened by many
// users): past it the cache starts again.
const maxAccessEntries = 16

// checkOpenAccess checks that c may open i as need asks, after the protocol
// open: opened says an OPEN of mode was answered (it checked mode's
// permission: write for OPEN_WRITE, read for OPEN_READ), else the open was
// served by a kept one and nothing was checked. It sends ACCESS only for
// what neither that OPEN nor the access cache answered, and records the
// answer.
func (fs *snfsFS) checkOpenAccess(ctx context.Context, i *vfs.Inode, c vfs.Cred, need uint32, opened bool, mode state.Mode) error {
	key := c.Key()
	sn := snOf(i)
	i.Mu.Lock()
	perm := permOf(&i.Attr)
	e, ok := sn.access[key]
	if !ok || e.perm != perm {
		e = accessEntry{perm: perm}
	}
	if opened {
		granted := accessNeeded(false, mode)
		e.allowed |= granted
		e.asked |= granted
	}
	i.Mu.Unlock()
	if e.allowed&need == need {
		fs.noteAccess(i, key, e)
		return nil
	}
	if refused := e.asked &^ e.allowed; refused&need != 0 {
		return nfs3.ErrAcces // answered before: refused
	}
	if fs.disc.offline() {
		// Disconnected: the kernel's check of the mode bits
		// (default_permissions) is all there is (disconnected.go). Root
		// passes every such check, but the server may squash it: what
		// the bits would not let another identity do is the server's to
		// say, and it cannot be asked now.
		if c.UID == 0 && !modeAllows(e.perm, c, need) {
			return ErrDisconnected
		}
		return nil
	}
	ask := need &^ e.asked
	got, err := fs.AccessBits(ctx, i, c, ask)
	if err != nil {
		return err
	}
	i.Mu.Lock()
	now := permOf(&i.Attr) // ACCESS's attributes: the answer belongs to them
	i.Mu.Unlock()
	if now != e.perm {
		e = accessEntry{perm: now}
	}
	e.asked |= ask
	e.allowed |= got
	fs.noteAccess(i, key, e)
	if e.allowed&need != need {
		return nfs3.ErrAcces
	}
	return nil
}

// modeAllows reports whether perm's mode bits give c what need asks (ACCESS3
// bits), as they would for an identity other than root: the owner's bits if
// c owns the file, else the group's if c is in its group, else the others'.
func modeAllows(perm accessPerm, c vfs.Cred, need uint32) bool {
	bits := perm.mode & 0o7
	switch {
	case perm.uid == c.UID:
		bits = perm.mode >> 6 & 0o7
	case perm.gid == c.GID || slices.Contains(c.Groups, perm.gid):
		bits = perm.mode >> 3 & 0o7
	}
	if need&nfs3.AccessRead != 0 && bits&0o4 == 0 {
		return false
	}
	if need&(nfs3.AccessModify|nfs3.AccessExtend) != 0 && bits&0o2 == 0 {
		return false
	}
	return true
}

// noteAccess records e as key's entry of i.
func (fs *snfsFS) noteAccess(i *vfs.Inode, key string, e accessEntry) {
	sn := snOf(i)
	i.Mu.Lock()
	defer i.Mu.Unlock()
	if sn.access == nil || len(sn.access) >= maxAccessEntries {
		sn.access = map[string]accessEntry{}
	}
	sn.access[key] = e
}

// seedCreatorAccess records, for c who just created i (its owner at the
// server), what the owner's bits of i's mode allow.
func (fs *snfsFS) seedCreatorAccess(i *vfs.Inode, c vfs.Cred) {
	i.Mu.Lock()
	perm := permOf(&i.Attr)
	i.Mu.Unlock()
	var allowed uint32
	if perm.mode&0o400 != 0 {
		allowed |= nfs3.AccessRead
	}
	if perm.mode&0o200 != 0 {
		allowed |= nfs3.AccessModify | nfs3.AccessExtend
	}
	// Only what the bits allow: root passes mode bits the owner's deny
	// (a 0444 file it created and reopens for writing), so a denial is
	// the server's to say.
	fs.noteAccess(i, c.Key(), accessEntry{perm: perm, allowed: allowed, asked: allowed})
}
