package vfs

import (
	"context"
	"os"
	"syscall"
	"time"

	"snfs/nfs3"
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

// SNFSMode is what of snfs mode's cache manager is called from outside the
// package other than its Ops: the bridge (fusefs) and package mount take it
// once, when they set up the mount (FS.SNFS: nil in nfs mode), and call it
// only if they have it. The session's callbacks (Callback, Granted) reach
// the manager through the session's handler (snfsopen.go).
type SNFSMode interface {
	// EnablePassthrough: the kernel agreed to FUSE passthrough (passthrough.go).
	EnablePassthrough()
	// PassthroughFile is the descriptor the kernel does f's I/O on, or nil.
	PassthroughFile(f *File) *os.File
	// NoteLockPid: thread pid took the lock f just got (locklost.go).
	NoteLockPid(f *File, pid uint32)
	// DirtyBytes is the data in the cache directory not yet written back.
	DirtyBytes() int64
	// SNFSStats are snfs mode's counters.
	SNFSStats() *SNFSStats
}

var _ SNFSMode = (*snfsFS)(nil)

// SNFS returns snfs mode's cache manager (nil in nfs mode), chosen in New.
func (fs *FS) SNFS() SNFSMode { return fs.snfs }

// SNFSStats returns snfs mode's counters; the tests' shorthand of
// fs.SNFS().SNFSStats(), in snfs mode only.
func (fs *FS) SNFSStats() *SNFSStats { return fs.snfs.SNFSStats() }

// nfsOps is the plain NFSv3 core's Ops (file.go, ops.go, append.go).
type nfsOps struct{ fs *FS }

// The snfs cache manager's Ops are snfsFS's own methods (snfsio.go,
// callback.go, append.go): the protocol's opens of regular files; anything
// else is the core's.
var _ Ops = (*snfsFS)(nil)

// core is the core's Ops on the same FS.
func (sn *snfsFS) core() nfsOps { return nfsOps{sn.FS} }

// Open is FS.Open in snfs mode.
func (sn *snfsFS) Open(ctx context.Context, i *Inode, c Cred, flags int) (*File, bool, error) {
	if i.Type != nfs3.TypeReg {
		return sn.core().Open(ctx, i, c, flags)
	}
	if changesFile(flags) {
		if err := sn.FS.refuseChange(); err != nil {
			return nil, false, err
		}
	}
	return sn.snfsOpen(ctx, i, c, flags)
}

// Create is FS.Create in snfs mode: the new file is opened for writing
// with the protocol.
func (sn *snfsFS) Create(ctx context.Context, dir *Inode, c Cred, name string, mode uint32, excl bool, flags int) (Entry, *File, error) {
	e, err := sn.FS.createCore(ctx, dir, c, name, mode, excl, flags)
	if err != nil {
		return Entry{}, nil, err
	}
	return sn.snfsCreated(ctx, e, c, flags)
}

// Read is FS.Read in snfs mode.
func (sn *snfsFS) Read(ctx context.Context, f *File, off uint64, buf []byte) (int, error) {
	if err := sn.FS.lockCheck(ctx, f); err != nil {
		return 0, err // its lock was lost (locklost.go)
	}
	if !snfsOpened(f) {
		return sn.FS.readCore(ctx, f, off, buf)
	}
	return sn.snfsRead(ctx, f, off, buf)
}

// Write is FS.Write in snfs mode.
func (sn *snfsFS) Write(ctx context.Context, f *File, off uint64, data []byte) (int, error) {
	if err := sn.FS.writeCheck(ctx, f); err != nil {
		return 0, err
	}
	if !snfsOpened(f) {
		_, n, err := sn.FS.buffered(ctx, f, off, data, false)
		return n, err
	}
	return sn.snfsWrite(ctx, f, off, data)
}

// Append is FS.Append in snfs mode.
func (sn *snfsFS) Append(ctx context.Context, f *File, data []byte) (uint64, int, error) {
	if err := sn.FS.refuseChange(); err != nil {
		return 0, 0, err
	}
	if !snfsOpened(f) {
		return sn.FS.appendCore(ctx, f, data)
	}
	return sn.snfsAppend(ctx, f, data)
}

// Flush is FS.Flush in snfs mode.
func (sn *snfsFS) Flush(ctx context.Context, f *File) error {
	if !snfsOpened(f) {
		return f.i.flush(ctx, true)
	}
	return sn.snfsFlush(ctx, f)
}

// Fsync is FS.Fsync in snfs mode.
func (sn *snfsFS) Fsync(ctx context.Context, f *File) error {
	if !snfsOpened(f) {
		return f.i.flush(ctx, true)
	}
	return sn.snfsFsync(ctx, f)
}

// Release is FS.Release in snfs mode.
func (sn *snfsFS) Release(ctx context.Context, f *File) error {
	sn.FS.dropHeld(f.i, f, 0)
	if !snfsOpened(f) {
		return sn.FS.releaseCore(ctx, f)
	}
	return sn.snfsRelease(ctx, f)
}

// Setattr is FS.Setattr in snfs mode: a size change of a file this client
// caches for writing is made in the cache (snfsSetattrLocal); otherwise the
// pending write-back goes first (it would change the size or mtime set
// here), and the change the server took is applied to the cache.
func (sn *snfsFS) Setattr(ctx context.Context, i *Inode, c Cred, s SetAttr) (nfs3.Fattr, time.Duration, error) {
	fs := sn.FS
	if err := fs.refuseChange(); err != nil {
		return nfs3.Fattr{}, 0, err
	}
	if a, ttl, done, err := fs.sn.snfsSetattrLocal(i, c, s); done {
		return a, ttl, err
	}
	if s.Size != nil || s.Atime != nil || s.Mtime != nil {
		if err := fs.writeBackInode(ctx, i); err != nil {
			return nfs3.Fattr{}, 0, err
		}
	}
	return fs.setattrCore(ctx, i, c, s, func(w *nfs3.WccData) {
		fs.sn.snfsOwnChange(i, w)
		fs.sn.snfsSized(i, s.Size) // only a size the server took
	})
}

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

// Getlk is FS.Getlk in snfs mode: the protocol's LOCKT, or this client's
// lock delegation (lock.go).
func (sn *snfsFS) Getlk(ctx context.Context, i *Inode, owner uint64, kind LockKind, off, n uint64) (*LockHolder, error) {
	return sn.snfsGetlk(ctx, i, owner, kind, off, n)
}

// Setlk is FS.Setlk in snfs mode (lock.go).
func (sn *snfsFS) Setlk(ctx context.Context, f *File, owner uint64, kind LockKind, off, n uint64, wait bool) error {
	return sn.snfsSetlk(ctx, f, owner, kind, off, n, wait)
}

// UnlockOwner is FS.UnlockOwner in snfs mode (lock.go).
func (sn *snfsFS) UnlockOwner(ctx context.Context, i *Inode, owner uint64) error {
	return sn.snfsUnlockOwner(ctx, i, owner)
}

// Allocate is FS.Allocate in nfs mode: NFSv3 has no ALLOCATE.
func (nfsOps) Allocate(context.Context, *File, uint64, uint64, uint32) error { return ErrNotSupported }

// Allocate is FS.Allocate in snfs mode: the protocol's ALLOCATE (allocate.go).
func (sn *snfsFS) Allocate(ctx context.Context, f *File, off, length uint64, mode uint32) error {
	return sn.snfsAllocate(ctx, f, off, length, mode)
}

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

// GetXattr is FS.GetXattr in snfs mode.
func (sn *snfsFS) GetXattr(ctx context.Context, i *Inode, c Cred, name string) ([]byte, error) {
	return sn.getXattr(ctx, i, c, name)
}

// ListXattrs is FS.ListXattrs in snfs mode.
func (sn *snfsFS) ListXattrs(ctx context.Context, i *Inode, c Cred) ([]string, error) {
	return sn.listXattrs(ctx, i, c)
}

// SetXattr is FS.SetXattr in snfs mode.
func (sn *snfsFS) SetXattr(ctx context.Context, i *Inode, c Cred, name string, value []byte, flags uint32) error {
	return sn.FS.setXattr(ctx, i, c, name, value, flags)
}

// RemoveXattr is FS.RemoveXattr in snfs mode.
func (sn *snfsFS) RemoveXattr(ctx context.Context, i *Inode, c Cred, name string) error {
	return sn.FS.removeXattr(ctx, i, c, name)
}

func (nfsOps) beforeThrough(context.Context, *Inode) error { return nil }
func (nfsOps) removed(*Inode, uint32)                      {}

func (sn *snfsFS) beforeThrough(ctx context.Context, i *Inode) error {
	return sn.FS.writeBackFirst(ctx, i)
}
func (sn *snfsFS) removed(child *Inode, nlink uint32) { sn.snfsRemoved(child, nlink) }

// clearSetID writes f's file's buffered data through, as its writer.
func (o nfsOps) clearSetID(ctx context.Context, f *File) error { return f.i.flush(ctx, false) }

// clearSetID writes a cached file back (as the last writer: this one,
// snfsWrite); a write-through was sent already; a file the protocol does
// not open is the core's.
func (sn *snfsFS) clearSetID(ctx context.Context, f *File) error {
	if !snfsOpened(f) {
		return sn.core().clearSetID(ctx, f)
	}
	if snfsCaching(f.i) {
		return sn.FS.writeBackInode(ctx, f.i)
	}
	return nil
}

func (nfsOps) newInode(*Inode) {}

func (nfsOps) lockLease(context.Context, *File) (bool, error) { return false, nil }
func (nfsOps) lockLostLocked(*File, *heldLocks)               {}

func (*snfsFS) newInode(i *Inode) { i.ext = &snfsInode{} }

// start starts nfs mode's lock service (Config.NLM), if any.
func (o nfsOps) start(ctx context.Context) error {
	if o.fs.cfg.NLM == nil {
		return nil
	}
	return o.fs.startNLM(ctx, *o.fs.cfg.NLM)
}

// start starts snfs mode (snfs.go).
func (sn *snfsFS) start(ctx context.Context) error { return sn.FS.startSNFS(ctx, sn.given) }

// sync writes back every file's unwritten data.
func (o nfsOps) sync(ctx context.Context) error { return o.fs.syncCore(ctx) }

// close ends nfs mode's lock service (Config.NLM), if any.
func (o nfsOps) close() error {
	if o.fs.nl != nil {
		o.fs.nl.closeOnce.Do(o.fs.closeNLM)
	}
	return nil
}

// sync writes back the cache directory's dirty files, then what the core
// holds in memory.
func (sn *snfsFS) sync(ctx context.Context) error {
	if err := sn.snfsSync(ctx); err != nil {
		return err
	}
	return sn.FS.syncCore(ctx)
}

// close ends snfs mode (snfs.go).
func (sn *snfsFS) close() error { return sn.closeSNFS() }

func (nfsOps) attrTTLLocked(*Inode) (time.Duration, bool) { return 0, false }
func (nfsOps) adjustLocked(*Inode, *nfs3.Fattr)           {}
func (nfsOps) busyLocked(*Inode) bool                     { return false }

func (*snfsFS) attrTTLLocked(i *Inode) (time.Duration, bool) { return snfsTTL(i) }
func (*snfsFS) adjustLocked(i *Inode, a *nfs3.Fattr)         { snfsAdjustLocked(i, a) }
func (*snfsFS) busyLocked(i *Inode) bool                     { return snfsBusyLocked(i) }

// serverLocks: nfs mode's locks go to the server with NLM only.
func (o nfsOps) serverLocks() bool { return o.fs.nl != nil }
func (*snfsFS) serverLocks() bool  { return true }
