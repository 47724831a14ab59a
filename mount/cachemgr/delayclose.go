package cachemgr

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"time"

	"snfs/mount/cachedir"
	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
	"snfs/state/clientfile"
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
//
// Kept until recalled (CloseDelay = clientfile.UntilRecalled, `snfs mount
// --close-delay=forever`, docs/protocol.md 10): no deadline and no timer;
// the kept opens go back with CLOSE beyond snfsConfig.KeptOpens files (the
// least recently kept first, addLocked), when the cache directory evicts the
// file's data (giveBackEvicted), when the file loses its last link
// (snfsRemoved) and at unmount; a callback takes them as above.

// The kept opens, their deadline and the timer's arming are the file's
// machine's (clientfile: Release keeps, OpenBegin takes over, TimerFired and
// CloseAllDelayed CLOSE, CallbackEnd forgets); this file runs its timer and
// keeps the FS's set of files with kept opens, for Close.

// delayedSet is the FS's inodes with kept opens, least recently kept first:
// with opens kept until recalled (clientfile.UntilRecalled), the oldest
// are given back with CLOSE when there are more than the bound
// (snfsConfig.KeptOpens), so that this client's kept opens never fill the
// server's table on their own (docs/protocol.md 15) nor keep inodes without
// end.
type delayedSet struct {
	mu     sync.Mutex
	inodes map[*vfs.Inode]*list.Element // their elements in order
	order  list.List                    // of *vfs.Inode, least recently kept first
	closed bool                         // Close ran: no more delaying

	// evicted are the handles of files whose data the cache directory
	// evicted (cachedir's OnEvict), until the write-back loop gives their
	// kept opens back (giveBackEvicted); evMu guards it, a leaf.
	evMu    sync.Mutex
	evicted [][]byte
}

// noteEvicted is the cache directory's OnEvict: it only records the handle
// (it runs inside the cache's operations, under their callers' locks).
func (s *delayedSet) noteEvicted(fh []byte) {
	s.evMu.Lock()
	if len(s.evicted) < 1<<16 { // beyond: the bound of kept opens still holds
		s.evicted = append(s.evicted, fh)
	}
	s.evMu.Unlock()
}

// giveBackEvicted CLOSEs the kept opens of the files whose cached data was
// evicted (the write-back loop's tick): the least recently used files, whose
// reopen would read everything from the server anyway, hold no server
// state for this client.
func (fs *snfsFS) giveBackEvicted() {
	s := &fs.delayed
	s.evMu.Lock()
	ev := s.evicted
	s.evicted = nil
	s.evMu.Unlock()
	var files []*vfs.Inode
	for _, fh := range ev {
		i := fs.LookupInode(nfs3.FH(fh))
		if i == nil {
			continue
		}
		s.mu.Lock()
		_, kept := s.inodes[i]
		s.mu.Unlock()
		// Not one filled again since (reopened and read: in use).
		if cf := cacheFileOrNil(i); kept && (cf == nil || !cf.Holds()) {
			files = append(files, i)
		}
	}
	fs.giveBack(files)
}

// addLocked records that i (now) has kept opens, as the most recently kept,
// and returns the least recently kept ones beyond bound (<= 0: none), taken
// out of the set, for the caller to give back (closeDelayed with force,
// after it has released its locks). Called with s.mu held.
func (s *delayedSet) addLocked(i *vfs.Inode, bound int) (over []*vfs.Inode) {
	if s.inodes == nil {
		s.inodes = map[*vfs.Inode]*list.Element{}
	}
	if e, ok := s.inodes[i]; ok {
		s.order.MoveToBack(e)
	} else {
		s.inodes[i] = s.order.PushBack(i)
	}
	for bound > 0 && s.order.Len() > bound {
		o := s.order.Remove(s.order.Front()).(*vfs.Inode)
		delete(s.inodes, o)
		over = append(over, o)
	}
	return over
}

// remove drops i from the set if it has no kept opens (lock order: the
// set's mu, then the Inode's).
func (s *delayedSet) remove(i *vfs.Inode) {
	s.mu.Lock()
	i.Mu.Lock()
	s.dropLocked(i)
	i.Mu.Unlock()
	s.mu.Unlock()
}

// dropLocked is remove with s.mu and i.Mu held.
func (s *delayedSet) dropLocked(i *vfs.Inode) {
	if stOf(i).Kept(state.Read)+stOf(i).Kept(state.Write) == 0 {
		if e, ok := s.inodes[i]; ok {
			s.order.Remove(e)
			delete(s.inodes, i)
		}
	}
}

// len is the number of files with kept opens.
func (s *delayedSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.order.Len()
}

// giveBack CLOSEs the kept opens of files (addLocked's over: beyond the
// bound), counting them.
func (fs *snfsFS) giveBack(files []*vfs.Inode) {
	for _, i := range files {
		fs.stats.KeptGivenBack.Add(1)
		fs.closeDelayed(i, true)
	}
}

// closeDelayed runs i's delayed-close timer (TimerFired): the kept opens are
// CLOSEd once their window has passed (now, if force: CloseAllDelayed).
func (fs *snfsFS) closeDelayed(i *vfs.Inode, force bool) {
	snOf(i).openMu.Lock()
	i.Mu.Lock()
	var acts []clientfile.Action
	dirtyLocked(i)
	if force {
		acts = stOf(i).CloseAllDelayed()
	} else {
		acts = stOf(i).TimerFired(time.Now())
	}
	acts = fs.applyLocked(i, acts)
	cf := snOf(i).cf
	i.Mu.Unlock()
	fs.delayed.remove(i)
	if !hasAct(acts, clientfile.ActSendClose) {
		snOf(i).openMu.Unlock()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if cf != nil && cf.NeedsWriteBack() {
		// Durable here before the CLOSE says where the data is.
		if err := cf.Sync(); err != nil && !errors.Is(err, cachedir.ErrRemoved) {
			fs.Logger().Warn("cache directory: sync", fs.PathAttr(i), "fileid", i.FileID, "err", err)
		}
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
		if fs.disc.owe(i.FH, a.Mode, dirty, err) {
			continue // offline: sent on reconnection (disconnected.go)
		}
		if err != nil && !errors.Is(err, nfs3.ErrStale) && !errors.Is(err, snfs1.ErrFenced) {
			fs.Logger().Warn("delayed CLOSE", fs.PathAttr(i), "fileid", i.FileID, "err", err)
		}
	}
	snOf(i).openMu.Unlock()
	fs.notify(i, acts)
}

// closeAllDelayed CLOSEs every kept open now and stops delaying (Close).
// Kept until recalled, they may be thousands: their CLOSEs go
// closeAllParallel at a time (the session has many calls in flight), so that
// an unmount over a slow link does not wait one round trip per file; the
// goroutines end before it returns.
func (fs *snfsFS) closeAllDelayed() {
	s := &fs.delayed
	s.mu.Lock()
	s.closed = true
	all := make([]*vfs.Inode, 0, len(s.inodes))
	for i := range s.inodes {
		all = append(all, i)
	}
	s.mu.Unlock()
	work := make(chan *vfs.Inode)
	var wg sync.WaitGroup
	for range min(closeAllParallel, len(all)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				fs.closeDelayed(i, true)
			}
		}()
	}
	for _, i := range all {
		work <- i
	}
	close(work)
	wg.Wait()
}

// closeAllParallel is how many kept files closeAllDelayed CLOSEs at once.
const closeAllParallel = 16

// KeptFiles is the number of files with kept opens (for `snfs status`).
func (fs *snfsFS) KeptFiles() int { return fs.delayed.len() }
