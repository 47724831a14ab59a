package cachemgr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"

	"snfs/mount/cachedir"
	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
	"snfs/state/clientfile"
)

// snfs mode data path: open, read, write, flush, fsync, release and
// truncate of files cached in the cache directory or written through.

func openModeOf(flags int) state.Mode {
	if flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		return state.Read
	}
	return state.Write
}

// snfsOpen is Open in snfs mode.
func (fs *snfsFS) snfsOpen(ctx context.Context, i *vfs.Inode, c vfs.Cred, flags int) (*vfs.File, bool, error) {
	return fs.snfsOpenWith(ctx, i, c, flags, nil)
}

// snfsOpenWith is snfsOpen with the open a CREATE_OPEN or a reintegration
// gave (co, nil: none; snfsOpenProtoWith).
func (fs *snfsFS) snfsOpenWith(ctx context.Context, i *vfs.Inode, c vfs.Cred, flags int, co *createOpened) (*vfs.File, bool, error) {
	mode := openModeOf(flags)
	pmode, keep, direct, reused, local, err := fs.snfsOpenProtoGrant(ctx, i, c, mode, co, co == nil)
	if err != nil {
		return nil, false, err
	}
	// OPEN_WRITE checks only write permission and OPEN_READ read
	// (docs/protocol.md 4.2), and an open served by a kept one checks
	// nothing at the server: the rest is asked of the access cache, or the
	// server.
	// A write open granted offline (offlinewrite.go) was checked by
	// nobody: the mode bits, as any offline open's.
	if err := fs.checkOpenAccess(ctx, i, c, accessNeeded(flags&syscall.O_ACCMODE == syscall.O_RDWR, mode), !reused && !local, mode); err != nil {
		// The protocol open given back is the one this open took: a read
		// open served by a kept or shared write open holds a write open;
		// one served by a kept open goes back to being kept (a refused
		// user must not cost the others it: offline, its reopen would
		// need an OPEN). One granted offline was never the server's.
		if local {
			fs.offlineGrantUndo(i)
		} else {
			fs.snfsOpenUndo(ctx, i, pmode, reused)
		}
		return nil, false, err
	}
	if !reused {
		i.Mu.Lock()
		snOf(i).openCred[mode] = c // the credential a refused reclaim OPENs again as (reopen)
		i.Mu.Unlock()
	}
	i.Mu.Lock()
	i.Opens++
	i.Mu.Unlock()
	f := &vfs.File{I: i, Cred: c, Write: mode == state.Write, Appending: vfs.IsAppend(flags), DirectIO: direct, Ext: &snfsFile{mode: pmode}}
	f.SampleWbErr() // vfs/wberr.go
	if flags&syscall.O_TRUNC != 0 {
		if cf := cacheFileOrNil(i); cf != nil && cf.Size() != 0 {
			fs.whileCaching(i, func() error { return fs.snfsTruncate(i, c, 0) })
		}
	}
	if err := fs.snfsIOMode(ctx, f, flags); err != nil {
		fs.snfsRelease(ctx, f)
		return nil, false, err
	}
	return f, keep, nil
}

// snfsOpenProto is an application open's protocol open (clientfile's
// OpenBegin): a delayed close taken over (pmode: its mode; no OPEN), or an
// OPEN sent and its answer applied: the version rule to the cache directory
// and the kernel's pages, caching or write-through.
func (fs *snfsFS) snfsOpenProto(ctx context.Context, i *vfs.Inode, c vfs.Cred, mode state.Mode) (pmode state.Mode, keep, direct, reused bool, err error) {
	return fs.snfsOpenProtoWith(ctx, i, c, mode, nil)
}

// snfsOpenProtoWith is snfsOpenProto, with the answer of the CREATE_OPEN co
// (nil: none) applied as the OPEN's if it can be trusted (createopen.go),
// else an OPEN sent. A CREATE_OPEN's open that a delayed close makes
// superfluous is given back with a CLOSE.
func (fs *snfsFS) snfsOpenProtoWith(ctx context.Context, i *vfs.Inode, c vfs.Cred, mode state.Mode, co *createOpened) (pmode state.Mode, keep, direct, reused bool, err error) {
	pmode, keep, direct, reused, _, err = fs.snfsOpenProtoGrant(ctx, i, c, mode, co, false)
	return pmode, keep, direct, reused, err
}

// snfsOpenProtoGrant is snfsOpenProtoWith; with grant, offline, an open
// for writing that needs an OPEN may be granted locally (local:
// offlinewrite.go), its OPEN owed until reconnection.
func (fs *snfsFS) snfsOpenProtoGrant(ctx context.Context, i *vfs.Inode, c vfs.Cred, mode state.Mode, co *createOpened, grant bool) (pmode state.Mode, keep, direct, reused, local bool, err error) {
	// Kept opens are taken over only while the server would still call
	// this client back about them (keptlease.go); else given back first.
	fs.lockOpenTrusted(ctx, i)
	i.Mu.Lock()
	o, acts := stOf(i).OpenBegin(mode)
	acts = fs.applyLocked(i, acts)
	i.Mu.Unlock()
	if grant && !o.Reused && mode == state.Write && fs.disc.offline() {
		keep, err = fs.offlineWriteOpen(i, &o) // offlinewrite.go; releases openMu
		return mode, keep, false, false, err == nil, err
	}
	var pre *snfs1.OpenOK
	if co != nil {
		pre = co.trusted(ctx, fs, i.FH)
	}
	if o.Reused {
		if pre != nil {
			fs.closeCreateOpened(ctx, i)
		}
		snOf(i).openMu.Unlock()
		fs.delayed.remove(i)
		if o.Shared {
			fs.stats.SharedOpens.Add(1)
		} else {
			fs.stats.DelayedReopens.Add(1)
		}
		for _, a := range acts {
			if a.Kind == clientfile.ActReuse {
				keep = a.Keep
			}
		}
		return o.Mode, keep, false, true, false, nil
	}
	start := fs.AttrStart()
	epoch := fs.openEpochNow() // the registration this open is granted under (keptlease.go)
	var ok *snfs1.OpenOK
	if pre != nil {
		ok, start, epoch = pre, co.start, co.epoch
	} else {
		if mode == state.Write {
			// The OPEN gives the file a new version: a write-back's end
			// noted but not yet in the index would, after a kill, leave a
			// dirty record at the old version, which the restarted mount
			// takes for another client's change (a false conflict copy).
			fs.recordWrittenBack()
		}
		ok, err = fs.sess.OpenAs(ctx, c.UID, c.GID, c.Groups, i.FH, mode)
	}
	if err == nil && fs.openAnswered != nil {
		fs.openAnswered(i)
	}
	r := replyOf(ok)
	// An answer refusing caching stops it at once, before the rest of it is
	// applied: the server no longer calls this client back about the file,
	// so the other opens here must stop reading (and writing) the cache
	// directory now, not after a write-back or a GETATTR. The refusal
	// revokes an earlier OPEN's grant still being applied too
	// (docs/protocol.md 4.2): that OPEN released openMu before it set
	// caching, and sees the epoch moved, as after a callback.
	stop := clientfile.NeedsStop(r, err)
	if stop {
		snOf(i).cacheW.Lock()
	}
	i.Mu.Lock()
	acts = stOf(i).OpenAnswered(&o, r, err)
	if err != nil {
		i.Mu.Unlock()
		snOf(i).openMu.Unlock()
		return mode, false, false, false, false, err
	}
	noteGrantedLocked(i, mode, epoch)
	fs.Logger().Debug("OPEN", "fileid", i.FileID, "mode", mode, "caching", ok.CacheEnabled, "version", ok.CacheVersion, "cache", hasAct(acts, clientfile.ActCache))
	// Not over the attributes of a WRITE or SETATTR of this client's that
	// completed after the OPEN was sent (settleOpenAttr).
	i.PostOpLocked(ok.Attr, start, time.Now())
	i.Mu.Unlock()
	if stop {
		snOf(i).cacheW.Unlock()
	}
	snOf(i).openMu.Unlock()
	if fs.afterOpen != nil {
		fs.afterOpen(i)
	}

	cf, err := fs.cacheFile(i)
	if err != nil {
		// The application's open fails: the open the server counted is
		// given back, here and there, or it would stay counted for ever.
		fs.snfsOpenUndo(ctx, i, mode, false)
		return mode, false, false, false, false, err
	}
	// The version rule below may resize or invalidate the cache file: what
	// joined passthrough writers wrote is taken in (dirty, kept) first.
	if _, err := fs.snfsNoteExternalLocal(i); err != nil {
		fs.Logger().Warn("passthrough writes", fs.PathAttr(i), "fileid", i.FileID, "err", err)
	}
	cf = fs.checkOpen(ctx, i, cf, ok.Attr)
	if hasAct(acts, clientfile.ActCache) {
		// Data this client wrote through while write-shared goes first: the
		// cache directory does not hold it.
		i.Mu.Lock()
		pending := i.WState.Pending()
		i.Mu.Unlock()
		if pending {
			if err := i.Flush(ctx, true); err != nil {
				fs.Logger().Warn("write-back before caching", fs.PathAttr(i), "fileid", i.FileID, "err", err)
			}
		}
		// The cache file's base and size come from attributes no write-back
		// of this file overtook; none runs until they are applied.
		settled := fs.settleOpenAttr(ctx, c, i, ok.Attr, start, func(a *nfs3.Fattr) {
			fs.recordInSync(i, cf, a)
			if clientfile.Valid(cf.Version(), r) {
				err = cf.Relabel(ok.CacheVersion)
			}
			if err == nil {
				err = cf.SetVersion(ok.CacheVersion, int64(a.Size))
			}
		})
		if settled && err != nil {
			fs.Logger().Warn("cache directory", fs.PathAttr(i), "fileid", i.FileID, "err", err)
		}
		if !settled {
			// The file's size is not known for sure (its own writes kept moving
			// it, or GETATTR failed): this open does not cache (a client may
			// always do less than the server allows).
			fs.Logger().Warn("OPEN: the file's attributes did not settle; this open reads and writes through", fs.PathAttr(i), "fileid", i.FileID)
		}
		i.Mu.Lock()
		keep, acts = stOf(i).OpenCached(&o, r, settled)
		i.Mu.Unlock()
		if len(acts) == 0 {
			return mode, keep, false, false, false, nil
		}
		// A callback took caching away while this answer was applied, or
		// the attributes did not settle: the write-through plan.
	}
	// Write-shared (or caching refused): no cache, write through. Dirty
	// data a callback did not take (there should be none) goes first.
	// (The cache directory's record is checked too: its dirty data is
	// never dropped unwritten.)
	if hasAct(acts, clientfile.ActWriteBack) || cf.NeedsWriteBack() {
		if err := fs.writeBackInode(ctx, i); err != nil {
			fs.Logger().Warn("write-back before write-through", fs.PathAttr(i), "fileid", i.FileID, "err", err)
		}
	}
	for _, a := range acts {
		switch a.Kind {
		case clientfile.ActInvalidateCache:
			fs.invalidateCache(cf)
		case clientfile.ActNotifyData:
			fs.NotifyData(i)
		}
	}
	return mode, false, true, false, false, nil
}

// closeCreateOpened gives back the open a CREATE_OPEN took when a delayed
// close of the file served the application's open instead (under openMu):
// dirty if the cache holds dirty data of the file, which the server must go
// on asking for.
func (fs *snfsFS) closeCreateOpened(ctx context.Context, i *vfs.Inode) {
	i.Mu.Lock()
	dirtyLocked(i)
	dirty := stOf(i).Dirty() || i.WState.Pending()
	i.Mu.Unlock()
	_, err := fs.sess.Close(ctx, i.FH, state.Write, dirty)
	fs.Logger().Debug("CLOSE of a CREATE_OPEN's open", "fileid", i.FileID, "dirty", dirty, "err", err)
	if fs.disc.owe(i.FH, state.Write, dirty, err) {
		return // offline: sent on reconnection (disconnected.go)
	}
	if err != nil && !errors.Is(err, nfs3.ErrStale) && !errors.Is(err, snfs1.ErrFenced) {
		fs.Logger().Warn("CLOSE of a CREATE_OPEN's open", fs.PathAttr(i), "fileid", i.FileID, "err", err)
	}
}

// snfsOpenUndo gives back an open snfsOpenProto counted (the OPEN was
// answered) when the application's open fails after all: the count here goes
// down and the server gets its CLOSE (docs/protocol.md 4.2: each successful
// OPEN is matched by one CLOSE), never a delayed one. Nothing was written
// under that open, so the CLOSE says dirty only if the cache holds dirty
// data of the file (other opens'). reused: the open took over a kept one
// or shared another (no OPEN sent): it is released as an application's
// close would be, so a kept open is kept again.
func (fs *snfsFS) snfsOpenUndo(ctx context.Context, i *vfs.Inode, mode state.Mode, reused bool) {
	snOf(i).openMu.Lock()
	var acts []clientfile.Action
	var over []*vfs.Inode
	if reused {
		// As snfsRelease: a kept open is on the delayed list again (its
		// timer, the bound, unmount's CLOSE of the kept ones).
		fs.delayed.mu.Lock()
		i.Mu.Lock()
		dirtyLocked(i)
		kept := stOf(i).Kept(mode)
		acts = stOf(i).Release(time.Now(), mode, false)
		if fs.delayed.closed && stOf(i).Kept(mode) > kept {
			acts = append(acts, stOf(i).CloseAllDelayed()...)
		}
		acts = fs.applyLocked(i, acts)
		if stOf(i).Kept(mode) > kept {
			over = fs.delayed.addLocked(i, fs.cfg.KeptOpens)
		} else if stOf(i).Kept(state.Read)+stOf(i).Kept(state.Write) == 0 {
			fs.delayed.dropLocked(i)
		}
		i.Mu.Unlock()
		fs.delayed.mu.Unlock()
	} else {
		i.Mu.Lock()
		dirtyLocked(i)
		acts = fs.applyLocked(i, stOf(i).OpenUndone(mode))
		i.Mu.Unlock()
	}
	for _, a := range acts {
		if a.Kind != clientfile.ActSendClose {
			continue
		}
		dirty := a.Dirty
		_, err := fs.sess.Close(ctx, i.FH, mode, dirty)
		fs.Logger().Debug("CLOSE of a failed open", "fileid", i.FileID, "mode", mode, "dirty", dirty, "err", err)
		if fs.disc.owe(i.FH, mode, dirty, err) {
			continue // offline: sent on reconnection (disconnected.go)
		}
		if err != nil && !errors.Is(err, nfs3.ErrStale) && !errors.Is(err, snfs1.ErrFenced) {
			fs.Logger().Warn("CLOSE of a failed open", fs.PathAttr(i), "fileid", i.FileID, "err", err)
		}
	}
	snOf(i).openMu.Unlock()
	fs.notify(i, acts)
	fs.giveBack(over) // over the bound of kept opens (snfsRelease)
}

// settleOpenAttr returns attributes of i that no write-back of this client's
// own has overtaken, for an OPEN's bookkeeping: a this-client WRITE, SETATTR
// or COMMIT that completed after the OPEN was sent (start) leaves the OPEN's
// attributes older than the server's file. A write-back running alongside
// the OPEN (after a server restart, at the delay, for a callback) marks the
// cache file clean at its end; the OPEN's older size taken after that would
// cut the cache file the write-back just wrote back (and its base would make
// the next write-back see a change by another client). Such attributes are
// read again, after the write-back ends. The settled attributes are given to
// apply with i.FlushMu held, so that no write-back starts before they are
// applied; the lock is released before settleOpenAttr returns. It reports
// whether any settled (false: apply did not run, the caller does not cache).
func (sn *snfsFS) settleOpenAttr(ctx context.Context, c vfs.Cred, i *vfs.Inode, a *nfs3.Fattr, start uint64, apply func(a *nfs3.Fattr)) bool {
	fs := sn.FS
	for try := 0; ; try++ {
		i.FlushMu.Lock()
		i.Mu.Lock()
		fresh := a != nil && i.ModGen <= start
		i.Mu.Unlock()
		if fresh {
			apply(a)
			i.FlushMu.Unlock()
			return true
		}
		if try == 3 {
			i.FlushMu.Unlock()
			return false
		}
		i.FlushMu.Unlock()
		start = fs.AttrStart()
		var err error
		if a, err = fs.GetattrFH(ctx, c, i.FH); err != nil {
			a = nil
			continue
		}
		i.Mu.Lock()
		i.PostOpLocked(a, start, time.Now())
		i.Mu.Unlock()
	}
}

// snfsRead is Read of a file served from the cache directory: what is missing
// is read from the server and installed (Fill). If the cache stops being
// usable meanwhile (a callback invalidated it), the read goes to the server.
func (fs *snfsFS) snfsRead(ctx context.Context, f *vfs.File, off uint64, buf []byte) (int, error) {
	i := f.I
	fs.stats.Reads.Add(1)
	for try := 0; try < 4 && snfsCaching(i); try++ {
		cf, err := fs.cacheFile(i)
		if err != nil {
			break
		}
		n, err := cf.ReadAt(buf, int64(off))
		if err == nil || err == io.EOF {
			fs.stats.cacheRead(try, n)
			return n, nil
		}
		var miss *cachedir.MissingError
		if !errors.As(err, &miss) {
			if errors.Is(err, cachedir.ErrRemoved) {
				continue
			}
			return 0, err
		}
		if err := fs.fill(ctx, f.Cred, i, cf, miss); err != nil && !errors.Is(err, cachedir.ErrStaleFill) {
			return 0, err
		}
	}
	return fs.snfsReadThrough(ctx, f, off, buf)
}

// fill reads the missing ranges from the server into the cache.
func (sn *snfsFS) fill(ctx context.Context, c vfs.Cred, i *vfs.Inode, cf *cachedir.File, miss *cachedir.MissingError) error {
	fs := sn.FS
	nc := fs.Client(c)
	for _, r := range miss.Ranges {
		for got := int64(0); got < r.Len; {
			n := min(r.Len-got, int64(fs.ReadSize()))
			start := fs.AttrStart()
			res, err := vfs.RPC(ctx, fs, func() (*nfs3.ReadRes, error) { return nc.Read(ctx, i.FH, uint64(r.Off+got), uint32(n)) })
			if res != nil && res.Attr != nil {
				i.Mu.Lock()
				i.PostOpLocked(res.Attr, start, time.Now())
				i.Mu.Unlock()
			}
			if err != nil {
				return fmt.Errorf("READ: %w", err)
			}
			data := res.Data
			if int64(len(data)) < n && (res.EOF || len(data) == 0) {
				// The server's file ends here: the rest is a hole.
				data = append(data, make([]byte, n-int64(len(data)))...)
			}
			if err := cf.Fill(miss.Gen, r.Off+got, data); err != nil {
				return err
			}
			got += int64(len(data))
		}
	}
	return nil
}

// snfsReadThrough reads from the server (a write-shared file): up to the
// server's end of file, not the cached size, so that another client's
// appends are seen. This client's own writes are sent and committed first:
// laid over the server's bytes from memory, they would hide what another
// client wrote over them, or cut, since.
func (fs *snfsFS) snfsReadThrough(ctx context.Context, f *vfs.File, off uint64, buf []byte) (int, error) {
	i := f.I
	i.Mu.Lock()
	pending := i.WState.Pending()
	i.Mu.Unlock()
	if pending {
		if err := i.Flush(ctx, true); err != nil {
			return 0, err
		}
	}
	// The server must have the cache directory's dirty data first; flushMu
	// also waits for a write-back in progress (serverRestarted's: the data
	// needs write-back until it is done). Only then: reads need not wait for
	// a write-through flush.
	if cf := cacheFileOrNil(i); cf != nil && cf.NeedsWriteBack() {
		i.FlushMu.Lock()
		err := fs.writeBackFirst(ctx, i)
		i.FlushMu.Unlock()
		if err != nil {
			return 0, err
		}
	}
	got, end, err := fs.ReadOverlaid(ctx, f, off, buf)
	if err != nil {
		return 0, err
	}
	if end > off+uint64(got) {
		got = int(min(uint64(len(buf)), end-off))
	}
	return got, nil
}

// snfsWrite is Write in snfs mode: into the cache directory while caching,
// else written through (sent now, committed at close or fsync).
func (fs *snfsFS) snfsWrite(ctx context.Context, f *vfs.File, off uint64, data []byte) (int, error) {
	i := f.I
	var n int
	cached, err := fs.whileCaching(i, func() error {
		cf, err := fs.cacheFile(i)
		if err != nil {
			return err
		}
		i.Mu.Lock()
		noteWriterLocked(i, cf, f.Cred) // before the data: an index commit between carries it
		i.Mu.Unlock()
		n, err = cf.WriteAt(data, int64(off))
		if n > 0 {
			i.Mu.Lock()
			snOf(i).mtime = time.Now()
			i.Mu.Unlock()
			fs.markDirty(i)
			fs.disc.noteWrite(i.FH) // disconnected.go
		}
		if err != nil {
			return fmt.Errorf("cache directory: %w", err)
		}
		return nil
	})
	if cached {
		return n, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err // interrupted before any of the data was taken
	}
	i.Mu.Lock()
	i.WState.Dirty.Write(off, data)
	i.WState.Cred = f.Cred
	i.WState.Mtime = time.Now()
	i.Mu.Unlock()
	// Once taken, the data is sent before the write returns, whatever
	// interrupts it (ctx's cancellation is dropped, not its values): a
	// write-through reports done only when the server has the data (other
	// clients read through), and an interrupted one could only report
	// EINTR with its data still queued for the server. The call still ends
	// when the mount closes its client.
	err = i.Flush(context.WithoutCancel(ctx), false)
	// The cache directory's clean data of the file (from while it was
	// cached, or written back since caching stopped) is older than this
	// write, and still labelled with a version the next OPEN may answer as
	// valid: this client's writes under an open do not change the version
	// (caching stopped by a server restart noticed after an OPEN of the new
	// instance). Drop it; dirty data stays (flush wrote it back first).
	if cf := cacheFileOrNil(i); cf != nil && cf.Holds() {
		if ierr := cf.Invalidate(); ierr != nil && !errors.Is(ierr, cachedir.ErrRemoved) {
			err = errors.Join(err, fmt.Errorf("cache directory: %w", ierr))
		}
	}
	if err != nil {
		return 0, err
	}
	return len(data), nil
}

// snfsFlush is close(2): write-through data is committed; cached dirty data
// is made durable in the cache directory, not written back.
func (fs *snfsFS) snfsFlush(ctx context.Context, f *vfs.File) error {
	i := f.I
	errs := []error{fs.snfsNoteExternal(ctx, i)}
	i.Mu.Lock()
	pending := i.WState.Pending()
	cf := snOf(i).cf
	i.Mu.Unlock()
	if pending {
		errs = append(errs, i.Flush(ctx, true))
	}
	if cf != nil && cf.NeedsWriteBack() {
		if err := cf.Sync(); err != nil && !errors.Is(err, cachedir.ErrRemoved) {
			errs = append(errs, err)
		}
	}
	// With a write-back error latched since f was opened (vfs, wberr.go):
	// kept for every close of f, not taken by the first (a forked child's).
	return f.ReportWbErr(errors.Join(errs...), false)
}

// snfsFsync writes the file back now.
func (fs *snfsFS) snfsFsync(ctx context.Context, f *vfs.File) error {
	i := f.I
	errs := []error{fs.snfsNoteExternal(ctx, i)}
	i.Mu.Lock()
	pending := i.WState.Pending()
	i.Mu.Unlock()
	if pending {
		errs = append(errs, i.Flush(ctx, true))
	}
	if fs.disc.offline() {
		// Disconnected: durable in the cache directory is what fsync
		// promises until the server is back (disconnected.go).
		return f.ReportWbErr(errors.Join(append(errs, fs.offlineFsync(f))...), true)
	}
	err := fs.writeBackInode(ctx, i)
	if errors.Is(err, ErrDisconnected) {
		err = fs.offlineFsync(f) // cut by going offline: kept dirty
	}
	if err == nil {
		// The write-back's end reaches the index before fsync returns:
		// a kill after it would otherwise leave the record dirty, with a
		// small file's inline copy from an earlier commit that the
		// restarted mount restores into the data file and writes back
		// over the newer bytes this fsync put on the server (the soak's
		// same-length, different-bytes reads).
		fs.recordWrittenBack()
	}
	errs = append(errs, err)
	return f.ReportWbErr(errors.Join(errs...), true) // and past it for f
}

// snfsRelease is the last close of one open: its CLOSE, saying whether dirty
// data stays behind, or a delayed close (clientfile's Release). A file
// removed while open loses its hidden name, and its pending write-back with
// it.
func (fs *snfsFS) snfsRelease(ctx context.Context, f *vfs.File) error {
	i := f.I
	mode := fsnOf(f).mode
	var errs []error
	if fsnOf(f).ptWrite {
		errs = append(errs, fs.snfsNoteExternal(ctx, i))
	}
	fs.snfsIOEnd(f)
	i.Mu.Lock()
	pending := i.WState.Pending()
	i.Mu.Unlock()
	if pending {
		errs = append(errs, i.Flush(ctx, true))
	}
	snOf(i).openMu.Lock()
	i.Mu.Lock()
	i.Opens--
	last := i.Opens == 0
	dir, name := i.SillyDir, i.SillyName
	if last {
		i.SillyDir, i.SillyName = nil, ""
	}
	i.Mu.Unlock()
	removed := last && name != ""
	if removed {
		fs.cancelWriteBack(i)
	}
	cf := cacheFileOrNil(i)
	if cf != nil && cf.NeedsWriteBack() {
		// Durable here before the CLOSE says where the data is.
		if err := cf.Sync(); err != nil && !errors.Is(err, cachedir.ErrRemoved) {
			errs = append(errs, err)
		}
	}
	// delayed.mu: no open is kept once Close has CLOSEd the kept ones.
	fs.delayed.mu.Lock()
	i.Mu.Lock()
	dirtyLocked(i)
	kept := stOf(i).Kept(mode)
	// An open a server that refused the reclaim forgot, not yet OPENed
	// again, is given up with no CLOSE (the machine's Release).
	forgot := stOf(i).Forgotten(mode) > 0
	acts := stOf(i).Release(time.Now(), mode, removed)
	if fs.delayed.closed && stOf(i).Kept(mode) > kept {
		acts = append(acts, stOf(i).CloseAllDelayed()...)
	}
	acts = fs.applyLocked(i, acts)
	delayed := stOf(i).Kept(mode) > kept
	var over []*vfs.Inode
	if delayed {
		over = fs.delayed.addLocked(i, fs.cfg.KeptOpens)
	} else {
		fs.delayed.dropLocked(i) // its kept opens CLOSEd with this release
	}
	i.Mu.Unlock()
	fs.delayed.mu.Unlock()
	if delayed {
		fs.stats.DelayedCloses.Add(1)
	}
	for _, a := range acts {
		if a.Kind != clientfile.ActSendClose {
			continue
		}
		dirty := a.Dirty
		if !dirty {
			fs.recordWrittenBack()
		}
		_, err := fs.sess.Close(ctx, i.FH, a.Mode, dirty)
		fs.Logger().Debug("CLOSE", "fileid", i.FileID, "mode", a.Mode, "dirty", dirty, "err", err)
		if fs.disc.owe(i.FH, a.Mode, dirty, err) {
			continue // offline: sent on reconnection (disconnected.go)
		}
		if err != nil && !errors.Is(err, nfs3.ErrStale) && !errors.Is(err, snfs1.ErrFenced) {
			fs.Logger().Warn("CLOSE", fs.PathAttr(i), "fileid", i.FileID, "err", err)
		}
	}
	snOf(i).openMu.Unlock()
	if forgot {
		fs.Logger().Debug("release of an open the server forgot: no CLOSE", "fileid", i.FileID, "mode", mode)
	}
	fs.notify(i, acts)
	if removed {
		fs.RemoveHidden(ctx, f.Cred, i, dir, name)
	}
	// Over the bound of kept opens: the least recently kept go back.
	fs.giveBack(over)
	return errors.Join(errs...)
}

func cacheFileOrNil(i *vfs.Inode) *cachedir.File {
	i.Mu.Lock()
	defer i.Mu.Unlock()
	return snOf(i).cf
}

// cancelWriteBack drops i's cached data, dirty included, without writing it
// back: the file is gone (its last link removed) or empty.
func (fs *snfsFS) cancelWriteBack(i *vfs.Inode) {
	i.FlushMu.Lock()
	defer i.FlushMu.Unlock()
	i.Mu.Lock()
	cf := snOf(i).cf
	snOf(i).cf = nil
	stOf(i).Removed()
	i.Mu.Unlock()
	if fs.isDirty(i) {
		fs.stats.Cancelled.Add(1)
	}
	fs.markClean(i)
	if cf != nil {
		if err := cf.Remove(); err != nil && !errors.Is(err, cachedir.ErrRemoved) {
			fs.Logger().Warn("cache directory: remove", fs.PathAttr(i), "fileid", i.FileID, "err", err)
		}
	}
}

// snfsRemoving: child is about to lose a link by REMOVE (or a RENAME over
// it), locally under a permit or through the server; nlink is its link
// count before. If it is the last link of a file whose cache record holds
// data not yet written back, the record is marked removing, durably, before
// the change can reach the server: snfsRemoved drops the record once the
// change is made, and a kill between the two (the REMOVE answered, or the
// logged REMOVE reintegrated, and the record still dirty in the index) left
// a restarted mount to find the file gone and keep this client's data as a
// conflict copy, as if another client had removed it (the soak's false
// conflicts of reason=restart). The mark tells reintegrate that the file's
// absence is this client's doing. The function returned clears the mark
// when the link was not removed after all.
func (fs *snfsFS) snfsRemoving(child *vfs.Inode, nlink uint32) func() {
	if child == nil || child.IsDir() || nlink > 1 {
		return func() {}
	}
	cf := cacheFileOrNil(child)
	if cf == nil || !cf.NeedsWriteBack() {
		return func() {}
	}
	if err := cf.SetRemoving(true); err != nil {
		fs.Logger().Warn("cache directory: marking a file being removed", fs.PathAttr(child), "fileid", child.FileID, "err", err)
	}
	return func() { cf.SetRemoving(false) }
}

// snfsRemoved: name's object child lost a link by REMOVE (or a RENAME over
// it); nlink is its link count before. Its last link: pending write-back is
// cancelled. A file still open keeps its data (hidden, removed at its last
// close): its record is no longer marked removing (snfsRemoving).
func (fs *snfsFS) snfsRemoved(child *vfs.Inode, nlink uint32) {
	fs.beforeRemoved.run(child)
	if child == nil || child.IsDir() || nlink > 1 {
		return
	}
	child.Mu.Lock()
	open := child.Opens > 0
	child.Mu.Unlock()
	if open {
		if cf := cacheFileOrNil(child); cf != nil {
			cf.SetRemoving(false)
		}
	}
	if !open {
		fs.cancelWriteBack(child)
		// Its kept opens go too: nothing will open the file again.
		child.Mu.Lock()
		kept := stOf(child).Kept(state.Read)+stOf(child).Kept(state.Write) > 0
		child.Mu.Unlock()
		if kept {
			fs.giveBack([]*vfs.Inode{child})
		}
	}
}

// snfsTruncate sets the size of a file cached here and open for writing,
// locally: dirty data beyond it is never written back.
func (fs *snfsFS) snfsTruncate(i *vfs.Inode, c vfs.Cred, size uint64) error {
	cf, err := fs.cacheFile(i)
	if err != nil {
		return err
	}
	// Joined passthrough writers' bytes first: the cut and any zeros it adds
	// are relative to the file as the kernel wrote it.
	if _, err := fs.snfsNoteExternalLocal(i); err != nil {
		return err
	}
	i.Mu.Lock()
	noteWriterLocked(i, cf, c) // before the change: an index commit between carries it
	i.Mu.Unlock()
	if err := cf.Truncate(int64(size)); err != nil {
		return err
	}
	i.Mu.Lock()
	snOf(i).mtime = time.Now()
	i.Mu.Unlock()
	if size == 0 && fs.isDirty(i) {
		fs.stats.Cancelled.Add(1)
	}
	fs.markDirty(i)
	return nil
}

// snfsSetattrLocal does a Setattr of i locally if it is a size change of a
// file cached here and open for writing (done reports it).
func (fs *snfsFS) snfsSetattrLocal(i *vfs.Inode, c vfs.Cred, s vfs.SetAttr) (a nfs3.Fattr, ttl time.Duration, done bool, err error) {
	if s.Size == nil || s.Mode != nil || s.UID != nil || s.GID != nil || s.Atime != nil || s.Mtime != nil {
		return nfs3.Fattr{}, 0, false, nil
	}
	// A cached file not open for writing here: to the server.
	i.Mu.Lock()
	writer := stOf(i).Opens(state.Write) > 0
	i.Mu.Unlock()
	if !writer {
		return nfs3.Fattr{}, 0, false, nil
	}
	done, err = fs.whileCaching(i, func() error {
		var err error
		a, ttl, err = fs.snfsSetattr(i, c, *s.Size)
		return err
	})
	return a, ttl, done, err
}
