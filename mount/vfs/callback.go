package vfs

import (
	"context"
	"errors"
	"snfs/state"
	"syscall"
	"time"

	"snfs/mount/cachedir"
	"snfs/nfs3"
	"snfs/snfs1"
)

// snfs mode callbacks (docs/protocol.md section 11): each becomes cache
// invalidations (ours and, through the Notifier, the kernel's) before it is
// answered; and what a server restart changes.

// Callback serves the server's callbacks (client.CallbackHandler): the work
// first, then the answer.
func (sn *snfsFS) Callback(ctx context.Context, fh nfs3.FH, mode state.CallbackMode, attr *nfs3.Fattr) state.Outcome {
	fs := sn.FS
	fs.sn.stats.Callbacks.Add(1)
	fs.sn.stats.callback(mode)
	if mode == state.RecallLocks {
		return fs.sn.recallLocks(ctx, fh) // lock delegation (lockdeleg.go)
	}
	i := fs.lookupInode(fh)
	var cf *cachedir.File
	if i != nil {
		cf = cacheFileOrNil(i)
	}
	if cf == nil {
		cf, _ = fs.sn.cache.File(fh)
	}
	held := cf != nil && cf.Holds()
	if i != nil {
		i.mu.Lock()
		// An OPEN in flight is held: its answer may have come before this
		// callback, which then concerns it (CB_STALE would have the server
		// drop the open it counted, and its writer's dirty record).
		held = held || snfsHeldLocked(i) > 0 || snOf(i).opening > 0 || snOf(i).caching || i.w.pending()
		if mode.Invalidates() {
			// Counted before anything else: an OPEN in flight whose answer
			// is applied after this does not cache (snfsOpenProto).
			snOf(i).invals++
		}
		i.mu.Unlock()
	}
	if !held {
		fs.sn.stats.CallbacksStale.Add(1)
		fs.log.Debug("callback: nothing held", "fh", fh, "mode", mode)
		return state.Stale
	}
	if i != nil {
		fs.log.Debug("callback", "fileid", i.FileID, "mode", mode)
	}
	var entering *pinnedFile
	if i != nil {
		i.mu.Lock()
		writers := snOf(i).pt.writers
		i.mu.Unlock()
		if pf := fs.pinnedOf(i); pf != nil && pf.holder && writers > 0 {
			// The pinned holder (pinned.go): what the kernel wrote so far
			// goes now; its opens go on writing.
			if err := fs.sn.pinSync(ctx, pf, false); err != nil {
				fs.log.Warn("callback write-back", fs.pathAttr(i), "fileid", i.FileID, "mode", mode, "err", err)
			}
			// The server counts this client as not caching the file: an
			// OPEN in flight does not cache on its answer either.
			i.mu.Lock()
			snOf(i).invals++
			i.mu.Unlock()
			return state.Pinned
		}
		if mode.Invalidates() {
			// An append into the cache file in progress ends before the
			// write-back, and none starts until caching has stopped: the
			// server places the later ones (append.go), after this client's
			// earlier ones, at the end of file another client sees too.
			i.appendMu.Lock()
			defer i.appendMu.Unlock()
			entering = fs.sn.pinEnter(i)
			// Caching stops before the write-back: a write into the cache
			// directory after the write-back took the dirty data would be
			// left behind it, unknown to the server once this is answered
			// (another client then read the old version). From here, writes
			// go through, after the cache directory's dirty data
			// (writeBackFirst).
			fs.stopCachingFor(i)
		}
	}
	// unsent: the write-back did not reach the server's stable storage (a
	// transport error, the connection's end) and the data is kept here.
	// No answer then says done (docs/protocol.md 5.1): CB_OK would have the
	// server drop this client's dirty record while it still holds the data,
	// and others would read the old copy. The callback fails instead (an RPC
	// error), the server fences this client for the file, and the kept data
	// is reintegrated (section 13).
	unsent := false
	if (mode.WritesBack() || entering != nil) && i != nil {
		i.mu.Lock()
		pending := i.w.pending()
		i.mu.Unlock()
		if pending {
			if err := i.flush(ctx, true); err != nil {
				fs.log.Warn("callback write-back", fs.pathAttr(i), "fileid", i.FileID, "err", err)
				i.mu.Lock()
				unsent = i.w.pending()
				i.mu.Unlock()
			}
		}
		if err := fs.writeBackInode(ctx, i); err != nil {
			fs.log.Warn("callback write-back", fs.pathAttr(i), "fileid", i.FileID, "mode", mode, "err", err)
			// An error the server gave (the data dropped, writeback.go) is
			// reported to the application; only data still held fails it.
			if c := cacheFileOrNil(i); c != nil && c.NeedsWriteBack() {
				unsent = true
			}
		}
		fs.sn.recordWrittenBack() // before the answer (writeback.go)
	}
	if mode.Invalidates() {
		if i != nil {
			i.mu.Lock()
			snOf(i).caching, snOf(i).kernVer = false, 0
			i.invalidateLocked()
			i.mu.Unlock()
		}
		if cf != nil {
			if err := cf.Invalidate(); err != nil && !errors.Is(err, cachedir.ErrRemoved) {
				fs.log.Warn("cache directory: invalidate", "err", err)
			}
		}
		if i != nil {
			fs.notifyData(i)
		}
	}
	if entering != nil {
		fs.sn.pinEntered(entering)
		if entering.holder {
			fs.log.Debug("callback: pinned holder", "fileid", i.FileID)
			return state.Pinned
		}
	}
	if unsent {
		fs.sn.stats.CallbacksFailed.Add(1)
		return state.Failed
	}
	if st, ok := fs.sn.delayedCallback(ctx, i); ok {
		return st
	}
	if i == nil {
		if mode == state.Relinquish {
			return state.TreatAsClosed
		}
		return state.OK
	}
	// No open here, none coming, nothing left to write back: every open the
	// server may still count for this client is gone (treat as closed). This
	// is also the answer to a callback sent again after a broken connection
	// lost the first answer (a delayed close treated as closed): CB_OK would
	// leave the server counting opens this client never CLOSEs.
	cf = cacheFileOrNil(i)
	dirty := cf != nil && cf.NeedsWriteBack()
	i.mu.Lock()
	idle := snOf(i).opens[state.Read]+snOf(i).opens[state.Write] == 0 && snOf(i).opening == 0 &&
		snOf(i).dc.count() == 0 && !i.w.pending() && !dirty
	if idle {
		snOf(i).caching = false // used again only after an OPEN
	}
	i.mu.Unlock()
	if idle {
		return state.TreatAsClosed
	}
	return state.OK
}

// snfsCreated finishes Create in snfs mode: the new file is opened for
// writing with the protocol.
func (fs *snfsFS) snfsCreated(ctx context.Context, e Entry, c Cred, flags int) (Entry, *File, error) {
	i := e.Inode
	_, direct, err := fs.snfsOpenProto(ctx, i, c, state.Write)
	if err != nil {
		i.mu.Lock()
		i.opens--
		i.mu.Unlock()
		return Entry{}, nil, err
	}
	f := &File{i: i, cred: c, write: true, append: isAppend(flags), direct: direct, ext: &snfsFile{mode: state.Write}}
	if flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		flags = flags&^syscall.O_ACCMODE | syscall.O_WRONLY // the protocol open is for writing
	}
	if err := fs.snfsIOMode(ctx, f, flags); err != nil {
		fs.snfsRelease(ctx, f)
		return Entry{}, nil, err
	}
	now := time.Now()
	i.mu.Lock()
	e.Attr, e.AttrTTL = i.reportLocked(), i.ttlLocked(now)
	i.mu.Unlock()
	return e, f, nil
}

// snfsSetattr is a local size change (snfsSetattrLocal).
func (fs *snfsFS) snfsSetattr(i *Inode, c Cred, size uint64) (nfs3.Fattr, time.Duration, error) {
	if err := fs.snfsTruncate(i, c, size); err != nil {
		return nfs3.Fattr{}, 0, err
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.reportLocked(), i.ttlLocked(time.Now()), nil
}

// snfsSized brings the cache file to a size set on the server.
func (fs *snfsFS) snfsSized(i *Inode, size *uint64) {
	if size == nil {
		return
	}
	if cf := cacheFileOrNil(i); cf != nil && !cf.NeedsWriteBack() {
		cf.SetVersion(cf.Version(), int64(*size))
	}
	// Also while a callback's entry into the pinned mode is in progress
	// (not yet entered): the kernel maps and reads this cache file, and a
	// size set on the server meanwhile and not applied to it (an ftruncate
	// growing the file before a mapped write, say) left stores past its
	// end faulting (SIGBUS) and fstat reporting the old size.
	i.mu.Lock()
	pf := snOf(i).pt.pinned
	i.mu.Unlock()
	if pf != nil {
		fs.pinSized(pf, *size)
	}
}

// reclaimItems reports what this client holds, for the RECLAIM after a
// server restart (client.SessionConfig.Reclaim; docs/protocol.md): every
// file with protocol opens (the applications' and the kept ones, by mode)
// or dirty data, whether it is cached and the version its cache holds. It
// runs in the session's connect hook: it takes only the inodes' and the
// cache's locks, never one held across a call to the server.
func (fs *snfsFS) reclaimItems(context.Context) []snfs1.ReclaimItem {
	fs.FS.mu.Lock()
	all := make([]*Inode, 0, len(fs.inodes))
	for _, i := range fs.inodes {
		all = append(all, i)
	}
	fs.FS.mu.Unlock()
	var items []snfs1.ReclaimItem
	for _, i := range all {
		if i.Type != nfs3.TypeReg {
			continue
		}
		i.mu.Lock()
		// The applications' opens reported: the ones a refusal makes
		// forgotten (forgetOpens). Not those an earlier refused reclaim
		// made forgotten and no OPEN gave back (reopen failed): the server
		// never counted them, a client reports only what it was granted,
		// and their releases send no CLOSE.
		rep := snOf(i).opens
		for _, m := range []state.Mode{state.Read, state.Write} {
			rep[m] = max(rep[m]-snOf(i).forgot[m], 0)
		}
		snOf(i).reclaimed = rep
		r := rep[state.Read] + snOf(i).dc.n[state.Read]
		w := rep[state.Write] + snOf(i).dc.n[state.Write]
		caching, version, cf := snOf(i).caching, snOf(i).version, snOf(i).cf
		pinned := snOf(i).pt.pinned != nil && snOf(i).pt.writers > 0
		i.mu.Unlock()
		dirty := cf != nil && cf.NeedsWriteBack()
		if pinned {
			// A pinned holder reclaims as a caching writer: the next
			// conflicting OPEN pins it again (protocol.md section 10.1).
			caching, dirty = true, true
		}
		if r+w == 0 && !dirty {
			continue
		}
		fs.log.Debug("reclaim item", "fileid", i.FileID, "readers", r, "writers", w, "caching", caching && cf != nil, "dirty", dirty)
		items = append(items, snfs1.ReclaimItem{File: i.FH, Readers: uint32(max(r, 0)), Writers: uint32(max(w, 0)),
			Caching: caching && cf != nil, Dirty: dirty, Version: version})
	}
	fs.stats.Reclaimed.Add(uint64(len(items)))
	return items
}

// serverRestarted: the server restarted and this client reclaimed its state
// (reclaimItems). Taken (refused false): the server knows again every open,
// cached and dirty file of this client: caches stay valid, opens stay open,
// and dirty data is written back now (the server's grace period lets a
// reclaiming client's write-back of a file it caches, or holds dirty and
// closed, through; others wait for its end), so that what the server's crash
// put at risk is not left waiting for the delay. Refused (the server's grace
// period was over, it did not know this client, or it has no crash
// recovery): the server holds nothing of this client, as if every file were
// fenced: clean cached data is dropped (the kernel's pages and attributes
// too; files are cached again from their next OPEN) and dirty data is
// reintegrated (reintegrate.go). Files open here go on, written through.
func (fs *snfsFS) serverRestarted(refused bool) {
	ctx, cancel := fs.stopCtx(5 * time.Minute)
	defer cancel()
	// The kernel's pages of files whose locks were not reclaimed go, so
	// that their next read reaches the mount (and its EIO): here, not in
	// the reclaim, which may run under a read or write holding the file.
	for _, i := range fs.locks.takeLostNotify() {
		fs.notifyData(i)
	}
	if !refused {
		fs.forgetReclaimed()
		fs.log.Info("snfs server restarted; this client's state was reclaimed: caches stay valid, writing back dirty data")
		if err := fs.snfsSync(ctx); err != nil {
			fs.log.Error("write-back after a server restart", "err", err)
		}
		return
	}
	fs.log.Warn("snfs server restarted and refused this client's reclaim: dropping cached data, reintegrating dirty data, opening open files again")
	fs.beforeForget.run(nil)
	held := fs.forgetOpens()
	for _, i := range fs.stopCaching() {
		if cf := cacheFileOrNil(i); cf != nil {
			if err := fs.reintegrate(ctx, i.FH, cf, "reclaim refused"); err != nil {
				fs.log.Error("reintegration after a refused reclaim", fs.pathAttr(i), "fileid", i.FileID, "err", err)
			}
		}
	}
	fs.beforeReopen.run(nil)
	for _, i := range held {
		fs.reopen(ctx, i)
	}
	fs.log.Info("after the refused reclaim: dirty data reintegrated, open files opened again", "files", len(held))
	fs.afterReopen.run(nil)
}

// forgetOpens records the applications' protocol opens the reclaim reported
// and none has released since (snOf(i).reclaimed) as forgotten by the server
// (snOf(i).forgot; kept opens, forgotten too, are not used again: stopCaching)
// and returns the files with some. The opens counted since the reclaim are
// not: their OPENs were answered by the new server (the reclaim runs on the
// new connection before any other call; not so a reclaim after a REGISTER
// again on the same connection, client.Session.reregister, where an OPEN
// answered while the reclaim is built is reported, and forgotten, as one
// the old server counted), which counts them. A release of a
// forgotten open sends no CLOSE (snfsRelease), so that an application closing
// and opening a file again while the reintegration runs leaves the server
// counting exactly the opens this client will close.
func (fs *FS) forgetOpens() []*Inode {
	var held []*Inode
	for _, i := range fs.allInodes() {
		i.mu.Lock()
		for _, m := range []state.Mode{state.Read, state.Write} {
			snOf(i).forgot[m] = min(snOf(i).forgot[m]+snOf(i).reclaimed[m], snOf(i).opens[m])
		}
		snOf(i).reclaimed = [3]int{}
		n := snOf(i).forgot[state.Read] + snOf(i).forgot[state.Write]
		i.mu.Unlock()
		if n > 0 {
			held = append(held, i)
		}
	}
	return held
}

// forgetReclaimed: the reclaim was taken; the opens it reported are the
// server's again.
func (fs *FS) forgetReclaimed() {
	for _, i := range fs.allInodes() {
		i.mu.Lock()
		snOf(i).reclaimed = [3]int{}
		i.mu.Unlock()
	}
}

func (fs *FS) allInodes() []*Inode {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	all := make([]*Inode, 0, len(fs.inodes))
	for _, i := range fs.inodes {
		all = append(all, i)
	}
	return all
}

// reopen OPENs i again at a server that refused the reclaim, once for each
// forgotten application open not released since (snOf(i).forgot): the
// protocol treats the files as fenced, and a fenced client OPENs again before
// it uses a file (docs/protocol.md 4.5, 7.1). Without it, the open files
// were written through with no open at the server: another client was
// granted caching and read its stale copy, and each later CLOSE was one the
// server did not count. The opens stay write-through (the file was
// invalidated by stopCaching; a client may always do less than the server
// allows). An OPEN refused counts nothing: the opens not OPENed again stay
// forgotten, and their releases send no CLOSE.
func (fs *snfsFS) reopen(ctx context.Context, i *Inode) {
	snOf(i).openMu.Lock()
	defer snOf(i).openMu.Unlock()
	for _, m := range []state.Mode{state.Read, state.Write} {
		for {
			i.mu.Lock()
			left := snOf(i).forgot[m] > 0
			i.mu.Unlock()
			if !left {
				break
			}
			if _, err := fs.sess.Open(ctx, i.FH, m); err != nil {
				fs.log.Warn("OPEN again after a refused reclaim", fs.pathAttr(i), "fileid", i.FileID, "mode", m, "err", err)
				break
			}
			i.mu.Lock()
			snOf(i).forgot[m]--
			i.mu.Unlock()
		}
	}
}

// stopCaching is a refused reclaim's first step: no file is cached any more
// (the kernel's pages and attributes go too, and the clean data of the cache
// directory), the kept opens are forgotten (the server has none), and the
// files with dirty data are returned for reintegration, which runs while
// applications go on using their open files: until it has run, reads and
// writes through the server write the dirty data back first (writeBackFirst).
func (fs *FS) stopCaching() (dirty []*Inode) {
	fs.mu.Lock()
	all := make([]*Inode, 0, len(fs.inodes))
	for _, i := range fs.inodes {
		all = append(all, i)
	}
	fs.mu.Unlock()
	for _, i := range all {
		i.mu.Lock()
		was := snOf(i).caching || snOf(i).kernVer != 0
		snOf(i).caching, snOf(i).kernVer = false, 0
		snOf(i).invals++
		// The server forgot the kept opens: nothing to CLOSE for them.
		snOf(i).dc.n = [3]int{}
		if was {
			i.invalidateLocked()
		}
		cf := snOf(i).cf
		i.mu.Unlock()
		if cf != nil {
			if cf.NeedsWriteBack() {
				dirty = append(dirty, i)
			}
			if err := cf.Invalidate(); err != nil && !errors.Is(err, cachedir.ErrRemoved) {
				fs.log.Warn("cache directory: invalidate", "err", err)
			}
		}
		if was {
			fs.notifyData(i)
		}
	}
	return dirty
}
