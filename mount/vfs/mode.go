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

	// BeforeThrough runs before i's data goes through the server (a flush
	// of written data, with i.FlushMu held): snfs mode writes back the
	// cache directory's older dirty data first (writeBackFirst).
	BeforeThrough(ctx context.Context, i *Inode) error
	// BeforeGetattr runs before a GETATTR asks the server for i's
	// attributes: snfs mode sends what the kernel wrote to a pinned
	// file's cache file first (cachemgr's pinned.go), so that the
	// server's size, which it then reports as the file's, counts it.
	BeforeGetattr(ctx context.Context, i *Inode)
	// Removed: child (nil if unknown) lost a link by REMOVE or a RENAME
	// over it; nlink is its link count before (snfsRemoved).
	Removed(child *Inode, nlink uint32)
	// Removing: child (nil if unknown) is about to lose a link by REMOVE
	// or a RENAME over it, made locally or through the server; nlink is
	// its link count before. done runs when the change did not remove the
	// link after all (an error, a silly rename): Removed runs otherwise
	// (snfsRemoving).
	Removing(child *Inode, nlink uint32) (done func())

	// What the core's inode asks of the mode, with i.Mu held (a hook
	// takes no Inode lock; snfs mode's busyLocked takes fs.sn.mu, which
	// comes after i.Mu, as everywhere): the attributes' lifetime while the
	// mode decides it (ok false: the core's adaptive timeouts), the
	// reported attributes with the mode's pending changes laid over, and
	// whether the inode must outlive the kernel's FORGET.
	AttrTTLLocked(i *Inode) (d time.Duration, ok bool)
	AdjustLocked(i *Inode, a *nfs3.Fattr)
	BusyLocked(i *Inode) bool
	// RenewAttrs: i's attributes are stale (AttrTTLLocked said 0); may the
	// mode make them fresh without a GETATTR (snfs mode: a lapsed lease
	// of the directory promise covering them, renewed by a NULL)? true:
	// ask AttrTTLLocked again.
	RenewAttrs(ctx context.Context, i *Inode) bool

	// SendSetID sends a set-ID file's data just written by f to the
	// server, as its writer (ClearSetID, setid.go, has checked the bits).
	SendSetID(ctx context.Context, f *File) error

	// LockLease: f holds a lock the lock table does not know lost; is it
	// (lockCheck, before f's reads and writes)? snfs mode checks the
	// server's verifier and renews the lock lease; nfs mode's NLM has none.
	LockLease(ctx context.Context, f *File) (lost bool, err error)
	// LockLostLocked: f's lock was just marked lost (markLost, under the
	// lock table's mu, f still open).
	LockLostLocked(f *File, h *HeldLocks)

	// DropDelegations: the locks held were just found lost (markLost,
	// before they are marked): snfs mode forgets its lock delegations, all
	// or with verf set those granted under another server verifier.
	DropDelegations(verf *snfs1.Verifier)

	// InitInode fills a new inode's slot for the mode's own state
	// (Inode.Ext), before the inode is known to anyone.
	InitInode(i *Inode)

	// The FS's start (New, once the root's attributes are in), Sync and
	// Close in the mode.
	Start(ctx context.Context) error
	SyncData(ctx context.Context) error
	Stop() error

	// LocksAtServer: do locks go to the server (FS.ServerLocks)?
	LocksAtServer() bool

	// The mode's cache of directories (snfs mode: under directory
	// promises, cachemgr's names.go); ok false: the core's way.
	//
	// LookupName answers FS.Lookup of name in dir.
	LookupName(ctx context.Context, dir *Inode, c Cred, name string) (e Entry, ok bool, err error)
	// ListNames answers a listing of dir: for an open (OpenDirCached,
	// open true, cached: the kernel may keep its listing), or a READDIR
	// (ReadDir, ListedDir).
	ListNames(ctx context.Context, dir *Inode, c Cred, open bool) (ents []DirEntry, cached, ok bool, err error)
	// EntryTTLLocked is how long the kernel may keep a name of dir naming
	// child (nil: any name of dir), with dir.Mu held.
	EntryTTLLocked(dir, child *Inode) (d time.Duration, ok bool)
	// NamesKept reports whether the kernel may hold names of dir given
	// with a lifetime the mode takes back with NotifyNames (snfs mode's
	// directories under a write-back permit), whatever EntryTTLLocked
	// would answer now.
	NamesKept(dir *Inode) bool
	// DirChanged: this client's change of name in dir ended with err (nil:
	// name is now child's, or gone when child is nil; an NFS status: the
	// server made no change; another error: unknown).
	DirChanged(dir *Inode, name string, child *Inode, err error)

	// Write-back permits (snfs mode, docs/mount.md "The client
	// modification log"): LocalRemove makes the REMOVE (rmdir: the RMDIR)
	// of name in dir locally, logged, when the mode holds dir's permit
	// (done false: not made, the core sends it); child is what name names,
	// if known, and made, the attributes the object has after it (one link
	// fewer, its ctime) are the mode's to give it. BeforeDirChange runs before the core sends a change of
	// dirs' entries: the changes the mode logged go first, as made.
	LocalRemove(ctx context.Context, dir *Inode, c Cred, name string, child *Inode, rmdir bool) (done bool, err error)
	// LocalRename is LocalRemove's RENAME of from/name to to/newName
	// (target: what newName names, if known, given its attributes after
	// as LocalRemove's child).
	LocalRename(ctx context.Context, from *Inode, name string, to *Inode, newName string, c Cred, target *Inode, noReplace bool) (done bool, err error)
	BeforeDirChange(ctx context.Context, dirs ...*Inode) error
	// LocalMkdir is LocalRemove's MKDIR: the new directory is a
	// provisional object (its inode's handle is made up and never sent:
	// Resolve), until the log that makes it is reintegrated.
	LocalMkdir(ctx context.Context, dir *Inode, c Cred, name string, mode uint32) (e Entry, done bool, err error)
	// LocalSymlink is LocalMkdir's SYMLINK: the new link is a provisional
	// object whose target the mode answers (the inode's, SetTargetLocked).
	LocalSymlink(ctx context.Context, dir *Inode, c Cred, name, target string) (e Entry, done bool, err error)
	// LocalLink is LocalRemove's LINK of i as dir/name (i is no
	// provisional object: fusefs resolves it first).
	LocalLink(ctx context.Context, i, dir *Inode, c Cred, name string) (e Entry, done bool, err error)
	// Resolve is i itself, unless i is a provisional object's inode: then
	// it stays i only for an operation the mode serves locally (local: a
	// lookup in it, its attributes, its listing, a link's target) while
	// the object is not
	// reintegrated; otherwise it is the real object's inode (the log is
	// reintegrated first if needed), or an error (the object is gone).
	Resolve(ctx context.Context, i *Inode, local bool) (*Inode, error)
}

// Ops returns the mode's operations (chosen in New).
func (fs *FS) Ops() Ops { return fs.ops }

// nfsOps is the plain NFSv3 core's Ops (file.go, ops.go, create.go, append.go).
type NFSOps struct{ FS *FS }

// Getlk is FS.Getlk in nfs mode: the server's NLM (Config.NLM), or none
// (the kernel keeps the locks: ENOSYS).
func (o NFSOps) Getlk(ctx context.Context, i *Inode, owner uint64, kind LockKind, off, n uint64) (*LockHolder, error) {
	if o.FS.nl == nil {
		return nil, syscall.ENOSYS
	}
	return o.FS.nlmGetlk(ctx, i, owner, kind, off, n)
}

// Setlk is FS.Setlk in nfs mode (as Getlk).
func (o NFSOps) Setlk(ctx context.Context, f *File, owner uint64, kind LockKind, off, n uint64, wait bool) error {
	if o.FS.nl == nil {
		return syscall.ENOSYS
	}
	return o.FS.nlmSetlk(ctx, f, owner, kind, off, n, wait)
}

// UnlockOwner is FS.UnlockOwner in nfs mode (as Getlk; nothing to do for
// the kernel's own locks).
func (o NFSOps) UnlockOwner(ctx context.Context, i *Inode, owner uint64) error {
	if o.FS.nl == nil {
		return nil
	}
	return o.FS.nlmUnlockOwner(ctx, i, owner)
}

// Allocate is FS.Allocate in nfs mode: NFSv3 has no ALLOCATE.
func (NFSOps) Allocate(context.Context, *File, uint64, uint64, uint32) error { return ErrNotSupported }

// Extended attributes: NFSv3 has none; snfs mode's are the protocol's
// (xattr.go).

// GetXattr is FS.GetXattr in nfs mode.
func (NFSOps) GetXattr(context.Context, *Inode, Cred, string) ([]byte, error) {
	return nil, ErrNotSupported
}

// ListXattrs is FS.ListXattrs in nfs mode.
func (NFSOps) ListXattrs(context.Context, *Inode, Cred) ([]string, error) {
	return nil, ErrNotSupported
}

// SetXattr is FS.SetXattr in nfs mode.
func (NFSOps) SetXattr(context.Context, *Inode, Cred, string, []byte, uint32) error {
	return ErrNotSupported
}

// RemoveXattr is FS.RemoveXattr in nfs mode.
func (NFSOps) RemoveXattr(context.Context, *Inode, Cred, string) error { return ErrNotSupported }

func (NFSOps) BeforeThrough(context.Context, *Inode) error { return nil }
func (NFSOps) BeforeGetattr(context.Context, *Inode)       {}
func (NFSOps) Removed(*Inode, uint32)                      {}
func (NFSOps) Removing(*Inode, uint32) func()              { return func() {} }

// SendSetID writes f's file's buffered data through, as its writer.
func (o NFSOps) SendSetID(ctx context.Context, f *File) error { return f.I.Flush(ctx, false) }

func (NFSOps) InitInode(*Inode)                {}
func (NFSOps) DropDelegations(*snfs1.Verifier) {}

func (NFSOps) LockLease(context.Context, *File) (bool, error) { return false, nil }
func (NFSOps) LockLostLocked(*File, *HeldLocks)               {}

// Start starts nfs mode's lock service (Config.NLM), if any.
func (o NFSOps) Start(ctx context.Context) error {
	if o.FS.Cfg.NLM == nil {
		return nil
	}
	return o.FS.startNLM(ctx, *o.FS.Cfg.NLM)
}

// SyncData writes back every file's unwritten data.
func (o NFSOps) SyncData(ctx context.Context) error { return o.FS.SyncCore(ctx) }

// Stop ends nfs mode's lock service (Config.NLM), if any.
func (o NFSOps) Stop() error {
	if o.FS.nl != nil {
		o.FS.nl.closeOnce.Do(o.FS.closeNLM)
	}
	return nil
}

func (NFSOps) AttrTTLLocked(*Inode) (time.Duration, bool) { return 0, false }
func (NFSOps) RenewAttrs(context.Context, *Inode) bool    { return false }
func (NFSOps) AdjustLocked(*Inode, *nfs3.Fattr)           {}
func (NFSOps) BusyLocked(*Inode) bool                     { return false }

// nfs mode caches no directory but as the kernel does (OpenDirCached).
func (NFSOps) LookupName(context.Context, *Inode, Cred, string) (Entry, bool, error) {
	return Entry{}, false, nil
}
func (NFSOps) ListNames(context.Context, *Inode, Cred, bool) ([]DirEntry, bool, bool, error) {
	return nil, false, false, nil
}
func (NFSOps) EntryTTLLocked(_, _ *Inode) (time.Duration, bool) { return 0, false }

func (NFSOps) NamesKept(*Inode) bool                    { return false }
func (NFSOps) DirChanged(*Inode, string, *Inode, error) {}

// nfs mode has no write-back permits.
func (NFSOps) LocalRemove(context.Context, *Inode, Cred, string, *Inode, bool) (bool, error) {
	return false, nil
}
func (NFSOps) LocalRename(context.Context, *Inode, string, *Inode, string, Cred, *Inode, bool) (bool, error) {
	return false, nil
}
func (NFSOps) BeforeDirChange(context.Context, ...*Inode) error { return nil }
func (NFSOps) LocalMkdir(context.Context, *Inode, Cred, string, uint32) (Entry, bool, error) {
	return Entry{}, false, nil
}
func (NFSOps) LocalSymlink(context.Context, *Inode, Cred, string, string) (Entry, bool, error) {
	return Entry{}, false, nil
}
func (NFSOps) LocalLink(context.Context, *Inode, *Inode, Cred, string) (Entry, bool, error) {
	return Entry{}, false, nil
}
func (NFSOps) Resolve(_ context.Context, i *Inode, _ bool) (*Inode, error) { return i, nil }

// Resolve is the inode an operation on i works on (Ops.Resolve): i itself,
// but for snfs mode's provisional objects.
func (fs *FS) Resolve(ctx context.Context, i *Inode, local bool) (*Inode, error) {
	return fs.ops.Resolve(ctx, i, local)
}

// LocksAtServer: nfs mode's locks go to the server with NLM only.
func (o NFSOps) LocksAtServer() bool { return o.FS.nl != nil }
