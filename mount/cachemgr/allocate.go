package cachemgr

import (
	"context"
	"errors"
	"fmt"
	"time"

	"snfs/mount/cachedir"
	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/sunrpc"

	"golang.org/x/sys/unix"
)

// fallocate(2) (docs/mount.md, "fallocate"). NFSv3 has no ALLOCATE: in nfs
// mode the mount answers EOPNOTSUPP, as Linux's NFSv3 client does (so
// posix_fallocate falls back to writing zeros itself, through the mount).
// In snfs mode the server does it (SNFS ALLOCATE, docs/protocol.md), so a
// reservation reserves space on the server's file system, where the data
// goes, and ENOSPC comes at the call, not at a write-back later. Three modes
// have a meaning there: 0 (reserve, and extend the size), FALLOC_FL_KEEP_SIZE
// (reserve only) and FALLOC_FL_PUNCH_HOLE|FALLOC_FL_KEEP_SIZE (free the
// range, which then reads as zeros); the others (ZERO_RANGE, COLLAPSE_RANGE,
// INSERT_RANGE, UNSHARE_RANGE) answer EOPNOTSUPP.
//
// The file's changes not yet on the server go first: written-through data is
// committed, cached dirty data written back, so that the server's size and
// bytes are the file's when the allocation applies to them (a local size
// change still pending would otherwise be applied after the allocation and
// undo its extension, and data kept for a rewrite after a server restart
// would land in a hole). Then the change the server made is applied to the
// cache directory (cachedir.File.Allocated): an extension as known zeros, a
// hole as known zeros, so that neither is read back from the server.

// allocModes maps fallocate(2) modes to SNFS allocation modes.
var allocModes = map[uint32]snfs1.AllocMode{
	0:                        snfs1.Allocate,
	unix.FALLOC_FL_KEEP_SIZE: snfs1.AllocateKeepSize,
	unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE: snfs1.Deallocate,
}

// snfsAllocate is Allocate in snfs mode (nfs mode has none: NFSv3 has no
// ALLOCATE).
func (fs *snfsFS) snfsAllocate(ctx context.Context, f *vfs.File, off, length uint64, mode uint32) error {
	am, ok := allocModes[mode]
	if !ok || fs.noAllocate.Load() {
		return vfs.ErrNotSupported
	}
	i := f.I
	if err := fs.snfsNoteExternal(ctx, i); err != nil {
		return err
	}
	if err := i.Flush(ctx, true); err != nil {
		return err
	}
	i.FlushMu.Lock()
	defer i.FlushMu.Unlock()
	// Written back again if the cache got dirty since (a mapped store).
	if err := fs.writeBackFirst(ctx, i); err != nil {
		return err
	}
	res, err := vfs.RPC(ctx, fs.FS, func() (*snfs1.AllocateRes, error) { return fs.Client(f.Cred).Allocate(ctx, i.FH, am, off, length) })
	var rerr *sunrpc.RPCError
	if errors.As(err, &rerr) && (rerr.Accept == sunrpc.ProcUnavail || rerr.Accept == sunrpc.ProgUnavail) {
		if fs.noAllocate.CompareAndSwap(false, true) {
			fs.Logger().Warn("the server has no SNFS ALLOCATE: fallocate on this mount answers EOPNOTSUPP", "err", err)
		}
		return vfs.ErrNotSupported
	}
	if err != nil {
		var st nfs3.Status
		if errors.As(err, &st) {
			fs.allocateFailed(ctx, f, am)
		}
		return fmt.Errorf("ALLOCATE: %w", err)
	}
	i.Mu.Lock()
	if res.Attr != nil {
		i.ModifiedLocked(res.Attr, time.Now())
	} else {
		i.InvalidateLocked()
	}
	cf, pf, caching := snOf(i).cf, snOf(i).pt.pinned, stOf(i).Caching()
	i.Mu.Unlock()
	punch, keep := am == snfs1.Deallocate, am != snfs1.Allocate
	if cf != nil && !caching && cf.Holds() {
		// Not cached (write-shared): clean data kept from before is older
		// than this change, and still labelled with a version the next OPEN
		// may answer as valid (a covered change keeps it), as after a write
		// through (snfsWrite).
		if err := cf.Invalidate(); err != nil && !errors.Is(err, cachedir.ErrRemoved) {
			fs.Logger().Warn("cache directory: drop after an allocation", "fileid", i.FileID, "err", err)
		}
	} else if cf != nil {
		if err := cf.Allocated(int64(off), int64(length), keep, punch); err != nil {
			// The server has it; the cache only lost a shortcut: what it
			// held goes, and is read from the server again.
			fs.Logger().Warn("cache directory: apply an allocation", "fileid", i.FileID, "err", err)
			cf.Invalidate()
			if res.Attr != nil {
				cf.SetVersion(cf.Version(), int64(res.Attr.Size))
			}
		}
		if res.Attr != nil {
			// This client's own change: not another client's at the next
			// reintegration check (reintegrate.go).
			cf.SetBase(baseOf(res.Attr))
		}
	}
	if pf != nil {
		fs.pinAllocated(pf, off, length, am, res.Attr)
	}
	return nil
}

// allocateFailed: the server refused an allocation of f's file, possibly
// after doing part of it (fallocate(2) keeps what it reserved before ENOSPC,
// and the size over it, on ext4 as on a local disk). The file's attributes
// are fetched again, and the size applied to the cache file (written back
// before the call, so the server's size is the file's) and to the kernel.
func (sn *snfsFS) allocateFailed(ctx context.Context, f *vfs.File, am snfs1.AllocMode) {
	fs := sn.FS
	i := f.I
	a, err := fs.GetattrFH(ctx, f.Cred, i.FH)
	i.Mu.Lock()
	if err != nil {
		i.InvalidateLocked()
	} else {
		i.ModifiedLocked(a, time.Now())
	}
	cf, pf := snOf(i).cf, snOf(i).pt.pinned
	i.Mu.Unlock()
	defer fs.NotifyAttr(i)
	if err != nil || am != snfs1.Allocate {
		return
	}
	if cf != nil && !cf.NeedsWriteBack() && cf.Size() != int64(a.Size) {
		cf.SetVersion(cf.Version(), int64(a.Size))
	}
	if pf != nil {
		sn.pinSized(pf, a.Size)
	}
}

// pinAllocated applies an allocation to the cache file of a pinned file,
// which the kernel reads and writes directly: a hole is punched in it too,
// an extension extends it (pinSized); the page sums follow, so that neither
// is taken for the kernel's writes.
func (sn *snfsFS) pinAllocated(pf *pinnedFile, off, length uint64, am snfs1.AllocMode, a *nfs3.Fattr) {
	fs := sn.FS
	switch am {
	case snfs1.AllocateKeepSize:
		return
	case snfs1.Allocate:
		if a != nil {
			sn.pinSized(pf, a.Size)
		}
		return
	}
	pf.mu.Lock()
	defer pf.mu.Unlock()
	if pf.gone {
		return
	}
	if err := unix.Fallocate(int(pf.fd.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, int64(off), int64(length)); err != nil {
		fs.Logger().Warn("passthrough: punch cache file", "fileid", pf.i.FileID, "err", err)
	}
	lo := off &^ (pinPage - 1)
	pf.resumLocked(span{lo, span{off, length}.end() - lo})
}
