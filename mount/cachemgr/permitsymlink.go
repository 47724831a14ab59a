package cachemgr

import (
	"context"

	"snfs/mount/vfs"
	"snfs/nfs3"
)

// Symbolic links made locally under a write-back permit (docs/mount.md
// "The mount's side"): a provisional object as permitmake.go's MKDIR, under
// the same conditions (localMake), logged as CML_SYMLINK with its target
// and its times. Its inode knows its target (vfs.Inode.SetTargetLocked), so
// a readlink is answered locally, as its attributes and a lookup are
// (Resolve with local: fusefs's Readlink asks so); its removal and its
// rename within its directory are local (permitlocal.go: a SYMLINK and an
// UNLINK of it cancel in the optimiser); anything else resolves it first.
// The target is given to the real inode when it is resolved, so the real
// link's readlink costs no READLINK either.

// LocalSymlink is vfs.Ops.LocalSymlink in snfs mode.
func (sn *snfsFS) LocalSymlink(ctx context.Context, dir *vfs.Inode, c vfs.Cred, name, target string) (vfs.Entry, bool, error) {
	if target == "" || len(target) > nfs3.MaxPath {
		return vfs.Entry{}, false, nil // the server's EINVAL, ENAMETOOLONG
	}
	if sn.disc.offline() {
		return sn.offlineMakeObj(dir, c, name, nfs3.TypeLnk, 0, target) // offline.go
	}
	return sn.localMakeObj(ctx, dir, c, name, nfs3.TypeLnk, 0o777, target, func(i *vfs.Inode) {
		i.Mu.Lock()
		i.SetTargetLocked(target)
		i.Mu.Unlock()
	})
}

// provTargetTo gives the real inode ri the target of the provisional link
// i, if it is one and ri does not know it yet (a link's target never
// changes: another target is another object).
func provTargetTo(i, ri *vfs.Inode) {
	if i == ri || ri.Type != nfs3.TypeLnk {
		return
	}
	i.Mu.Lock()
	t, ok := i.TargetLocked()
	i.Mu.Unlock()
	if !ok {
		return
	}
	ri.Mu.Lock()
	if _, known := ri.TargetLocked(); !known {
		ri.SetTargetLocked(t)
	}
	ri.Mu.Unlock()
}
