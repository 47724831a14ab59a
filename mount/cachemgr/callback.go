package cachemgr

import (
	"context"
	"sync"
	"syscall"
	"time"

	"snfs/client"
	"snfs/mount/cachedir"
	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
	"snfs/state/clientfile"
)

// snfs mode callbacks (docs/protocol.md section 11): each becomes cache
// invalidations (ours and, through the Notifier, the kernel's) before it is
// answered; and what a server restart changes.

// Callback serves the server's callbacks (client.CallbackHandler): the work
// first, then the answer, as the file's machine asks (clientfile's
// CallbackBegin and CallbackEnd).
func (sn *snfsFS) Callback(ctx context.Context, fh nfs3.FH, mode state.CallbackMode, attr *nfs3.Fattr) state.Outcome {
	if mode == state.RecallPermit || mode == state.RecallLocks {
		return sn.callback(ctx, fh, mode, attr)
	}
	// It may be about a file a CREATE_OPEN of this client's made and
	// opened, whose reply is still on its way (createopen.go).
	answered := sn.createOpens.callback(fh, mode)
	if p := sn.permitsNow(); p != nil && !sn.plainInvalidate(fh, mode) {
		p.pushBeforeCallback(ctx, fh) // permitdata.go
	}
	out := sn.callback(ctx, fh, mode, attr)
	if answered != nil {
		answered(out)
	}
	if (out == state.TreatAsClosed || out == state.Stale) && sn.handedBack.p.Load() != nil {
		sn.handedBack.run(sn.FS.LookupInode(fh))
	}
	return out
}

// plainInvalidate reports whether the callback is a CB_INVALIDATE of a
// regular file this mount knows: it does not wait for a made file's push
// (pushBeforeCallback), which only a callback asking for data needs: the
// server sends those to the file's maker, its closed dirty holder
// (docs/protocol.md 21.3). An INVALIDATE goes to a holder the server takes
// for clean (after another client's write or a local process's change), so
// there is nothing to push first. Waiting for the reintegration in progress
// held every invalidation behind a REINTEGRATE that may itself wait on the
// server for another client's answer, held the same way (section 11): both
// mounts served a file's old bytes for seconds after a local change
// (TestPermitsSoak). A directory's break, or a handle not known here (a
// file a reintegration in progress may have made), waits as before.
func (sn *snfsFS) plainInvalidate(fh nfs3.FH, mode state.CallbackMode) bool {
	if mode != state.Invalidate {
		return false
	}
	i := sn.FS.LookupInode(fh)
	return i != nil && i.Type == nfs3.TypeReg
}

func (sn *snfsFS) callback(ctx context.Context, fh nfs3.FH, mode state.CallbackMode, attr *nfs3.Fattr) state.Outcome {
	fs := sn.FS
	if p := sn.permitsNow(); mode == state.RecallPermit && p != nil {
		return p.recall(ctx, fh) // permits.go
	}
	if mode != state.RecallLocks {
		if out, ok := sn.dirCallback(fh, mode); ok {
			return out // a directory promise's break (namesops.go)
		}
	}
	sn.stats.Callbacks.Add(1)
	sn.stats.callback(mode)
	if mode == state.RecallLocks {
		return sn.recallLocks(ctx, fh) // lock delegation (lockdeleg.go)
	}
	i := fs.LookupInode(fh)
	if i == nil {
		// An answer without an inode hands the file back (CB_STALE): no
		// OPEN goes out before it (client/handback.go). Held first, then
		// looked up again: an OPEN begun before the hold has its inode,
		// whose machine counts it in flight. Found now, the machine
		// decides under i.Mu as below, and the hold goes: kept across this
		// callback's write-back, it would hold every OPEN of the mount
		// behind it (and a fenced write-back's reintegration OPENs).
		client.HandingBack(ctx)
		if i = fs.LookupInode(fh); i != nil {
			client.NotHandingBack(ctx)
		}
	}
	var cf *cachedir.File
	if i != nil {
		cf = cacheFileOrNil(i)
	}
	if cf == nil {
		cf, _ = sn.cache.File(fh)
	}
	cacheHolds := cf != nil && cf.Holds()
	if i == nil {
		// No inode, no opens: the cache directory's data only.
		out := clientfile.UnknownCallback(mode, cacheHolds)
		if out == state.Stale {
			sn.stats.CallbacksStale.Add(1)
			fs.Logger().Debug("callback: nothing held", "fh", fh, "mode", mode)
		} else if mode.Invalidates() {
			sn.invalidateCache(cf)
		}
		return out
	}
	if sn.disc.offline() && sn.disc.owesOpen(i) {
		// Written offline under an open granted locally (offlinewrite.go):
		// the server takes this client for a reader, and an invalidation
		// would drop the clean bytes around the dirty ones unwritten. Not
		// answered, as if unreachable: the server fences this client for
		// the file, and the reintegration's OPEN at reconnection finds
		// the other client's change (a conflict copy of the whole file).
		fs.Logger().Debug("callback of a file opened for writing offline: failed", "fileid", i.FileID, "mode", mode)
		sn.stats.CallbacksFailed.Add(1)
		return state.Failed
	}
	i.Mu.Lock()
	dirtyLocked(i)
	cb, acts := stOf(i).CallbackBegin(mode, cacheHolds, i.WState.Pending())
	acts = sn.timersLocked(i, acts)
	handBackLocked(ctx, acts)
	i.Mu.Unlock()
	if len(acts) == 1 && acts[0].Kind == clientfile.ActAnswer && acts[0].Outcome == state.Stale {
		sn.stats.CallbacksStale.Add(1)
		fs.Logger().Debug("callback: nothing held", "fh", fh, "mode", mode)
		return state.Stale
	}
	fs.Logger().Debug("callback", "fileid", i.FileID, "mode", mode)
	// An append into the cache file in progress ends before the write-back,
	// and none starts until the callback is done: the server places the
	// later ones (append.go), after this client's earlier ones, at the end
	// of file another client sees too. Taken with the pinned entry or the
	// stop of caching, whichever comes first.
	appendHeld := false
	holdAppends := func() {
		if !appendHeld {
			i.AppendMu.Lock()
			appendHeld = true
		}
	}
	defer func() {
		if appendHeld {
			i.AppendMu.Unlock()
		}
	}()
	var entering *pinnedFile
	for {
		// unsent: a write-back did not reach the server's stable storage (a
		// transport error, the connection's end) and the data is kept here:
		// the machine answers a failure, never done (docs/protocol.md 5.1).
		unsent := false
		for _, a := range acts {
			switch a.Kind {
			case clientfile.ActAnswer:
				switch a.Outcome {
				case state.Failed:
					sn.stats.CallbacksFailed.Add(1)
				case state.Pinned:
					fs.Logger().Debug("callback: pinned holder", "fileid", i.FileID)
				}
				return a.Outcome
			case clientfile.ActPinSync:
				// The pinned holder (pinned.go): what the kernel wrote so
				// far goes now; its opens go on writing.
				if pf := sn.pinnedOf(i); pf != nil {
					if err := sn.pinSync(ctx, pf, false); err != nil {
						fs.Logger().Warn("callback write-back", fs.PathAttr(i), "fileid", i.FileID, "mode", mode, "err", err)
					}
				}
			case clientfile.ActPinEnter:
				holdAppends()
				if entering = sn.pinEnter(i); entering == nil {
					i.Mu.Lock()
					stOf(i).PinEnterFailed(&cb)
					i.Mu.Unlock()
				}
			case clientfile.ActStopCaching:
				// The machine stopped caching: a write into the cache
				// directory after the write-back took the dirty data would
				// be left behind it, unknown to the server once this is
				// answered. The changes in progress end first (whileCaching);
				// later ones go through, after the cache directory's dirty
				// data (writeBackFirst).
				holdAppends()
				snOf(i).cacheW.Lock()
				snOf(i).cacheW.Unlock()
			case clientfile.ActWriteBack:
				unsent = sn.callbackWriteBack(ctx, i, mode) || unsent
			case clientfile.ActInvalidateAttr:
				i.Mu.Lock()
				i.InvalidateLocked()
				i.Mu.Unlock()
			case clientfile.ActInvalidateCache:
				sn.invalidateCache(cf)
			case clientfile.ActNotifyData, clientfile.ActNotifyAttr:
				sn.notify(i, []clientfile.Action{a})
			}
		}
		if entering != nil {
			// The entry's write-back is done.
			sn.pinEntered(entering)
			entering = nil
		}
		sn.beforeCallbackEnd.run(i)
		i.Mu.Lock()
		dirtyLocked(i)
		kept := stOf(i).Kept(state.Read) + stOf(i).Kept(state.Write)
		acts = stOf(i).CallbackEnd(&cb, unsent, i.WState.Pending())
		acts = sn.timersLocked(i, acts)
		handBackLocked(ctx, acts)
		forgotten := kept > 0 && stOf(i).Kept(state.Read)+stOf(i).Kept(state.Write) == 0
		i.Mu.Unlock()
		if forgotten {
			sn.delayed.remove(i)
			sn.stats.TreatedAsClosed.Add(1)
		}
	}
}

// handBackLocked: if acts answer the callback with a hand-back
// (CB_TREAT_AS_CLOSED, CB_STALE), the session sends no OPEN before that
// answer (client/handback.go). Called under i.Mu, where the machine decided
// it and where an application's OPEN begins (OpenBegin): an OPEN of the
// file begun after the decision waits for the answer.
func handBackLocked(ctx context.Context, acts []clientfile.Action) {
	for _, a := range acts {
		if a.Kind == clientfile.ActAnswer && (a.Outcome == state.TreatAsClosed || a.Outcome == state.Stale) {
			client.HandingBack(ctx)
		}
	}
}

// callbackWriteBack is a callback's write-back of i: what was written
// through first, then the cache directory's dirty data. It reports whether
// data is still held here unsent (an error the server gave dropped the
// data, writeback.go, and is reported to the application instead).
func (fs *snfsFS) callbackWriteBack(ctx context.Context, i *vfs.Inode, mode state.CallbackMode) (unsent bool) {
	i.Mu.Lock()
	pending := i.WState.Pending()
	i.Mu.Unlock()
	if pending {
		if err := i.Flush(ctx, true); err != nil {
			fs.Logger().Warn("callback write-back", fs.PathAttr(i), "fileid", i.FileID, "err", err)
			i.Mu.Lock()
			unsent = i.WState.Pending()
			i.Mu.Unlock()
		}
	}
	if err := fs.writeBackInode(ctx, i); err != nil {
		fs.Logger().Warn("callback write-back", fs.PathAttr(i), "fileid", i.FileID, "mode", mode, "err", err)
		if c := cacheFileOrNil(i); c != nil && c.NeedsWriteBack() {
			unsent = true
		}
	}
	fs.recordWrittenBack() // before the answer (writeback.go)
	return unsent
}

// snfsCreated finishes Create in snfs mode: the new file is opened for
// writing with the protocol, by the CREATE_OPEN co if it opened it (nil: an
// OPEN).
func (fs *snfsFS) snfsCreated(ctx context.Context, e vfs.Entry, c vfs.Cred, flags int, co *createOpened) (vfs.Entry, *vfs.File, error) {
	i := e.Inode
	_, _, direct, _, err := fs.snfsOpenProtoWith(ctx, i, c, state.Write, co)
	if err != nil {
		i.Mu.Lock()
		i.Opens--
		i.Mu.Unlock()
		return vfs.Entry{}, nil, err
	}
	f := &vfs.File{I: i, Cred: c, Write: true, Appending: vfs.IsAppend(flags), DirectIO: direct, Ext: &snfsFile{mode: state.Write}}
	f.SampleWbErr() // vfs/wberr.go
	if flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		flags = flags&^syscall.O_ACCMODE | syscall.O_WRONLY // the protocol open is for writing
	}
	if err := fs.snfsIOMode(ctx, f, flags); err != nil {
		fs.snfsRelease(ctx, f)
		return vfs.Entry{}, nil, err
	}
	fs.seedCreatorAccess(i, c)
	i.Mu.Lock()
	snOf(i).openCred[state.Write] = c // as snfsOpen records it
	i.Mu.Unlock()
	now := time.Now()
	i.Mu.Lock()
	e.Attr, e.AttrTTL = i.ReportLocked(), i.TTLLocked(now)
	i.Mu.Unlock()
	return e, f, nil
}

// snfsSetattr is a local size change (snfsSetattrLocal).
func (fs *snfsFS) snfsSetattr(i *vfs.Inode, c vfs.Cred, size uint64) (nfs3.Fattr, time.Duration, error) {
	if err := fs.snfsTruncate(i, c, size); err != nil {
		return nfs3.Fattr{}, 0, err
	}
	i.Mu.Lock()
	defer i.Mu.Unlock()
	return i.ReportLocked(), i.TTLLocked(time.Now()), nil
}

// snfsSized brings the cache file to a size set on the server.
func (fs *snfsFS) snfsSized(i *vfs.Inode, size *uint64) {
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
	i.Mu.Lock()
	pf := snOf(i).pt.pinned
	i.Mu.Unlock()
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
	fs.disc.dropOwed() // the restarted server knows only what is reclaimed here
	fs.FS.Mu.Lock()
	all := make([]*vfs.Inode, 0, len(fs.Inodes))
	for _, i := range fs.Inodes {
		all = append(all, i)
	}
	fs.FS.Mu.Unlock()
	var items []snfs1.ReclaimItem
	// The registration the RECLAIM goes on (its REGISTER is answered): a
	// reclaim the server takes grants the opens it reports there
	// (keptlease.go, serverRestarted).
	ep := fs.openEpochNow()
	for _, i := range all {
		if i.Type != nfs3.TypeReg {
			continue
		}
		i.Mu.Lock()
		snOf(i).reclaimedUnder = ep
		dirtyLocked(i)
		// Kept opens included; a pinned holder as a caching, dirty writer
		// (protocol.md section 10.1); not the opens an earlier refused
		// reclaim made forgotten.
		r, w, caching, dirty, version, ok := stOf(i).ReclaimItem()
		i.Mu.Unlock()
		if !ok || r+w == 0 && !dirty {
			continue
		}
		fs.Logger().Debug("reclaim item", "fileid", i.FileID, "readers", r, "writers", w, "caching", caching, "dirty", dirty)
		items = append(items, snfs1.ReclaimItem{File: i.FH, Readers: uint32(max(r, 0)), Writers: uint32(max(w, 0)),
			Caching: caching, Dirty: dirty, Version: version})
	}
	if p := fs.permitsNow(); p != nil {
		items = append(items, p.reclaimPushes(items)...) // permitreclaim.go
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
	if p := fs.permitsNow(); p != nil {
		p.serverRestarted() // permits.go
	}
	// The kernel's pages of files whose locks were not reclaimed go, so
	// that their next read reaches the mount (and its EIO): here, not in
	// the reclaim, which may run under a read or write holding the file.
	for _, i := range fs.locks.TakeLostNotify() {
		fs.NotifyData(i)
	}
	if !refused {
		for _, i := range fs.allInodes() {
			i.Mu.Lock()
			stOf(i).ServerRestarted(false) // its write-back: snfsSync's
			reclaimGrantedLocked(i)
			i.Mu.Unlock()
		}
		fs.Logger().Info("snfs server restarted; this client's state was reclaimed: caches stay valid, writing back dirty data")
		fs.revalidateReclaimed(ctx)
		if fs.disc.offline() {
			return // reclaimed by the probe of a disconnected mount: its reconnection writes back (disconnected.go)
		}
		if p := fs.permitsNow(); p != nil && p.log.Len() > 0 {
			// The log first: the permits reclaimed hold everyone else's
			// reads of their directories until it is in (their recalls
			// wait for it), and the others' were lost (permitreclaim.go).
			if err := p.reintegrate(ctx, "server restart"); err != nil {
				fs.Logger().Warn("reintegration after a server restart: the log is sent again later", "err", err)
			}
		}
		if err := fs.snfsSync(ctx); err != nil {
			fs.Logger().Error("write-back after a server restart", "err", err)
		}
		return
	}
	fs.Logger().Warn("snfs server restarted and refused this client's reclaim: dropping cached data, reintegrating dirty data, opening open files again")
	fs.beforeForget.run(nil)
	dirty, held := fs.stopCaching()
	for _, i := range dirty {
		if cf := cacheFileOrNil(i); cf != nil {
			if err := fs.reintegrate(ctx, i.FH, cf, "reclaim refused"); err != nil {
				fs.Logger().Error("reintegration after a refused reclaim", fs.PathAttr(i), "fileid", i.FileID, "err", err)
			}
		}
	}
	fs.beforeReopen.run(nil)
	for _, i := range held {
		fs.reopen(ctx, i)
	}
	fs.Logger().Info("after the refused reclaim: dirty data reintegrated, open files opened again", "files", len(held))
	fs.afterReopen.run(nil)
}

// revalidateReclaimed reads again the attributes of each file whose clean
// cache the reclaim kept (docs/protocol.md section 7.3): a process on the
// server machine may have changed it while no server ran, which no
// notifier saw and no callback will tell. A file whose change time, size or
// modification time is not what this mount last saw is called back here as
// by a CB_INVALIDATE: its cached data and the kernel's pages go, and the
// next open reads the server's. Dirty files are left: their write-back
// follows (the application's writes are the later ones).
func (fs *snfsFS) revalidateReclaimed(ctx context.Context) {
	nc := fs.FS.Client(sessionCred())
	var clean []*vfs.Inode
	var seen []nfs3.Fattr
	for _, i := range fs.allInodes() {
		if i.Type != nfs3.TypeReg {
			continue
		}
		i.Mu.Lock()
		st := stOf(i)
		if st.Caching() && !st.Dirty() && !st.Pinned() {
			clean, seen = append(clean, i), append(seen, i.Attr)
		}
		i.Mu.Unlock()
	}
	// The GETATTRs overlap (a recovery with many cached files would
	// otherwise take one round trip each), revalidateParallel at a time.
	sem := make(chan struct{}, revalidateParallel)
	var wg sync.WaitGroup
	for k, i := range clean {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			res, err := vfs.RPC(ctx, fs.FS, func() (*nfs3.GetattrRes, error) { return nc.Getattr(ctx, i.FH) })
			if err != nil {
				return // gone (STALE): its next use finds out; or the context ended
			}
			a, was := res.Attr, seen[k]
			if a.Ctime == was.Ctime && a.Size == was.Size && a.Mtime == was.Mtime {
				return
			}
			fs.Logger().Info("a cached file changed while the server was down: its cache is dropped", fs.PathAttr(i), "fileid", i.FileID)
			fs.callback(ctx, i.FH, state.Invalidate, &a)
		}()
	}
	wg.Wait()
}

// revalidateParallel bounds revalidateReclaimed's GETATTRs in flight.
const revalidateParallel = 16

func (sn *snfsFS) allInodes() []*vfs.Inode {
	fs := sn.FS
	fs.Mu.Lock()
	defer fs.Mu.Unlock()
	all := make([]*vfs.Inode, 0, len(fs.Inodes))
	for _, i := range fs.Inodes {
		all = append(all, i)
	}
	return all
}

// reopen OPENs i again at a server that refused the reclaim, once for each
// forgotten application open not released since (the machine's Forgotten,
// Reopened): the protocol treats the files as fenced, and a fenced client
// OPENs again before it uses a file (docs/protocol.md 4.5, 7.1). Without
// it, the open files were written through with no open at the server:
// another client was granted caching and read its stale copy, and each
// later CLOSE was one the server did not count. The opens stay
// write-through (the file was invalidated by stopCaching; a client may
// always do less than the server allows). An OPEN refused counts nothing:
// the opens not OPENed again stay forgotten, and their releases send no
// CLOSE.
func (fs *snfsFS) reopen(ctx context.Context, i *vfs.Inode) {
	snOf(i).openMu.Lock()
	defer snOf(i).openMu.Unlock()
	for _, m := range []state.Mode{state.Read, state.Write} {
		for {
			i.Mu.Lock()
			left := stOf(i).Forgotten(m) > 0
			i.Mu.Unlock()
			if !left {
				break
			}
			i.Mu.Lock()
			c := snOf(i).openCred[m] // as the application whose open it is (root_squash)
			i.Mu.Unlock()
			if _, err := fs.sess.OpenAs(ctx, c.UID, c.GID, c.Groups, i.FH, m); err != nil {
				fs.Logger().Warn("OPEN again after a refused reclaim", fs.PathAttr(i), "fileid", i.FileID, "mode", m, "err", err)
				break
			}
			i.Mu.Lock()
			stOf(i).Reopened(m)
			i.Mu.Unlock()
		}
	}
}

// stopCaching is a refused reclaim's first step (clientfile's
// ServerRestarted(true)): no file is cached any more (the kernel's pages and
// attributes go too, and the clean data of the cache directory), the kept
// opens are forgotten (the server has none), the applications' opens the
// reclaim reported and none has released since are forgotten (returned in
// held, to be OPENed again: reopen), and the files with dirty data are
// returned for reintegration, which runs while applications go on using
// their open files: until it has run, reads and writes through the server
// write the dirty data back first (writeBackFirst). The opens counted since
// the reclaim are not forgotten: their OPENs were answered by the new server
// (the reclaim runs on the new connection before any other call; not so a
// reclaim after a REGISTER again on the same connection,
// client.Session.reregister, where an OPEN answered while the reclaim is
// built is reported, and forgotten, as one the old server counted), which
// counts them. A release of a forgotten open sends no CLOSE (the machine's
// Release), so that an application closing and opening a file again while
// the reintegration runs leaves the server counting exactly the opens this
// client will close.
func (fs *snfsFS) stopCaching() (dirty, held []*vfs.Inode) {
	for _, i := range fs.allInodes() {
		i.Mu.Lock()
		dirtyLocked(i)
		acts := fs.applyLocked(i, stOf(i).ServerRestarted(true))
		cf := snOf(i).cf
		forgot := stOf(i).Forgotten(state.Read)+stOf(i).Forgotten(state.Write) > 0
		i.Mu.Unlock()
		fs.delayed.remove(i)
		if hasAct(acts, clientfile.ActReintegrate) {
			dirty = append(dirty, i)
		}
		if forgot {
			held = append(held, i)
		}
		for _, a := range acts {
			switch a.Kind {
			case clientfile.ActInvalidateCache:
				fs.invalidateCache(cf)
			case clientfile.ActNotifyData:
				fs.NotifyData(i)
			}
		}
	}
	return dirty, held
}
