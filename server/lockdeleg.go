package server

import (
	"context"
	"errors"
	"sync"
	"time"

	"snfs/lockmgr"
	"snfs/snfs1"
	"snfs/state"
	"snfs/store"
)

// Lock delegation (docs/protocol.md, "Lock delegation"; RFC 7530 section
// 10.4's locking under a write delegation, and Sprite's rule that a file one
// client alone uses may be cached there): a LOCK granted to the one snfs
// client that has the file open, while nobody else holds or waits for a
// lock of it and no other process has it open, is answered with delegated
// TRUE, and the client serves the file's locks itself. Before the server
// serves anything that could meet those locks it recalls them
// (CB_CALLBACK, CB_RECALL_LOCKS): the client sends them as ordinary LOCKs,
// then answers. What waits for a recall:
//
//   - another snfs client's OPEN, LOCK and LOCKT of the file (admit, from
//     answerOpen and the LOCK and LOCKT rows' Gate);
//   - every NLM request about the file (nlmGatedProc);
//   - a local process's open of the file (a FAN_OPEN_PERM mark on it:
//     store.OpenGate). A process must open a file to lock it; the opens
//     made before the delegation are ruled out by a write lease taken and
//     released at the grant (store.OpenElsewhere), after the mark was
//     placed, so no open escapes both.
//
// No request holds a worker while it waits: its reply is deferred (later),
// and the handler runs when the recall ends. A recall unanswered within the
// callback timeout revokes the holder's locks (lock leases, locklease.go).
// Without the open gate (the server is not root, or the kernel has no
// permission events) nothing is delegated.

// lockDelegs is the server's delegation state. Recalls are goroutines
// tracked by wg and ended by stop.
type lockDelegs struct {
	s    *Server
	gate *store.OpenGate // nil: delegation off

	mu      sync.Mutex
	files   map[lockmgr.FileKey]*lockDeleg // guarded by mu
	busy    map[lockmgr.FileKey]int        // requests admitted and not yet done; guarded by mu
	recalls map[state.ClientID]int         // recalls out, by holder; guarded by mu
	stopped bool                           // guarded by mu
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// lockDeleg is one file's delegation.
type lockDeleg struct {
	holder    state.ClientID
	fh        []byte
	pending   bool // being granted (prepare to finish)
	marked    bool // the open gate's mark is placed
	recalling bool
	waiters   []func() // run when the delegation ends
}

func (s *Server) newLockDelegs(on bool) {
	l := &s.delegs
	l.s = s
	l.files, l.busy, l.recalls = map[lockmgr.FileKey]*lockDeleg{}, map[lockmgr.FileKey]int{}, map[state.ClientID]int{}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	if !on {
		return
	}
	g, err := s.store.NewOpenGate(l.localOpen)
	if err != nil {
		s.log.Warn("lock delegation is off: local processes' opens cannot be held", "err", err)
		return
	}
	l.gate = g
}

// stop ends the recalls and the open gate (the kernel allows the opens it
// still holds).
func (l *lockDelegs) stop() {
	l.mu.Lock()
	l.stopped = true
	l.mu.Unlock()
	l.cancel()
	l.wg.Wait()
	if l.gate != nil {
		l.gate.Close()
	}
}

func (l *lockDelegs) on() bool { return l.gate != nil }

// admit calls proceed once file k is not delegated to a client other than
// c (0: not an snfs client), after recalling the delegation if one stands:
// at once, or later from the recall's goroutine. The holder's own requests
// proceed at once. Until proceed's request calls leave no delegation of k is
// granted.
func (l *lockDelegs) admit(k lockmgr.FileKey, c state.ClientID, proceed func(leave func())) {
	if l.gate == nil {
		proceed(func() {})
		return
	}
	l.mu.Lock()
	d := l.files[k]
	switch {
	case d == nil:
		l.busy[k]++
		l.mu.Unlock()
		proceed(func() { l.leave(k) })
		return
	case c != 0 && d.holder == c:
		l.mu.Unlock()
		proceed(func() {})
		return
	}
	start := l.waitLocked(d, func() { l.admit(k, c, proceed) })
	l.mu.Unlock()
	if start {
		l.recall(k, d)
	}
}

func (l *lockDelegs) leave(k lockmgr.FileKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.busy[k]--; l.busy[k] <= 0 {
		delete(l.busy, k)
	}
}

// waitLocked queues fn for the end of d, and reports whether a recall is to
// be started (a granted delegation not yet recalled). Called with mu held.
func (l *lockDelegs) waitLocked(d *lockDeleg, fn func()) bool {
	d.waiters = append(d.waiters, fn)
	if d.pending || d.recalling {
		return false // a pending grant with waiters is given up (finish)
	}
	d.recalling = true
	l.recalls[d.holder]++
	return true
}

// localOpen is the open gate's handler: another process opens file fh.
func (l *lockDelegs) localOpen(fh []byte, allow func()) {
	k := lockmgr.FileKey(fh)
	l.mu.Lock()
	d := l.files[k]
	if d == nil {
		l.mu.Unlock()
		allow()
		return
	}
	start := l.waitLocked(d, allow)
	l.mu.Unlock()
	if start {
		l.recall(k, d)
	}
}

// recalling reports whether a recall of one of client c's delegations is
// out: its LOCKT (the lease renewal) is answered NFS3ERR_JUKEBOX meanwhile,
// as during a probe.
func (l *lockDelegs) recalling(c state.ClientID) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.recalls[c] > 0
}

// recall sends CB_RECALL_LOCKS to d's holder and ends d when it is
// answered. No answer within the callback timeout: the holder's locks are
// revoked (it held them alone: nobody else is granted anything wrongly).
func (l *lockDelegs) recall(k lockmgr.FileKey, d *lockDeleg) {
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		l.end(k, d)
		return
	}
	l.wg.Add(1)
	l.mu.Unlock()
	go func() {
		defer l.wg.Done()
		s := l.s
		ctx, cancel := context.WithTimeout(l.ctx, s.consist.CallbackTimeout())
		var res snfs1.CallbackRes
		err := s.consist.CallClient(ctx, d.holder, snfs1.CBProcCallback,
			&snfs1.CallbackArgs{File: d.fh, Mode: state.RecallLocks}, &res)
		cancel()
		if err != nil && l.ctx.Err() == nil && s.consist.Registered(d.holder) {
			s.log.Warn("lock delegation recall unanswered: the holder's locks are revoked", "client", d.holder, "err", err)
			s.revokeLocks(d.holder)
		}
		l.end(k, d)
	}()
}

// end removes d and runs what waited for it.
func (l *lockDelegs) end(k lockmgr.FileKey, d *lockDeleg) {
	l.mu.Lock()
	if l.files[k] == d {
		delete(l.files, k)
	}
	if d.recalling {
		if l.recalls[d.holder]--; l.recalls[d.holder] <= 0 {
			delete(l.recalls, d.holder)
		}
		d.recalling = false
	}
	ws := d.waiters
	d.waiters = nil
	marked := d.marked
	d.marked = false
	l.mu.Unlock()
	// The waiters first: a local open goes on through the lease the gate
	// stands in for (store.OpenGate) while the mark is still placed.
	for _, w := range ws {
		w()
	}
	if marked {
		l.gate.Unmark(d.fh)
	}
}

// clientGone ends client c's delegations (its registration ended: its locks
// went with it).
func (l *lockDelegs) clientGone(c state.ClientID) {
	l.mu.Lock()
	var ds []*lockDeleg
	var ks []lockmgr.FileKey
	for k, d := range l.files {
		if d.holder == c && !d.pending {
			ds, ks = append(ds, d), append(ks, k)
		}
	}
	l.mu.Unlock()
	for i, d := range ds {
		l.end(ks[i], d)
	}
}

// grant is a LOCK's delegation decision in progress (prepare, finish).
type grant struct {
	d     *lockDeleg
	fresh bool // granted by this LOCK (else the holder's delegation stands)
}

// prepare decides, before client c's LOCK of k is applied, whether it may
// come with the file's delegation: c is the only snfs client with the file
// open, nobody holds or waits for a lock of it, no other request of it is
// admitted, and no other open of the backing file exists (the gate's mark
// is placed before that is tested). The caller's own request counts as
// admitted.
func (l *lockDelegs) prepare(k lockmgr.FileKey, c state.ClientID, fh []byte) grant {
	if l.gate == nil || l.s.consist.InGrace() {
		return grant{}
	}
	l.mu.Lock()
	if d := l.files[k]; d != nil {
		stands := d.holder == c && !d.pending && !d.recalling
		l.mu.Unlock()
		if stands {
			return grant{d: d}
		}
		return grant{}
	}
	if l.stopped || l.busy[k] > 1 {
		l.mu.Unlock()
		return grant{}
	}
	d := &lockDeleg{holder: c, fh: append([]byte(nil), fh...), pending: true}
	l.files[k] = d
	l.mu.Unlock()
	if !l.eligible(k, c, d) {
		l.end(k, d)
		return grant{}
	}
	return grant{d: d, fresh: true}
}

func (l *lockDelegs) eligible(k lockmgr.FileKey, c state.ClientID, d *lockDeleg) bool {
	s := l.s
	if len(s.locks.Holders(k)) > 0 || len(s.locks.Waiters(k)) > 0 {
		return false
	}
	if fi, ok := s.consist.Table().Lookup(time.Now(), state.FileIDOf(d.fh)); ok {
		for _, h := range fi.Holders {
			if h.Client != c && h.Readers+h.Writers > 0 {
				return false
			}
		}
	}
	if err := l.gate.Mark(d.fh); err != nil {
		if !errors.Is(err, store.ErrNoOpenGate) {
			s.log.Debug("lock delegation: no open gate mark", "err", err)
		}
		return false
	}
	l.mu.Lock()
	d.marked = true
	l.mu.Unlock()
	elsewhere, err := s.store.OpenElsewhere(d.fh)
	return err == nil && !elsewhere
}

// finish completes a LOCK's delegation: TRUE if the lock was granted and
// nothing came to wait for the file meanwhile, and no other client holds a
// lock of it.
func (l *lockDelegs) finish(k lockmgr.FileKey, c state.ClientID, g grant, granted bool) bool {
	if g.d == nil {
		return false
	}
	if !g.fresh {
		return granted
	}
	ok := granted
	if ok {
		for _, h := range l.s.locks.Holders(k) {
			if h.Owner.Client != lockmgr.ClientID(c) {
				ok = false
			}
		}
	}
	l.mu.Lock()
	if ok && len(g.d.waiters) == 0 {
		g.d.pending = false
		l.mu.Unlock()
		return true
	}
	l.mu.Unlock()
	l.end(k, g.d)
	return false
}

// delegCaller is the table client of an snfs request's clientid, for admit
// (0, not a holder, when it is not registered: the handler refuses it).
func (s *Server) delegCaller(id snfs1.ClientID) state.ClientID {
	mid, err := s.consist.Client(id)
	if err != nil {
		return 0
	}
	return mid
}
