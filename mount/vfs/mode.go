package vfs

import (
	"context"
	"syscall"
	"time"

	"snfs/nfs3"
	"snfs/snfs1"
)

// Ops are the operations on files whose meaning depends on the mount's mode:
// the plain NFSv3 core's (close-to-open, writes buffered in memory and sent
// with UNSTABLE WRITEs and a COMMIT) or the snfs cache manager's (the
// protocol's OPEN and CLOSE, the cache directory, delayed write-back and
// close, passthrough). One of them is chosen when the FS is made (New: nfs
// mode; OpenSNFS: snfs mode, the cache manager made by newFS's mode
// factory, snfsMode) and never changes; fusefs takes it once, at
// Mount (FS.Ops), and the FS's own methods of the same names go through it.
//
// In snfs mode a file the protocol does not open (not a regular file) is
// the core's: its File says which (snfsOpened), so the cache manager's
// operations hand such files to the core's.
type Ops interface {
	Open(ctx context.Context, i *Inode, c Cred, flags int) (f *File, keepCache bool, err error)
	Create(ctx context.Context, dir *Inode, c Cred, name string, mode uint32, excl bool, flags int) (Entry, *File, error)
	Read(ctx context.Context, f *File, off uint64, buf []byte) (int, error)
	Write(ctx context.Context, f *File, off uint64, data []byte) (int, error)
	Append(ctx context.Context, f *File, data []byte) (uint64, int, error)
	Flush(ctx context.Context, f *File) error
	Fsync(ctx context.Context, f *File) error
	Release(ctx context.Context, f *File) error
	Setattr(ctx context.Context, i *Inode, c Cred, s SetAttr) (nfs3.Fattr, time.Duration, error)
	Getlk(ctx context.Context, i *Inode, owner uint64, kind LockKind, off, n uint64) (*LockHolder, error)
	Setlk(ctx context.Context, f *File, owner uint64, kind LockKind, off, n uint64, wait bool) error
	UnlockOwner(ctx context.Context, i *Inode, owner uint64) error
	Allocate(ctx context.Context, f *File, off, length uint64, mode uint32) error
	GetXattr(ctx context.Context, i *Inode, c Cred, name string) ([]byte, error)
	ListXattrs(ctx context.Context, i *Inode, c Cred) ([]string, error)
	SetXattr(ctx context.Context, i *Inode, c Cred, name string, value []byte, flags uint32) error
	RemoveXattr(ctx context.Context, i *Inode, c Cred, name string) error

	// What the core asks of the mode inside its own operations.

	// beforeThrough runs before i's data goes through the server (a flush
	// of written data, with i.flushMu held): snfs mode writes back the
	// cache directory's older dirty data first (writeBackFirst).
	beforeThrough(ctx context.Context, i *Inode) error
	// removed: child (nil if unknown) lost a link by REMOVE or a RENAME
	// over it; nlink is its link count before (snfsRemoved).
	removed(child *Inode, nlink uint32)

	// What the core's inode asks of the mode, with i.mu held (a hook
	// takes no Inode lock; snfs mode's busyLocked takes fs.sn.mu, which
	// comes after i.mu, as everywhere): the attributes' lifetime while the
	// mode decides it (ok false: the core's adaptive timeouts), the
	// reported attributes with the mode's pending changes laid over, and
	// whether the inode must outlive the kernel's FORGET.
	attrTTLLocked(i *Inode) (d time.Duration, ok bool)
	adjustLocked(i *Inode, a *nfs3.Fattr)
	busyLocked(i *Inode) bool

	// clearSetID sends a set-ID file's data just written by f to the
	// server, as its writer (ClearSetID, setid.go, has checked the bits).
	clearSetID(ctx context.Context, f *File) error

	// lockLease: f holds a lock the lock table does not know lost; is it
	// (lockCheck, before f's reads and writes)? snfs mode checks the
	// server's verifier and renews the lock lease; nfs mode's NLM has none.
	lockLease(ctx context.Context, f *File) (lost bool, err error)
	// lockLostLocked: f's lock was just marked lost (markLost, under the
	// lock table's mu, f still open).
	lockLostLocked(f *File, h *heldLocks)

	// dropDelegations: the locks held were just found lost (markLost,
	// before they are marked): snfs mode forgets its lock delegations, all
	// or with verf set those granted under another server verifier.
	dropDelegations(verf *snfs1.Verifier)

	// newInode fills a new inode's slot for the mode's own state
	// (Inode.ext), before the inode is known to anyone.
	newInode(i *Inode)

	// The FS's start (New, once the root's attributes are in), Sync and
	// Close in the mode.
	start(ctx context.Context) error
	sync(ctx context.Context) error
	close() error

	// serverLocks: do locks go to the server (FS.ServerLocks)?
	serverLocks() bool
}

// Ops returns the mode's operations (chosen in New).
func (fs *FS) Ops() Ops { return fs.ops }

// nfsOps is the plain NFSv3 core's Ops (file.go, ops.go, append.go).
type nfsOps struct{ fs *FS }

// Getlk is FS.Getlk in nfs mode: the server's NLM (Config.NLM), or none
// (the kernel keeps the locks: ENOSYS).
func (o nfsOps) Getlk(ctx context.Context, i *Inode, owner uint64, kind LockKind, off, n uint64) (*LockHolder, error) {
	if o.fs.nl == nil {
		return nil, syscall.ENOSYS
	}
	return o.fs.nlmGetlk(ctx, i, owner, kind, off, n)
}

// Setlk is FS.Setlk in nfs mode (as Getlk).
func (o nfsOps) Setlk(ctx context.Context, f *File, owner uint64, kind LockKind, off, n uint64, wait bool) error {
	if o.fs.nl == nil {
		return syscall.ENOSYS
	}
	return o.fs.nlmSetlk(ctx, f, owner, kind, off, n, wait)
}

// UnlockOwner is FS.UnlockOwner in nfs mode (as Getlk; nothing to do for
// the kernel's own locks).
func (o nfsOps) UnlockOwner(ctx context.Context, i *Inode, owner uint64) error {
	if o.fs.nl == nil {
		return nil
	}
	return o.fs.nlmUnlockOwner(ctx, i, owner)
}

// Allocate is FS.Allocate in nfs mode: NFSv3 has no ALLOCATE.
func (nfsOps) Allocate(context.Context, *File, uint64, uint64, uint32) error { return ErrNotSupported }

// Extended attributes: NFSv3 has none; snfs mode's are the protocol's
// (xattr.go).

// GetXattr is FS.GetXattr in nfs mode.
func (nfsOps) GetXattr(context.Context, *Inode, Cred, string) ([]byte, error) {
	return nil, ErrNotSupported
}

// ListXattrs is FS.ListXattrs in nfs mode.
func (nfsOps) ListXattrs(context.Context, *Inode, Cred) ([]string, error) {
	return nil, ErrNotSupported
}

// SetXattr is FS.SetXattr in nfs mode.
func (nfsOps) SetXattr(context.Context, *Inode, Cred, string, []byte, uint32) error {
	return ErrNotSupported
}

// RemoveXattr is FS.RemoveXattr in nfs mode.
func (nfsOps) RemoveXattr(context.Context, *Inode, Cred, string) error { return ErrNotSupported }

func (nfsOps) beforeThrough(context.Context, *Inode) error { return nil }
func (nfsOps) removed(*Inode, uint32)                      {}

// clearSetID writes f's file's buffered data through, as its writer.
func (o nfsOps) clearSetID(ctx context.Context, f *File) error { return f.i.flush(ctx, false) }

func (nfsOps) newInode(*Inode)                 {}
func (nfsOps) dropDelegations(*snfs1.Verifier) {}

func (nfsOps) lockLease(context.Context, *File) (bool, error) { return false, nil }
func (nfsOps) lockLostLocked(*File, *heldLocks)               {}

// start starts nfs mode's lock service (Config.NLM), if any.
func (o nfsOps) start(ctx context.Context) error {
	if o.fs.cfg.NLM == nil {
		return nil
	}
	return o.fs.startNLM(ctx, *o.fs.cfg.NLM)
}

// sync writes back every file's unwritten data.
func (o nfsOps) sync(ctx context.Context) error { return o.fs.syncCore(ctx) }

// close ends nfs mode's lock service (Config.NLM), if any.
func (o nfsOps) close() error {
	if o.fs.nl != nil {
		o.fs.nl.closeOnce.Do(o.fs.closeNLM)
	}
	return nil
}

func (nfsOps) attrTTLLocked(*Inode) (time.Duration, bool) { return 0, false }
func (nfsOps) adjustLocked(*Inode, *nfs3.Fattr)           {}
func (nfsOps) busyLocked(*Inode) bool                     { return false }

// serverLocks: nfs mode's locks go to the server with NLM only.
func (o nfsOps) serverLocks() bool { return o.fs.nl != nil }
