package vfs

import (
	"context"
	"errors"
	"snfs/state"
	"sync"
	"time"

	"snfs/mount/cachedir"
	"snfs/nfs3"
	"snfs/snfs1"
)

// Delayed close (docs/protocol.md section 10, the Spritely NFS paper's
// section 6.2). When the last application open of a file the server lets
// this client cache is released, its protocol open is kept for
// snfsConfig.CloseDelay instead of being CLOSEd at once. An application open
// of the file within that window takes the kept open over: no OPEN, and no
// CLOSE for the kept one (the server always counts exactly the opens this
// client will close). A read open may take over a kept write open (the server
// counts a write open; its CLOSE is a write CLOSE). When the window passes,
// the kept opens are CLOSEd (dirty as at any close). A callback for a file
// that only kept opens hold is answered CB_TREAT_AS_CLOSED after the mode's
// work and a write-back: the kept opens are forgotten, never CLOSEd. Close
// (unmount) CLOSEs every kept open.

// delayedOpens is an inode's kept opens; guarded by the Inode's mu.
type delayedOpens struct {
	n        [3]int    // kept protocol opens, by state.Mode
	deadline time.Time // when they are CLOSEd
	timer    *time.Timer
}

func (d *delayedOpens) count() int { return d.n[state.Read] + d.n[state.Write] }

// delayedSet is the FS's inodes with kept opens.
type delayedSet struct {
	mu     sync.Mutex
	inodes map[*Inode]struct{}
	closed bool // Close ran: no more delaying
}

// heldLocked is the number of protocol opens this client holds of i: the
// applications' and the kept ones.
func snfsHeldLocked(i *Inode) int {
	return snOf(i).opens[state.Read] + snOf(i).opens[state.Write] + snOf(i).dc.count()
}

// reuseDelayed takes over a kept open of i for an application open of mode,
// if there is one the mode may use and the file is still cached. It returns
// the protocol mode of the open taken over and whether the kernel may keep
// its pages.
func (fs *snfsFS) reuseDelayed(i *Inode, mode state.Mode) (taken state.Mode, keep, ok bool) {
	if fs.cfg.CloseDelay <= 0 {
		return 0, false, false
	}
	snOf(i).openMu.Lock()
	defer snOf(i).openMu.Unlock()
	i.mu.Lock()
	if !snOf(i).caching || snOf(i).cf == nil || snOf(i).dc.count() == 0 {
		i.mu.Unlock()
		return 0, false, false
	}
	switch {
	case snOf(i).dc.n[mode] > 0:
		taken = mode
	case mode == state.Read && snOf(i).dc.n[state.Write] > 0:
		taken = state.Write
	default:
		i.mu.Unlock()
		return 0, false, false
	}
	snOf(i).dc.n[taken]--
	snOf(i).opens[taken]++
	if snOf(i).dc.count() == 0 && snOf(i).dc.timer != nil {
		snOf(i).dc.timer.Stop()
		snOf(i).dc.timer = nil
	}
	keep = snOf(i).kernVer != 0 && snOf(i).kernVer == snOf(i).version
	i.mu.Unlock()
	fs.delayed.remove(i)
	fs.stats.DelayedReopens.Add(1)
	return taken, keep, true
}

// remove drops i from the set if it has no kept opens (lock order: the
// set's mu, then the Inode's).
func (s *delayedSet) remove(i *Inode) {
	s.mu.Lock()
	i.mu.Lock()
	if snOf(i).dc.count() == 0 {
		delete(s.inodes, i)
	}
	i.mu.Unlock()
	s.mu.Unlock()
}

// delayClose keeps the protocol open of mode that a release just gave up,
// instead of CLOSEing it, when delayed close is on, the file is cached here
// and no application has it open. Called with snOf(i).openMu held; the release's
// counts are already decremented.
func (fs *snfsFS) delayClose(i *Inode, mode state.Mode) bool {
	d := fs.cfg.CloseDelay
	if d <= 0 {
		return false
	}
	fs.delayed.mu.Lock()
	defer fs.delayed.mu.Unlock()
	if fs.delayed.closed {
		return false
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	if !snOf(i).caching || i.opens != 0 || snOf(i).opening != 0 {
		return false
	}
	snOf(i).dc.n[mode]++
	snOf(i).dc.deadline = time.Now().Add(d)
	if snOf(i).dc.timer == nil {
		snOf(i).dc.timer = time.AfterFunc(d, func() { fs.closeDelayed(i, false) })
	}
	if fs.delayed.inodes == nil {
		fs.delayed.inodes = map[*Inode]struct{}{}
	}
	fs.delayed.inodes[i] = struct{}{}
	fs.stats.DelayedCloses.Add(1)
	return true
}

// closeDelayed CLOSEs i's kept opens once their window has passed (now, if
// force).
func (fs *snfsFS) closeDelayed(i *Inode, force bool) {
	snOf(i).openMu.Lock()
	i.mu.Lock()
	if snOf(i).dc.count() == 0 {
		i.mu.Unlock()
		snOf(i).openMu.Unlock()
		return
	}
	if wait := time.Until(snOf(i).dc.deadline); !force && wait > 0 {
		// Released again since the timer was set: wait for the new deadline.
		if snOf(i).dc.timer != nil {
			snOf(i).dc.timer.Reset(wait)
		} else {
			snOf(i).dc.timer = time.AfterFunc(wait, func() { fs.closeDelayed(i, false) })
		}
		i.mu.Unlock()
		snOf(i).openMu.Unlock()
		return
	}
	n := snOf(i).dc.n
	snOf(i).dc.n = [3]int{}
	if snOf(i).dc.timer != nil {
		snOf(i).dc.timer.Stop()
		snOf(i).dc.timer = nil
	}
	cf := snOf(i).cf
	i.mu.Unlock()
	fs.delayed.remove(i)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dirty := false
	if cf != nil && fs.isDirty(i) {
		if err := cf.Sync(); err != nil && !errors.Is(err, cachedir.ErrRemoved) {
			fs.log.Warn("cache directory: sync", fs.pathAttr(i), "fileid", i.FileID, "err", err)
		}
		dirty = cf.NeedsWriteBack()
	}
	if !dirty {
		fs.recordWrittenBack()
	}
	for _, m := range []state.Mode{state.Read, state.Write} {
		for range n[m] {
			if _, err := fs.sess.Close(ctx, i.FH, m, dirty); err != nil && !errors.Is(err, nfs3.ErrStale) && !errors.Is(err, snfs1.ErrFenced) {
				fs.log.Warn("delayed CLOSE", fs.pathAttr(i), "fileid", i.FileID, "err", err)
			}
		}
	}
	snOf(i).openMu.Unlock()
	fs.snfsClosedAll(i)
}

// snfsClosedAll: if this client holds no open of i any more, the server no
// longer calls it back about the file: the kernel's attributes are good only
// as long as nfs mode's.
func (fs *snfsFS) snfsClosedAll(i *Inode) {
	i.mu.Lock()
	closed := snfsHeldLocked(i) == 0 && snOf(i).opening == 0
	if closed {
		snOf(i).caching = false
		i.invalidateLocked()
	}
	i.mu.Unlock()
	if closed {
		fs.notifyAttr(i)
	}
}

// closeAllDelayed CLOSEs every kept open now and stops delaying (Close).
func (fs *snfsFS) closeAllDelayed() {
	s := &fs.delayed
	s.mu.Lock()
	s.closed = true
	all := make([]*Inode, 0, len(s.inodes))
	for i := range s.inodes {
		all = append(all, i)
	}
	s.mu.Unlock()
	for _, i := range all {
		fs.closeDelayed(i, true)
	}
}

// delayedCallback answers a callback (after its mode's work) for a file that
// only kept opens hold: everything is written back, the kept opens are
// forgotten (the server treats them as closed) and caching stops. ok is
// false when the callback is not for such a file.
func (fs *snfsFS) delayedCallback(ctx context.Context, i *Inode) (st state.Outcome, ok bool) {
	if i == nil {
		return 0, false
	}
	i.mu.Lock()
	only := snOf(i).dc.count() > 0 && snOf(i).opens[state.Read]+snOf(i).opens[state.Write] == 0 && snOf(i).opening == 0
	i.mu.Unlock()
	if !only {
		return 0, false
	}
	i.mu.Lock()
	pending := i.w.pending()
	i.mu.Unlock()
	if pending {
		if err := i.flush(ctx, true); err != nil {
			fs.log.Warn("callback write-back", fs.pathAttr(i), "fileid", i.FileID, "err", err)
			// Not answered as done while the data is held here (Callback);
			// data the server refused is dropped and reported already.
			i.mu.Lock()
			unsent := i.w.pending()
			i.mu.Unlock()
			if unsent {
				fs.stats.CallbacksFailed.Add(1)
				return state.Failed, true
			}
		}
	}
	err := fs.writeBackInode(ctx, i)
	fs.recordWrittenBack() // before the answer (writeback.go)
	if err != nil {
		fs.log.Warn("callback write-back", fs.pathAttr(i), "fileid", i.FileID, "err", err)
		if cf := cacheFileOrNil(i); cf != nil && cf.NeedsWriteBack() {
			fs.stats.CallbacksFailed.Add(1)
			return state.Failed, true // the data kept (Callback)
		}
		return 0, false
	}
	if cf := cacheFileOrNil(i); cf != nil && cf.NeedsWriteBack() {
		return 0, false
	}
	i.mu.Lock()
	// Checked again: an application open may have taken a kept open over.
	if snOf(i).dc.count() == 0 || snOf(i).opens[state.Read]+snOf(i).opens[state.Write] != 0 || snOf(i).opening != 0 {
		i.mu.Unlock()
		return 0, false
	}
	snOf(i).dc.n = [3]int{}
	if snOf(i).dc.timer != nil {
		snOf(i).dc.timer.Stop()
		snOf(i).dc.timer = nil
	}
	snOf(i).caching = false
	i.invalidateLocked()
	i.mu.Unlock()
	fs.delayed.remove(i)
	fs.stats.TreatedAsClosed.Add(1)
	fs.notifyAttr(i)
	return state.TreatAsClosed, true
}
