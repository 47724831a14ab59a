package cachemgr

import (
	"context"
	"os"
	"time"

	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state/clientfile"
)

// snfs mode's Ops: the cache manager's own methods (mode.go has the
// interface and the core's, nfsOps). A file the protocol does not open (not
// a regular file) is the core's, so most of them hand such files to it.

var _ SNFSMode = (*snfsFS)(nil)

// The snfs cache manager's Ops are snfsFS's own methods (this file,
// snfsio.go, callback.go, snfsappend.go): the protocol's opens of regular
// files; anything else is the core's.
var _ vfs.Ops = (*snfsFS)(nil)

// core is the core's Ops on the same FS.
func (sn *snfsFS) core() vfs.NFSOps { return vfs.NFSOps{FS: sn.FS} }

// Open is FS.Open in snfs mode.
func (sn *snfsFS) Open(ctx context.Context, i *vfs.Inode, c vfs.Cred, flags int) (*vfs.File, bool, error) {
	if i.Type != nfs3.TypeReg {
		return sn.core().Open(ctx, i, c, flags)
	}
	if isProvFH(i.FH) && sn.disc.offline() {
		f, err := sn.offlineOpenFile(i, c, flags) // offlinedata.go
		return f, false, err
	}
	if isProvFH(i.FH) {
		// Made locally: its creator's open of its local data
		// (permitdata.go), else the real file's (resolved first).
		if f := sn.provDataOpen(i, c, flags); f != nil {
			return f, false, nil
		}
		ri, err := sn.Resolve(ctx, i, false)
		if err != nil {
			return nil, false, err
		}
		i = ri
	}
	if p := sn.permits; p != nil {
		// A file made locally whose data is not on the server yet:
		// written there first (permitdurable.go).
		if err := p.pushBeforeOpen(ctx, i.FH); err != nil {
			return nil, false, err
		}
		if err := sn.beforeLinkedCall(ctx, i, "an OPEN"); err != nil {
			return nil, false, err // permittimes.go
		}
	}
	if vfs.ChangesFile(flags) {
		if err := sn.FS.RefuseChange(); err != nil {
			return nil, false, err
		}
	}
	return sn.snfsOpen(ctx, i, c, flags)
}

// Create is FS.Create in snfs mode: the new file is opened for writing
// with the protocol. Made locally under a write-back permit (permitcreate.go)
// when it may be; else one round trip, CREATE_OPEN (createopen.go), unless
// the server has no CREATE_OPEN: then CREATE, and OPEN.
func (sn *snfsFS) Create(ctx context.Context, dir *vfs.Inode, c vfs.Cred, name string, mode uint32, excl bool, flags int) (vfs.Entry, *vfs.File, error) {
	if sn.disc.offline() {
		if e, f, done, err := sn.offlineCreate(dir, c, name, mode, flags); done {
			return e, f, err // offline.go
		}
	}
	if e, f, done, err := sn.localCreate(ctx, dir, c, name, mode, flags); done {
		return e, f, err // permitcreate.go
	}
	if !sn.noCreateOpen.Load() {
		return sn.createOpen(ctx, dir, c, name, mode, excl, flags) // createopen.go
	}
	e, err := sn.FS.CreateCore(ctx, dir, c, name, mode, excl, flags)
	if err != nil {
		return vfs.Entry{}, nil, err
	}
	return sn.snfsCreated(ctx, e, c, flags, nil)
}

// Read is FS.Read in snfs mode.
func (sn *snfsFS) Read(ctx context.Context, f *vfs.File, off uint64, buf []byte) (int, error) {
	if of := offOf(f); of != nil {
		return sn.offRead(ctx, f, of, off, buf) // offlinedata.go
	}
	if pf := provOf(f); pf != nil {
		if sn.provEmpty(f, pf) {
			return 0, nil
		}
		rf, err := sn.provReal(ctx, f, pf)
		if err != nil {
			return 0, err
		}
		return sn.Read(ctx, rf, off, buf)
	}
	if err := sn.FS.LockCheck(ctx, f); err != nil {
		return 0, err // its lock was lost (locklost.go)
	}
	if !snfsOpened(f) {
		return sn.FS.ReadCore(ctx, f, off, buf)
	}
	return sn.snfsRead(ctx, f, off, buf)
}

// Write is FS.Write in snfs mode.
func (sn *snfsFS) Write(ctx context.Context, f *vfs.File, off uint64, data []byte) (int, error) {
	if of := offOf(f); of != nil {
		_, n, err := sn.offWrite(ctx, f, of, off, data, false)
		return n, err
	}
	if pf := provOf(f); pf != nil {
		rf, err := sn.provReal(ctx, f, pf)
		if err != nil {
			return 0, err
		}
		return sn.Write(ctx, rf, off, data)
	}
	if err := sn.FS.WriteCheck(ctx, f); err != nil {
		return 0, err
	}
	if !snfsOpened(f) {
		_, n, err := sn.FS.Buffered(ctx, f, off, data, false)
		return n, err
	}
	return sn.snfsWrite(ctx, f, off, data)
}

// Append is FS.Append in snfs mode.
func (sn *snfsFS) Append(ctx context.Context, f *vfs.File, data []byte) (uint64, int, error) {
	if of := offOf(f); of != nil {
		return sn.offWrite(ctx, f, of, 0, data, true)
	}
	if pf := provOf(f); pf != nil {
		rf, err := sn.provReal(ctx, f, pf)
		if err != nil {
			return 0, 0, err
		}
		return sn.Append(ctx, rf, data)
	}
	if err := sn.FS.RefuseChange(); err != nil {
		return 0, 0, err
	}
	if !snfsOpened(f) {
		return sn.FS.AppendCore(ctx, f, data)
	}
	return sn.snfsAppend(ctx, f, data)
}

// Flush is FS.Flush in snfs mode.
func (sn *snfsFS) Flush(ctx context.Context, f *vfs.File) error {
	if of := offOf(f); of != nil {
		return sn.offSync(ctx, f, of, true)
	}
	if pf := provOf(f); pf != nil {
		return sn.provFlush(ctx, pf)
	}
	if !snfsOpened(f) {
		return f.I.Flush(ctx, true)
	}
	return sn.snfsFlush(ctx, f)
}

// Fsync is FS.Fsync in snfs mode.
func (sn *snfsFS) Fsync(ctx context.Context, f *vfs.File) error {
	if of := offOf(f); of != nil {
		return sn.offSync(ctx, f, of, false)
	}
	if pf := provOf(f); pf != nil {
		rf, err := sn.provReal(ctx, f, pf)
		if err != nil {
			return err
		}
		return sn.Fsync(ctx, rf)
	}
	if !snfsOpened(f) {
		return f.I.Flush(ctx, true)
	}
	return sn.snfsFsync(ctx, f)
}

// Release is FS.Release in snfs mode.
func (sn *snfsFS) Release(ctx context.Context, f *vfs.File) error {
	sn.FS.DropHeld(f.I, f, 0)
	if of := offOf(f); of != nil {
		return sn.offRelease(ctx, f, of)
	}
	if pf := provOf(f); pf != nil {
		return sn.provRelease(ctx, f, pf)
	}
	if !snfsOpened(f) {
		return sn.FS.ReleaseCore(ctx, f)
	}
	return sn.snfsRelease(ctx, f)
}

// Setattr is FS.Setattr in snfs mode: a size change of a file this client
// caches for writing is made in the cache (snfsSetattrLocal); otherwise the
// pending write-back goes first (it would change the size or mtime set
// here), and the change the server took is applied to the cache.
func (sn *snfsFS) Setattr(ctx context.Context, i *vfs.Inode, c vfs.Cred, s vfs.SetAttr) (nfs3.Fattr, time.Duration, error) {
	fs := sn.FS
	if err := fs.RefuseChange(); err != nil {
		return nfs3.Fattr{}, 0, err
	}
	if isProvFH(i.FH) {
		if a, done, err := sn.offTruncate(i, s); done {
			return a, offlineAttrTTL, err // offlinedata.go
		}
		if sn.disc.offline() {
			if a, done, err := sn.offlineSetattr(i, c, s); done {
				return a, offlineAttrTTL, err // offlinesetattr.go
			}
		}
		// Made locally (fusefs does not resolve a Setattr): permitsetattr.go.
		ri, a, ttl, done, err := sn.provSetattr(ctx, i, c, s)
		if done {
			return a, ttl, err
		}
		i = ri
	}
	if sn.disc.offline() {
		if a, done, err := sn.offlineSetattrServer(i, c, s); done {
			return a, offlineAttrTTL, err // offlineattr.go
		}
	}
	if i.Type == nfs3.TypeDir {
		// Under its permit, or through the server after the changes logged
		// in it (permitsetattr.go).
		if a, ttl, done, err := sn.localSetattr(ctx, i, c, s); done {
			return a, ttl, err
		}
		if err := sn.BeforeDirChange(ctx, i); err != nil {
			return nfs3.Fattr{}, 0, err
		}
	} else if err := sn.beforeLinkedCall(ctx, i, "a SETATTR"); err != nil {
		return nfs3.Fattr{}, 0, err // permittimes.go
	}
	if a, ttl, done, err := sn.snfsSetattrLocal(i, c, s); done {
		return a, ttl, err
	}
	if sn.disc.offline() {
		if a, ttl, done, err := sn.offlineTruncate(ctx, i, c, s); done {
			return a, ttl, err // offlinewrite.go
		}
	}
	if s.Size != nil || s.Atime != nil || s.Mtime != nil {
		if err := sn.writeBackInode(ctx, i); err != nil {
			return nfs3.Fattr{}, 0, err
		}
	}
	return fs.SetattrCore(ctx, i, c, s, func(w *nfs3.WccData) {
		sn.snfsOwnChange(i, w)
		sn.snfsSized(i, s.Size) // only a size the server took
	})
}

// Getlk is FS.Getlk in snfs mode: the protocol's LOCKT, or this client's
// lock delegation (lock.go).
func (sn *snfsFS) Getlk(ctx context.Context, i *vfs.Inode, owner uint64, kind vfs.LockKind, off, n uint64) (*vfs.LockHolder, error) {
	return sn.snfsGetlk(ctx, i, owner, kind, off, n)
}

// Setlk is FS.Setlk in snfs mode (lock.go).
func (sn *snfsFS) Setlk(ctx context.Context, f *vfs.File, owner uint64, kind vfs.LockKind, off, n uint64, wait bool) error {
	if of := offOf(f); of != nil {
		rf, err := sn.offResolved(ctx, f, of) // locks are the server's
		if err != nil {
			return err
		}
		return sn.Setlk(ctx, rf, owner, kind, off, n, wait)
	}
	if pf := provOf(f); pf != nil {
		rf, err := sn.provReal(ctx, f, pf)
		if err != nil {
			return err
		}
		return sn.Setlk(ctx, rf, owner, kind, off, n, wait)
	}
	return sn.snfsSetlk(ctx, f, owner, kind, off, n, wait)
}

// UnlockOwner is FS.UnlockOwner in snfs mode (lock.go).
func (sn *snfsFS) UnlockOwner(ctx context.Context, i *vfs.Inode, owner uint64) error {
	if isProvFH(i.FH) {
		// Locks are taken on the real file (Setlk resolves).
		if i = sn.provMapped(i); i == nil {
			return nil
		}
	}
	return sn.snfsUnlockOwner(ctx, i, owner)
}

// Allocate is FS.Allocate in snfs mode: the protocol's ALLOCATE (allocate.go).
func (sn *snfsFS) Allocate(ctx context.Context, f *vfs.File, off, length uint64, mode uint32) error {
	if of := offOf(f); of != nil {
		rf, err := sn.offResolved(ctx, f, of)
		if err != nil {
			return err
		}
		return sn.Allocate(ctx, rf, off, length, mode)
	}
	if pf := provOf(f); pf != nil {
		rf, err := sn.provReal(ctx, f, pf)
		if err != nil {
			return err
		}
		return sn.Allocate(ctx, rf, off, length, mode)
	}
	return sn.snfsAllocate(ctx, f, off, length, mode)
}

// GetXattr is FS.GetXattr in snfs mode.
func (sn *snfsFS) GetXattr(ctx context.Context, i *vfs.Inode, c vfs.Cred, name string) ([]byte, error) {
	return sn.getXattr(ctx, i, c, name) // of a provisional object: none (xattr.go)
}

// ListXattrs is FS.ListXattrs in snfs mode.
func (sn *snfsFS) ListXattrs(ctx context.Context, i *vfs.Inode, c vfs.Cred) ([]string, error) {
	return sn.listXattrs(ctx, i, c)
}

// SetXattr is FS.SetXattr in snfs mode.
func (sn *snfsFS) SetXattr(ctx context.Context, i *vfs.Inode, c vfs.Cred, name string, value []byte, flags uint32) error {
	return sn.setXattr(ctx, i, c, name, value, flags)
}

// RemoveXattr is FS.RemoveXattr in snfs mode.
func (sn *snfsFS) RemoveXattr(ctx context.Context, i *vfs.Inode, c vfs.Cred, name string) error {
	return sn.removeXattr(ctx, i, c, name)
}

func (sn *snfsFS) BeforeThrough(ctx context.Context, i *vfs.Inode) error {
	return sn.writeBackFirst(ctx, i)
}

func (sn *snfsFS) BeforeGetattr(ctx context.Context, i *vfs.Inode) { sn.pinBeforeGetattr(ctx, i) }

func (sn *snfsFS) Removed(child *vfs.Inode, nlink uint32) { sn.snfsRemoved(child, nlink) }

func (sn *snfsFS) Removing(child *vfs.Inode, nlink uint32) func() {
	return sn.snfsRemoving(child, nlink)
}

// SendSetID writes a cached file back (as the last writer: this one,
// snfsWrite); a write-through was sent already; a file the protocol does
// not open is the core's.
func (sn *snfsFS) SendSetID(ctx context.Context, f *vfs.File) error {
	if provOf(f) != nil || offOf(f) != nil {
		return nil // made without set-ID bits (localMake); its writes went to the real open
	}
	if !snfsOpened(f) {
		return sn.core().SendSetID(ctx, f)
	}
	if snfsCaching(f.I) {
		return sn.writeBackInode(ctx, f.I)
	}
	return nil
}

func (sn *snfsFS) InitInode(i *vfs.Inode) {
	i.Ext = &snfsInode{st: clientfile.New(clientfile.Config{CloseDelay: sn.given.CloseDelay})}
}

// Start starts snfs mode (snfs.go).
func (sn *snfsFS) Start(ctx context.Context) error { return sn.startSNFS(ctx, sn.given) }

// SyncData writes back the cache directory's dirty files, then what the core
// holds in memory.
func (sn *snfsFS) SyncData(ctx context.Context) error {
	if sn.permits != nil {
		if err := sn.permits.syncData(ctx, "sync"); err != nil { // permitdurable.go
			return err
		}
	}
	if err := sn.snfsSync(ctx); err != nil {
		return err
	}
	return sn.FS.SyncCore(ctx)
}

// Stop ends snfs mode (snfs.go).
func (sn *snfsFS) Stop() error { return sn.closeSNFS() }

func (*snfsFS) AttrTTLLocked(i *vfs.Inode) (time.Duration, bool) { return snfsTTL(i) }

func (*snfsFS) AdjustLocked(i *vfs.Inode, a *nfs3.Fattr) { snfsAdjustLocked(i, a) }

func (sn *snfsFS) BusyLocked(i *vfs.Inode) bool {
	if sn.permits != nil && !isProvFH(i.FH) && sn.permits.made.realHeld(i.FH) {
		return true // a provisional inode's operations resolve to it (permitmake.go)
	}
	if isProvFH(i.FH) && sn.permits != nil && sn.permits.made.live(i.FH) {
		// A live provisional object is known only here: its inode stays
		// while its name does.
		return true
	}
	busy := snfsBusyLocked(i)
	if !busy {
		if isProvFH(i.FH) && sn.permits != nil {
			sn.permits.made.forget(i.FH) // settled: dropped with its inode
		}
		sn.names.forgetLocked(i) // about to be dropped: its attributes stay with its name
	}
	return busy
}

// LocksAtServer: snfs mode's locks are the protocol's, always the server's.
func (*snfsFS) LocksAtServer() bool { return true }

// SNFSMode is what of snfs mode's cache manager is called from outside the
// package other than its Ops: the bridge (fusefs) and package mount take it
// once, when they set up the mount (FS.SNFS: nil in nfs mode), and call it
// only if they have it. The session's callbacks (Callback, Granted) reach
// the manager through the session's handler (snfsopen.go).
type SNFSMode interface {
	// EnablePassthrough: the kernel agreed to FUSE passthrough (passthrough.go).
	EnablePassthrough()
	// PassthroughFile is the descriptor the kernel does f's I/O on, or nil.
	PassthroughFile(f *vfs.File) *os.File
	// NoteLockPid: thread pid took the lock f just got (snfslocklost.go).
	NoteLockPid(f *vfs.File, pid uint32)
	// DirtyBytes is the data in the cache directory not yet written back.
	DirtyBytes() int64
	// SNFSStats are snfs mode's counters.
	SNFSStats() *SNFSStats
	// NameCacheCount is the name cache's counter of an event of
	// NameCacheEvents (names.go).
	NameCacheCount(event string) uint64
	// SyncDir is a directory's fsync: the changes logged under write-back
	// permits are made durable and reintegrated (permits.go).
	SyncDir(ctx context.Context, dir *vfs.Inode) error
}

func (sn *snfsFS) DropDelegations(verf *snfs1.Verifier) { sn.locks.dropDelegs(verf) }

// SNFS returns fs's snfs mode cache manager, nil in nfs mode (vfs.New); it
// is made by OpenSNFS.
func SNFS(fs *vfs.FS) SNFSMode {
	if sn, ok := fs.Ops().(*snfsFS); ok {
		return sn
	}
	return nil
}

// StatsOf returns snfs mode's counters of fs; the tests' shorthand of
// SNFS(fs).SNFSStats(), in snfs mode only.
func StatsOf(fs *vfs.FS) *SNFSStats { return mgrOf(fs).SNFSStats() }

// mgrOf is the cache manager of fs, which is in snfs mode.
func mgrOf(fs *vfs.FS) *snfsFS { return fs.Ops().(*snfsFS) }
