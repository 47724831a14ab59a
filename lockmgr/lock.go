package lockmgr

import (
	"slices"
	"time"
)

func validLock(t LockType, r Range) bool { return (t == Read || t == Write) && r.valid() }

// Lock applies a lock request (NLM4 LOCK, snfs LOCK, SETLK/SETLKW, flock).
// A request that does not conflict is Granted (or Acquiring, when the backing
// file must take it first); one that conflicts is Denied, or with Block
// queued (Blocked) unless waiting would deadlock. Reclaims never wait. A
// retransmission of a waiting request (same owner, type and range) is Blocked
// again with the waiting request's Req. Invalid arguments are Denied.
func (m *Machine) Lock(now time.Time, a LockArgs) (Result, []Action) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Action
	if !validLock(a.Type, a.Range) {
		m.n.Denied++
		return Result{Verdict: Denied}, nil
	}
	if m.inGrace(now) && !a.Reclaim {
		m.n.GraceDenied++
		return Result{Verdict: Grace}, nil
	}
	if q := m.reqs[a.Req]; q != nil {
		// The driver reuses a live ReqID: refuse rather than lose track.
		m.n.Denied++
		return Result{Verdict: Denied}, nil
	}
	f := m.file(a.File)
	defer m.gc(f)
	if a.Block {
		for _, w := range f.queue {
			if w.Owner == a.Owner && w.Type == a.Type && w.Range == a.Range {
				return Result{Verdict: Blocked, Req: w.Req}, nil
			}
		}
	}
	m.seq++
	q := &request{LockArgs: a, f: f, seq: m.seq}
	h, held := m.heldConflict(f, a.Owner, a.Type, a.Range)
	if !held {
		if w, ok := m.waiterConflict(f, a.Owner, a.Type, a.Range, q.seq); ok {
			h, held = Lock{w.Owner, w.Type, w.Range}, true
		}
	}
	if held {
		if !a.Block || a.Reclaim {
			m.n.Denied++
			return Result{Verdict: Denied, Holder: h}, nil
		}
		if m.deadlock(a.Owner, m.blockers(f, a.Owner, a.Type, a.Range, q.seq)) {
			m.n.Deadlocks++
			return Result{Verdict: Deadlock}, nil
		}
		if m.count[a.Owner.Client]+2 > m.cfg.MaxPerClient {
			m.n.NoLocks++
			return Result{Verdict: NoLocks}, nil
		}
		m.n.Blocked++
		m.addWaiter(q)
		return Result{Verdict: Blocked, Req: a.Req}, nil
	}
	old := f.held[a.Owner]
	if d := len(setRange(old, a.Range, a.Type)) - len(old); d > 0 && m.count[a.Owner.Client]+d > m.cfg.MaxPerClient {
		m.n.NoLocks++
		return Result{Verdict: NoLocks}, nil
	}
	m.n.Granted++
	q.immediate = true
	m.grant(f, q, &out)
	if q.st == stAcquiring {
		return Result{Verdict: Acquiring}, out
	}
	m.run(f, now, &out)
	return Result{Verdict: Granted}, out
}

// Test answers NLM4 TEST, snfs LOCKT and GETLK: Granted if a non-blocking
// Lock of (t, r) by o would be granted now (apart from the backing file: the
// driver asks it with F_OFD_GETLK), else Denied with the first conflict.
func (m *Machine) Test(now time.Time, k FileKey, o Owner, t LockType, r Range) Result {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !validLock(t, r) {
		return Result{Verdict: Denied}
	}
	if m.inGrace(now) {
		return Result{Verdict: Grace}
	}
	f := m.files[k]
	if f == nil {
		return Result{Verdict: Granted}
	}
	if h, ok := m.heldConflict(f, o, t, r); ok {
		return Result{Verdict: Denied, Holder: h}
	}
	if w, ok := m.waiterConflict(f, o, t, r, m.seq+1); ok {
		return Result{Verdict: Denied, Holder: Lock{w.Owner, w.Type, w.Range}}
	}
	return Result{Verdict: Granted}
}

// Unlock releases r of o's locks on k (NLM4 UNLOCK, snfs LOCKU, F_UNLCK) and
// grants the waiters that can now go. It is allowed in the grace period. It
// answers NoLocks only when splitting a lock would take the client past its
// bound; otherwise Granted, whether or not anything was held.
func (m *Machine) Unlock(now time.Time, k FileKey, o Owner, r Range) (Verdict, []Action) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.files[k]
	if f == nil || !r.valid() {
		return Granted, nil
	}
	defer m.gc(f)
	old := f.held[o]
	next := setRange(old, r, Unlocked)
	if d := len(next) - len(old); d > 0 && m.count[o.Client]+d > m.cfg.MaxPerClient {
		m.n.NoLocks++
		return NoLocks, nil
	}
	var out []Action
	m.touch(f, o, r)
	if !spansEqual(old, next) {
		m.setHeld(f, o, next)
		m.backing(f, o, r, Unlocked, 0, false, &out)
	}
	m.run(f, now, &out)
	return Granted, out
}

// Cancel withdraws a blocked request (NLM4 CANCEL, an interrupted SETLKW): the
// first live request of the owner with that lock. A waiting one leaves the
// queue; one granted whose callback is still out is backed out (the client
// never learned of it). It reports whether a request was found.
func (m *Machine) Cancel(now time.Time, a CancelArgs) (bool, []Action) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.files[a.File]
	if f == nil {
		return false, nil
	}
	defer m.gc(f)
	match := func(q *request) bool { return q.Owner == a.Owner && q.Type == a.Type && q.Range == a.Range }
	var out []Action
	if i := slices.IndexFunc(f.queue, match); i >= 0 {
		m.n.Cancels++
		q := f.queue[i]
		m.removeWaiter(q)
		delete(m.reqs, q.Req)
		m.run(f, now, &out)
		return true, out
	}
	i := slices.IndexFunc(f.granting, func(q *request) bool { return match(q) && !q.immediate && !q.cancelled })
	if i < 0 {
		return false, nil
	}
	m.n.Cancels++
	q := f.granting[i]
	if q.st == stAcquiring {
		q.cancelled = true
		return true, nil
	}
	m.removeGranting(q)
	delete(m.reqs, q.Req)
	m.backOut(f, q, &out)
	m.run(f, now, &out)
	return true, out
}

// BackingDone reports the outcome of an ActBacking with Acquire. Taken (ok):
// an immediate request is Granted, a waiter's ActGranted goes out. Refused (a
// local process holds a conflicting lock): the owner's locks are what they
// were (F_OFD_SETLK changed nothing); an immediate request is Denied with
// Local, or if it may block, waits; a waiter goes back to its place in the
// queue; either is tried again LocalRetry later (Tick).
func (m *Machine) BackingDone(now time.Time, req ReqID, ok bool) (Result, []Action) {
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.reqs[req]
	if q == nil || q.st != stAcquiring {
		return Result{Verdict: Denied}, nil
	}
	f := q.f
	defer m.gc(f)
	var out []Action
	m.removeGranting(q)
	if ok {
		if q.cancelled {
			delete(m.reqs, q.Req)
			q.untouched = []Range{q.Range}
			m.backOut(f, q, &out)
			m.run(f, now, &out)
			return Result{Verdict: Denied}, out
		}
		m.notify(f, q, &out)
		m.run(f, now, &out)
		return Result{Verdict: Granted}, out
	}
	m.n.BackingRefused++
	delete(m.reqs, q.Req)
	restored := setRange(f.held[q.Owner], q.Range, Unlocked)
	restored = append(restored, q.shadow...)
	sortSpans(restored)
	m.setHeld(f, q.Owner, merge(restored))
	res := Result{Verdict: Denied, Local: true}
	if !q.cancelled && (!q.immediate || q.Block) && m.count[q.Owner.Client]+2 <= m.cfg.MaxPerClient {
		q.retryAt = now.Add(m.cfg.LocalRetry)
		q.shadow = nil
		q.immediate = false // answered Blocked: its grant is an ActGranted
		m.addWaiter(q)
		res = Result{Verdict: Blocked, Req: q.Req}
	}
	m.run(f, now, &out)
	return res, out
}

// GrantDone reports the outcome of an ActGranted's callback. A failed one
// (the client did not take the grant) backs the grant out and grants the
// waiters that can now go.
func (m *Machine) GrantDone(now time.Time, req ReqID, ok bool) []Action {
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.reqs[req]
	if q == nil || q.st != stNotifying {
		return nil
	}
	f := q.f
	defer m.gc(f)
	m.removeGranting(q)
	delete(m.reqs, q.Req)
	if ok {
		return nil
	}
	var out []Action
	m.backOut(f, q, &out)
	m.run(f, now, &out)
	return out
}

// ClientGone releases everything client c holds and every request it has
// (NLM FREE_ALL, SM_NOTIFY of its reboot, an expired lease, an snfs mount's
// end) and grants the waiters that can now go.
func (m *Machine) ClientGone(now time.Time, c ClientID) []Action {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n.ClientsGone++
	keys := make([]FileKey, 0, len(m.files))
	for k := range m.files {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []Action
	for _, k := range keys {
		f := m.files[k]
		for _, q := range slices.Clone(f.queue) {
			if q.Owner.Client == c {
				m.removeWaiter(q)
				delete(m.reqs, q.Req)
			}
		}
		for _, q := range slices.Clone(f.granting) {
			if q.Owner.Client == c {
				m.removeGranting(q)
				delete(m.reqs, q.Req)
			}
		}
		var owners []Owner
		for o := range f.held {
			if o.Client == c {
				owners = append(owners, o)
			}
		}
		slices.SortFunc(owners, func(a, b Owner) int {
			if a.less(b) {
				return -1
			}
			return 1
		})
		for _, o := range owners {
			m.setHeld(f, o, nil)
			m.backing(f, o, Whole, Unlocked, 0, false, &out)
		}
		for o := range f.shares {
			if o.Client == c {
				delete(f.shares, o)
			}
		}
		m.run(f, now, &out)
		m.gc(f)
	}
	delete(m.count, c)
	return out
}

// Share applies an NLM4 SHARE: o's reservation of k replaces any it had; it
// is Denied if its access is one another owner's reservation denies, or it
// denies an access another owner's reservation has (the DOS rules).
func (m *Machine) Share(now time.Time, a ShareArgs) Verdict {
	m.mu.Lock()
	defer m.mu.Unlock()
	if a.Mode > DenyBoth || a.Access > AccessBoth {
		return Denied
	}
	if m.inGrace(now) && !a.Reclaim {
		m.n.GraceDenied++
		return Grace
	}
	f := m.file(a.File)
	defer m.gc(f)
	for o, s := range f.shares {
		if o != a.Owner && (uint8(a.Access)&uint8(s.mode) != 0 || uint8(s.access)&uint8(a.Mode) != 0) {
			m.n.Denied++
			return Denied
		}
	}
	if _, ok := f.shares[a.Owner]; !ok {
		if m.count[a.Owner.Client]+1 > m.cfg.MaxPerClient {
			m.n.NoLocks++
			return NoLocks
		}
		m.count[a.Owner.Client]++
	}
	f.shares[a.Owner] = share{a.Mode, a.Access}
	m.n.Granted++
	return Granted
}

// Unshare removes o's share reservation of k (NLM4 UNSHARE); allowed in the
// grace period.
func (m *Machine) Unshare(now time.Time, k FileKey, o Owner) Verdict {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.files[k]
	if f == nil {
		return Granted
	}
	if _, ok := f.shares[o]; ok {
		delete(f.shares, o)
		m.count[o.Client]--
		m.dropCount(o.Client)
	}
	m.gc(f)
	return Granted
}
