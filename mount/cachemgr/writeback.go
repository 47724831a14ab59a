package cachemgr

import (
	"context"
	"errors"
	"fmt"
	"time"

	"snfs/client"
	"snfs/mount/cachedir"
	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state/clientfile"
)

// snfs mode write-back (docs/mount.md; Sprite section 4, Spritely NFS section 6.1):
// dirty files in the cache directory go to the server with UNSTABLE WRITE and
// COMMIT once their oldest dirty data is WriteBackDelay old, on fsync, on a
// write-back callback and on unmount; a restarted mount writes back what the
// last one left dirty.

// writeBackLoop writes back the files whose oldest dirty data is older than
// the delay.
func (fs *snfsFS) writeBackLoop() {
	defer close(fs.done)
	delay := fs.cfg.WriteBackDelay
	tick := min(max(delay/4, 10*time.Millisecond), time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-fs.stop
		cancel()
	}()
	for {
		select {
		case <-fs.stop:
			return
		case <-t.C:
		}
		if fs.disc.offline() {
			continue // kept dirty; written back on reconnection (disconnected.go)
		}
		var due []*vfs.Inode
		for _, i := range fs.dirtyInodes(time.Now().Add(-delay)) {
			if !fs.disc.owesOpen(i) { // its reintegration first (offlinewrite.go)
				due = append(due, i)
			}
		}
		done, failed := fs.writeBackAll(ctx, due)
		for i, err := range failed {
			fs.Logger().Warn("delayed write-back", fs.PathAttr(i), "fileid", i.FileID, "err", err)
		}
		// Also the ends of write-backs made since the last tick (fsync,
		// a SETATTR's): recorded within a tick.
		fs.recordWrittenBack()
		fs.cleanCloseAll(ctx, done)
		fs.giveBackEvicted() // delayclose.go
		if ctx.Err() != nil {
			return
		}
	}
}

// dirtyInodes lists the files dirty since before cutoff (zero: all).
func (fs *snfsFS) dirtyInodes(cutoff time.Time) []*vfs.Inode {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var out []*vfs.Inode
	for i, since := range fs.dirty {
		if cutoff.IsZero() || !since.After(cutoff) {
			out = append(out, i)
		}
	}
	return out
}

func (fs *snfsFS) markDirty(i *vfs.Inode) {
	fs.mu.Lock()
	if _, ok := fs.dirty[i]; !ok {
		fs.dirty[i] = time.Now()
	}
	fs.mu.Unlock()
}

func (fs *snfsFS) markClean(i *vfs.Inode) {
	fs.mu.Lock()
	delete(fs.dirty, i)
	fs.mu.Unlock()
}

// markCleanIf forgets i's dirty record if cf, its cache file, has nothing
// left to write back. The check is made under the record's lock: an
// application write lands in cf before it records i dirty (snfsWrite), so a
// write racing a write-back's end is either seen here or recorded after.
// Checking outside the lock lost such a write's record: the CLOSE then said
// "not dirty", the server stopped calling this client back for the file, and
// another client read the server's copy without the write.
func (fs *snfsFS) markCleanIf(i *vfs.Inode, cf *cachedir.File) {
	fs.beforeMarkClean.run(i)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if !cf.NeedsWriteBack() {
		delete(fs.dirty, i)
		fs.disc.wroteOffline(i.FH, true)
	}
}

func (fs *snfsFS) isDirty(i *vfs.Inode) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	_, ok := fs.dirty[i]
	return ok
}

// writeBackInode writes i's dirty data in the cache directory back to the
// server (UNSTABLE WRITEs and a COMMIT, rewritten on a verifier change) and
// marks it clean. A write-back the server refuses (ENOSPC, EDQUOT, EIO) drops
// the data, as a kernel NFS client does; the error is kept for the next
// fsync or close and logged.
//
// SNFS_ERR_FENCED keeps the data: it is reintegrated (reintegrate.go).
func (sn *snfsFS) writeBackInode(ctx context.Context, i *vfs.Inode) error {
	err := sn.writeBack(ctx, i)
	switch {
	case errors.Is(err, snfs1.ErrFenced):
		return sn.fenced(ctx, i)
	case errors.Is(err, errChangedUnder):
		return sn.changedUnder(ctx, i)
	}
	return err
}

// writeBack is writeBackInode without the reintegration of a fenced file:
// SNFS_ERR_FENCED is returned, the data kept.
func (fs *snfsFS) writeBack(ctx context.Context, i *vfs.Inode) error {
	if err := fs.snfsNoteExternal(ctx, i); err != nil {
		fs.Logger().Warn("passthrough writes", fs.PathAttr(i), "fileid", i.FileID, "err", err)
	}
	i.FlushMu.Lock()
	defer i.FlushMu.Unlock()
	return fs.writeBackInodeLocked(ctx, i)
}

// writeBackFirst writes back i's dirty data in the cache directory before
// i's data goes through the server (a write through, a read through): that
// data was written while the file was cached, so it is older than anything
// written through since, and the server does not have it yet. It is there
// when caching stopped before it was written back: a server restart
// (serverRestarted writes back after stopping caching, while applications go
// on with their open files) or a callback whose write-back failed. Without
// this, a read through returns the server's older bytes (and ignores a local
// truncation), and the late write-back overwrites newer data written through.
// A write-back the server refused dropped the data (its error waits for the
// next fsync or close, as at any write-back): then there is nothing older
// left and nil is returned. Called with i.FlushMu held.
func (sn *snfsFS) writeBackFirst(ctx context.Context, i *vfs.Inode) error {
	i.Mu.Lock()
	dirtyLocked(i)
	first := hasAct(stOf(i).Through(), clientfile.ActWriteBack) && snOf(i).cf != nil
	i.Mu.Unlock()
	if !first {
		return nil
	}
	err := sn.writeBackInodeLocked(ctx, i)
	if cf := cacheFileOrNil(i); err != nil && cf != nil && cf.NeedsWriteBack() {
		return fmt.Errorf("write-back of cached data before going through the server: %w", err)
	}
	return nil
}

// writeBackInodeLocked is writeBackInode with i.FlushMu held. The machine
// sees the write-back (WriteBackBegin, WriteBackDone): dirty clears only if
// no cache write began or ended meanwhile, and a write-back that began and
// did not end leaves it moving (checkBase).
func (fs *snfsFS) writeBackInodeLocked(ctx context.Context, i *vfs.Inode) error {
	i.Mu.Lock()
	cf, cred, version := snOf(i).cf, snOf(i).cred, stOf(i).Version()
	if cf != nil && !cf.NeedsWriteBack() {
		// Nothing to send: clean, unless a cache write is in progress
		// (checked under mu, where each one begins and ends).
		if wb, ok := stOf(i).WriteBackBegin(); ok {
			stOf(i).WriteBackDone(wb, clientfile.WBDone)
		}
	}
	i.Mu.Unlock()
	if cf == nil || !cf.NeedsWriteBack() {
		if cf != nil {
			fs.markCleanIf(i, cf)
		}
		return nil
	}
	err := fs.checkBase(ctx, i, cf, cred)
	var wb clientfile.WriteBack
	began := false
	if err == nil {
		i.Mu.Lock()
		dirtyLocked(i)
		wb, began = stOf(i).WriteBackBegin() // moving until its end is applied
		i.Mu.Unlock()
		err = fs.writeBackFile(ctx, i, cf, cred, version)
	}
	fs.Logger().Debug("write-back", "fileid", i.FileID, "err", err)
	if err == nil {
		if began {
			i.Mu.Lock()
			stOf(i).WriteBackDone(wb, clientfile.WBDone)
			i.Mu.Unlock()
		}
		fs.markCleanIf(i, cf)
		return nil
	}
	var st nfs3.Status
	if !errors.As(err, &st) && !errors.Is(err, vfs.ErrVerifierChanged) || errors.Is(err, snfs1.ErrFenced) ||
		errors.Is(err, errChangedUnder) {
		return err // transport, cancellation, fencing, a conflict: kept (WBKept: nothing changes)
	}
	fs.stats.WriteBackErrors.Add(1)
	fs.Logger().Error("write-back failed: the file's unwritten data is lost", fs.PathAttr(i), "fileid", i.FileID, "err", err)
	i.Mu.Lock()
	i.LatchWbErrLocked(err) // for every open's next close and fsync
	snOf(i).cf = nil
	acts := fs.applyLocked(i, stOf(i).WriteBackDone(wb, clientfile.WBDropped))
	i.Mu.Unlock()
	fs.markClean(i)
	cf.Remove()
	fs.notify(i, acts)
	return err
}

// writeBackFile sends cf's pending changes of i: the size cut first, then the
// dirty ranges, then the final size, and a COMMIT; everything is sent again
// if the COMMIT's verifier is not the WRITEs' (the server restarted).
func (fs *snfsFS) writeBackFile(ctx context.Context, i *vfs.Inode, cf *cachedir.File, cred vfs.Cred, version uint64) error {
	wb := cf.Dirty()
	c := fs.Client(cred)
	var synced *nfs3.Fattr // the server's attributes after the last call
	setSize := func(size int64) error {
		sz := uint64(size)
		res, err := vfs.RPC(ctx, fs.FS, func() (*nfs3.WccRes, error) {
			return c.Setattr(ctx, &nfs3.SetattrArgs{Object: i.FH, New: nfs3.Sattr{Size: &sz}})
		})
		if res != nil {
			i.Mu.Lock()
			i.WccLocked(&res.Wcc, time.Now())
			i.Mu.Unlock()
		}
		if err != nil {
			return fmt.Errorf("SETATTR size %d: %w", size, err)
		}
		synced = res.Wcc.After
		return nil
	}
	for attempt := 0; ; attempt++ {
		if wb.Truncated {
			if err := setSize(wb.TruncTo); err != nil {
				return err
			}
		}
		runs, n, err := fs.sendRanges(ctx, i, c, cf, wb.Ranges)
		if err != nil {
			return err
		}
		fs.stats.WriteBackBytes.Add(n)
		if wb.Truncated && wb.Size != wb.TruncTo {
			if err := setSize(wb.Size); err != nil {
				return err
			}
		}
		if len(runs) > 0 {
			fs.FS.Stats().Commits.Add(1)
			res, err := vfs.RPC(ctx, fs.FS, func() (*nfs3.CommitRes, error) { return c.Commit(ctx, i.FH, 0, 0) })
			if res != nil {
				i.Mu.Lock()
				i.WccLocked(&res.Wcc, time.Now())
				i.Mu.Unlock()
			}
			if err != nil {
				return fmt.Errorf("COMMIT: %w", err)
			}
			synced = res.Wcc.After
			mismatch := false
			for _, r := range runs {
				mismatch = mismatch || r.Verf != res.Verf
			}
			if mismatch {
				fs.FS.Stats().Rewrites.Add(1)
				fs.Logger().Warn("write verifier changed: rewriting the file's write-back", fs.PathAttr(i), "fileid", i.FileID)
				if attempt >= vfs.MaxRewrites {
					return vfs.ErrVerifierChanged
				}
				continue
			}
		}
		break
	}
	fs.stats.WriteBacks.Add(1)
	if err := cf.MarkClean(wb, version); err != nil && !errors.Is(err, cachedir.ErrStaleWriteBack) {
		return err
	}
	if synced != nil {
		// What the server's file looks like with this write-back: the base
		// of the next (reintegrate.go).
		cf.SetBase(baseOf(synced))
	}
	fs.noteWrittenBack(cf)
	return nil
}

// sendRanges writes the ranges, read from the cache file, in wsize pieces
// (sendPieces); it returns the pieces the server holds UNSTABLE (their data
// is not kept: the cache file has it) and the bytes sent.
func (sn *snfsFS) sendRanges(ctx context.Context, i *vfs.Inode, c *client.NFS, cf *cachedir.File, ranges []cachedir.Range) ([]vfs.SentRun, uint64, error) {
	fs := sn.FS
	var pieces []vfs.Piece
	ws := int64(fs.WriteSize())
	for _, r := range ranges {
		for off := r.Off; off < r.End(); off += ws {
			pieces = append(pieces, vfs.Piece{Off: uint64(off), N: int(min(ws, r.End()-off))})
		}
	}
	return i.SendPieces(ctx, c, pieces, cf.ReadAt, false)
}

// snfsSync writes back every dirty file (unmount, syncfs).
func (fs *snfsFS) snfsSync(ctx context.Context) error {
	var errs []error
	done, failed := fs.writeBackAll(ctx, fs.dirtyInodes(time.Time{}))
	for i, err := range failed {
		errs = append(errs, fmt.Errorf("file %d: %w", i.FileID, err))
	}
	fs.recordWrittenBack()
	fs.cleanCloseAll(ctx, done)
	return errors.Join(errs...)
}

// recoverDirty reintegrates the dirty files a previous instance left in the
// cache directory (reintegrate.go): written back as its last writer (the
// cache entry's Writer) if the server's file is unchanged since, kept as a
// conflict copy otherwise.
func (fs *snfsFS) recoverDirty(ctx context.Context) error {
	var errs []error
	for _, h := range fs.cache.DirtyFiles() {
		cf, err := fs.cache.File(h)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if parent, _ := cf.Origin(); len(parent) > 0 {
			fs.ResolveDirs(ctx, parent) // for the messages' paths
		}
		if err := fs.reintegrate(ctx, nfs3.FH(h), cf, "restart"); err != nil {
			errs = append(errs, fmt.Errorf("recovery of %s (fh %x): %w", fs.PathOfFH(nfs3.FH(h), cf), h, err))
		}
	}
	fs.recordWrittenBack()
	return errors.Join(errs...)
}

// Recording write-backs in the cache directory's index. A write-back's end
// (its ranges clean, the server's new attributes as the base) must reach the
// index before the server is told that this client holds no dirty data of
// the file (a CLOSE with dirty FALSE, an answer to a callback): from then on
// another client may change or remove the file without calling this one
// back, and a mount restarted after a kill, finding the record still dirty
// with the base from before the write-back, would take that change for a
// conflict with data the server in fact had (a false conflict copy, or a
// copy of a file deleted since). So the ends are noted (noteWrittenBack) and
// committed (recordWrittenBack) before those messages, by the delayed
// write-back's rounds (one commit for the round, Cache.SyncFiles) and at
// every tick of its loop; also before an fsync returns (a kill after it
// would leave the record dirty with a small file's inline copy from an
// earlier commit, which the restarted mount restores and writes back over
// the newer bytes the fsync put on the server) and before an OPEN for
// writing (which gives the file a new version: the record left dirty at
// the old one would look like another client's change). A kill before it leaves a record the
// restarted mount reconciles (serverholds.go).

// noteWrittenBack records that cf's write-back ended and is to be
// committed (recordWrittenBack).
func (fs *snfsFS) noteWrittenBack(cf *cachedir.File) {
	fs.mu.Lock()
	fs.unrecorded[cf] = struct{}{}
	fs.mu.Unlock()
}

// recordWrittenBack commits the ends of the write-backs noted so far. It
// returns when they are committed, also those another caller took and is
// committing (the calls are serialized): a caller about to tell the server
// that a file is clean must not find the set empty while that file's end is
// still on its way to the index. Ends it could not commit stay noted.
func (fs *snfsFS) recordWrittenBack() {
	fs.recordMu.Lock()
	defer fs.recordMu.Unlock()
	fs.mu.Lock()
	files := make([]*cachedir.File, 0, len(fs.unrecorded))
	for cf := range fs.unrecorded {
		files = append(files, cf)
	}
	clear(fs.unrecorded)
	fs.mu.Unlock()
	if len(files) == 0 {
		return
	}
	err := fs.cache.SyncFiles(files)
	if err == nil || errors.Is(err, cachedir.ErrClosed) {
		return
	}
	fs.Logger().Warn("cache directory: recording write-backs", "files", len(files), "err", err)
	fs.mu.Lock()
	for _, cf := range files {
		fs.unrecorded[cf] = struct{}{}
	}
	fs.mu.Unlock()
}
