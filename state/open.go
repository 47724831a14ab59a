package state

import (
	"math"
	"time"
)

// Open applies an OPEN (section 3.1) of a.File by a.Client. The answer is in the
// Result when its Verdict is Proceed (or Jukebox, when the table is full);
// when it is Wait, the driver parks the request and a later action with req
// answers it (ActReply, or ActJukebox once JukeboxAfter has passed).
func (m *Machine) Open(now time.Time, req ReqID, a OpenArgs) (Result, []Action) {
	m.n.opens.Add(1)
	var out []Action
	m.protocolClient(a.Client, &out)
	t := m.t(now)
	s := m.shard(a.File)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := m.lookupOrInsert(s, t, a.File, a.Handle, &out)
	if e == nil {
		m.n.tableFull.Add(1)
		m.n.jukebox.Add(1)
		return Result{Verdict: Jukebox}, out
	}
	mode := Read
	if a.Mode == Write {
		mode = Write
	}
	s.touch(e, t)
	e.settle(t)
	if a.Change != 0 {
		if e.change != 0 && e.change != a.Change && !e.changing(t) {
			m.changedLocked(s, e, t, &out) // changed outside the protocol
		}
		e.change = a.Change
	}
	v, r := m.admit(s, e, t, waiter{req: req, client: a.Client, mode: mode, since: t, seq: m.seq.Load()}, &out)
	return Result{Verdict: v, Reply: r}, out
}

// Close applies a CLOSE (section 3.1). It never waits: a close only takes opens
// away, so applying it at once can only lower what a parked request waits for,
// and the called-back client's own CLOSE must not queue behind the request that
// called it back.
func (m *Machine) Close(now time.Time, a CloseArgs) []Action {
	m.n.closes.Add(1)
	t := m.t(now)
	s := m.shard(a.File)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.files[a.File]
	if e == nil {
		return nil
	}
	h := e.holder(a.Client)
	if h == nil || h.flags&fFenced != 0 {
		return nil // its opens were forgotten when it was fenced or went away
	}
	if a.Mode == Write {
		if h.writers > 0 {
			h.writers--
		}
	} else if h.readers > 0 {
		h.readers--
	}
	if !h.opens() {
		// A closed file's clean cached blocks are checked by version at the next
		// OPEN; only dirty blocks keep the client on record.
		h.flags &^= fCaching
	}
	if h.writers == 0 && !a.Dirty {
		// Nothing of its left to send: neither the last writer nor, its
		// kernel writing into its cache no more, pinned. A pinned holder's
		// last CLOSE for writing that says dirty (what its kernel wrote is
		// not all sent: the write-back at the close failed) keeps it
		// pinned: the others that have the file open would otherwise read,
		// through their covered READs, the server's copy without its
		// writes. Their requests go on waiting for its write-back, whose
		// answer ends it (CallbackDone).
		h.flags &^= fDirty | fPinned | fRepinned
	}
	if oc := e.call(a.Client); oc != nil && a.Dirty {
		oc.dirtyClose = true
	}
	var out []Action
	s.touch(e, t)
	e.settle(t)
	m.run(s, e, t, &out)
	return out
}

// PlainAccess applies a plain NFSv3 request that reads or changes a.File
// (section 6.1). The driver calls it for every READ, WRITE, SETATTR of the size,
// REMOVE and RENAME of a regular file, from any client: a protocol client's own
// reads and writes (write-backs included) of a file it has open, or is the last
// writer of, proceed at once and change nothing. Anything else counts as an open
// by a.Client for PlainHold, after the callbacks that makes necessary: the
// verdict is Wait until they are answered (then ActProceed or ActJukebox).
// Refuse means a.Client is fenced for the file.
func (m *Machine) PlainAccess(now time.Time, req ReqID, a AccessArgs) (Verdict, []Action) {
	m.n.accesses.Add(1)
	t := m.t(now)
	s := m.shard(a.File)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.files[a.File]
	if a.Kind == AccessGetattr || a.Local && a.Kind == AccessRead {
		// A local process's read open waits, as a GETATTR does, for the
		// dirty blocks of every client to be written back, and stops nobody's
		// caching: it reads what was written before it opened, as a client
		// does at an OPEN (close-to-open), and caches nothing.
		return m.getattr(s, e, t, req, a.Client)
	}
	if e != nil {
		h := e.holder(a.Client)
		if h != nil && h.flags&fFenced != 0 {
			m.n.refused.Add(1)
			return Refuse, nil
		}
		if pinnedOther(e, a.Client) {
			var out []Action
			s.touch(e, t)
			e.settle(t)
			v, _ := m.admit(s, e, t, waiter{req: req, client: a.Client, access: a.Kind, local: a.Local, patient: a.Patient, since: t, seq: m.seq.Load()}, &out)
			return v, out
		}
		if h.covered(a.Kind) {
			return Proceed, nil
		}
		if h != nil && !a.Local && h.plainActive(t) && h.plainUntil-t > m.hold*3/4 && (a.Kind == AccessRead || h.flags&fPlainWrite != 0) &&
			(e.pend == nil || len(e.pend.waiters) == 0) {
			// Refreshed moments ago by the same kind of access: nothing changes
			// but the version, which a change resets.
			if a.Kind.changes() {
				e.version = 0
			}
			return Proceed, nil
		}
	}
	var out []Action
	if e == nil {
		e = m.lookupOrInsert(s, t, a.File, a.Handle, &out)
		if e == nil {
			// No room to record the access: grant no caching anywhere until it
			// would have expired, so nobody caches what this client may change
			// or read.
			m.n.unrecorded.Add(1)
			until := t + m.hold
			for {
				cur := m.overflowUntil.Load()
				if cur >= until || m.overflowUntil.CompareAndSwap(cur, until) {
					break
				}
			}
			return Proceed, out
		}
	}
	s.touch(e, t)
	e.settle(t)
	v, _ := m.admit(s, e, t, waiter{req: req, client: a.Client, access: a.Kind, local: a.Local, patient: a.Patient, since: t, seq: m.seq.Load()}, &out)
	return v, out
}

// admit applies w now if nothing is queued before it and no callback is needed,
// and parks it otherwise.
func (m *Machine) admit(s *shard, e *entry, t int64, w waiter, out *[]Action) (Verdict, OpenReply) {
	w.recallSeen = e.recallAt
	w.recallOwn = w.mode != 0 && e.recallBy == w.client && e.recallMode == w.mode
	if e.pend == nil || len(e.pend.waiters) == 0 {
		if v, r, done := m.try(s, e, t, &w, out); done {
			m.tidy(s, e, out)
			return v, r
		}
	}
	s.markBusy(e)
	e.pend.waiters = append(e.pend.waiters, w)
	m.n.waits.Add(1)
	return Wait, OpenReply{}
}

// run applies the parked requests at the head of e's queue, in order, until one
// must still wait.
func (m *Machine) run(s *shard, e *entry, t int64, out *[]Action) {
	for e.pend != nil && len(e.pend.waiters) > 0 {
		w := &e.pend.waiters[0]
		v, r, done := m.try(s, e, t, w, out)
		if !done {
			break
		}
		m.answer(w, v, r, out)
		e.pend.waiters[0] = waiter{}
		e.pend.waiters = e.pend.waiters[1:]
	}
	s.unbusy(e)
	m.tidy(s, e, out)
}

// answer emits the action releasing a parked request.
func (m *Machine) answer(w *waiter, v Verdict, r OpenReply, out *[]Action) {
	switch {
	case v == Refuse:
		m.n.refused.Add(1)
		*out = append(*out, Action{Kind: ActRefuse, Req: w.req})
	case w.access != 0:
		*out = append(*out, Action{Kind: ActProceed, Req: w.req})
	default:
		*out = append(*out, Action{Kind: ActReply, Req: w.req, Reply: r})
	}
}

// try applies w if it can be applied now; otherwise it sends the callbacks w
// waits for (those not already out) and reports false.
func (m *Machine) try(s *shard, e *entry, t int64, w *waiter, out *[]Action) (Verdict, OpenReply, bool) {
	if m.pinnedBlock(s, e, t, w, out) {
		return Wait, OpenReply{}, false
	}
	if w.access == AccessGetattr {
		return m.tryGetattr(s, e, t, w, out)
	}
	if w.access != 0 {
		h := e.holder(w.client)
		if h != nil && h.flags&fFenced != 0 {
			return Refuse, OpenReply{}, true
		}
		if h.covered(w.access) {
			return Proceed, OpenReply{}, true
		}
	}
	x := opener{client: w.client, write: w.write()}
	next := e.derive(t, &x)
	blocked := false
	for i := range e.holders {
		if nd := need(&e.holders[i], &x, next); nd != 0 {
			blocked = true
			if m.callback(s, e, t, e.holders[i].client, nd, nd&Invalidate != 0, out) && nd&Invalidate != 0 {
				e.recallBy, e.recallMode = w.client, w.mode
			}
		}
	}
	if blocked {
		return Wait, OpenReply{}, false
	}
	if w.access != 0 {
		h := e.addHolder(w.client)
		if !w.local {
			h.plainUntil = max(h.plainUntil, t+m.hold)
		}
		if w.access.changes() {
			h.flags |= fPlainWrite
			e.version = 0 // a plain change: the next OPEN gets a fresh version
		}
		e.st = e.derive(t, nil)
		return Proceed, OpenReply{}, true
	}
	return m.applyOpen(e, t, w, out)
}

// applyOpen records an OPEN that needs no callback and computes its reply.
func (m *Machine) applyOpen(e *entry, t int64, w *waiter, out *[]Action) (Verdict, OpenReply, bool) {
	var r OpenReply
	if w.mode == Write || e.version == 0 {
		v, ok := m.newVersion(out)
		if !ok {
			return Wait, r, false
		}
		old := e.version
		if old == 0 || w.mode != Write {
			old = v // nothing cached before this version is known to be valid
		}
		e.version = v
		r.Version, r.OldVersion = v, old
	} else {
		r.Version, r.OldVersion = e.version, e.version
	}
	h := e.addHolder(w.client)
	h.flags &^= fFenced
	if w.mode == Write {
		if h.writers < math.MaxUint32 {
			h.writers++
		}
	} else if h.readers < math.MaxUint32 {
		h.readers++
	}
	e.st = e.derive(t, nil)
	r.CacheEnabled = e.st != WriteShared && m.verified(w.client) && t >= m.overflowUntil.Load() &&
		(w.recallSeen == 0 || w.since >= w.recallSeen+m.backoff || w.recallOwn)
	if oc := e.call(w.client); oc != nil && oc.mode&Invalidate != 0 && oc.mode != Relinquish {
		// An invalidation of this client is in flight: its answer must not
		// cancel what this reply grants.
		r.CacheEnabled = false
	}
	if r.CacheEnabled {
		h.flags |= fCaching
		if h.writers > 0 {
			h.flags |= fDirty // a caching writer, whatever this open's mode
		}
	} else {
		h.flags &^= fCaching
	}
	return Proceed, r, true
}

func (m *Machine) verified(c ClientID) bool {
	m.cmu.Lock()
	defer m.cmu.Unlock()
	cl := m.clients[c]
	return cl != nil && cl.verified
}

// callback sends a callback of mode to c about e unless one is already out to c
// (one at a time per client and file: when it is answered the queue runs again
// and sends whatever is still needed), and reports whether it did. A recall
// starts the file's back-off.
func (m *Machine) callback(s *shard, e *entry, t int64, c ClientID, mode CallbackMode, recall bool, out *[]Action) bool {
	if e.call(c) != nil {
		return false
	}
	s.markBusy(e)
	seq := m.seq.Add(1)
	e.pend.calls = append(e.pend.calls, outCall{seq: seq, client: c, mode: mode, emitted: t})
	if recall {
		e.recallAt = t
	}
	m.n.callbacks[mode].Add(1)
	*out = append(*out, Action{Kind: ActCallback, Callback: Callback{
		File: e.key, Handle: []byte(e.handle), Client: c, Mode: mode, Seq: seq,
	}})
	return true
}

// tidy asks for the file's lease to be taken or released when whether a
// client may hold dirty blocks of it changed (ActLease), and drops an entry
// that records nothing: no holder, nothing in flight, no version worth
// keeping.
func (m *Machine) tidy(s *shard, e *entry, out *[]Action) {
	if want := otherWith(e, noClient, fDirty|fPinned); want != e.leased {
		e.leased = want
		*out = append(*out, Action{Kind: ActLease, File: e.key, Handle: []byte(e.handle), Take: want})
	}
	if e.prev != nil && e.pend == nil && len(e.holders) == 0 && e.version == 0 {
		s.remove(e)
	}
}

// getattr applies a GETATTR by client c. Unlike the other plain accesses it
// records nothing, not even an entry for a file the table does not know (most
// GETATTRs are of files nobody caches): it only waits, in the file's queue, for
// every other client that may hold dirty blocks to write them back, so that
// the size and times it returns include every write a client acknowledged
// before the GETATTR arrived. A fenced client is not refused: attributes are
// not the data the fence protects.
func (m *Machine) getattr(s *shard, e *entry, t int64, req ReqID, c ClientID) (Verdict, []Action) {
	if e == nil {
		return Proceed, nil
	}
	if h := e.holder(c); h.covered(AccessGetattr) && !pinnedOther(e, c) {
		return Proceed, nil
	}
	queued := e.pend != nil && len(e.pend.waiters) > 0
	if !queued && !otherDirty(e, c) {
		return Proceed, nil
	}
	var out []Action
	e.settle(t)
	v, _ := m.admit(s, e, t, waiter{req: req, client: c, access: AccessGetattr, since: t, seq: m.seq.Load()}, &out)
	return v, out
}

// tryGetattr applies a parked GETATTR: it goes on once each other client that
// may hold dirty blocks has answered a write-back callback sent after it
// arrived (or holds nothing any more); until then it asks them, with
// CB_WRITEBACK, which leaves their caching as it is.
func (m *Machine) tryGetattr(s *shard, e *entry, t int64, w *waiter, out *[]Action) (Verdict, OpenReply, bool) {
	if m.askWriteback(s, e, t, w, fDirty, out) {
		return Wait, OpenReply{}, false
	}
	return Proceed, OpenReply{}, true
}

// askWriteback asks every holder other than w's client with flag set that
// has not answered a write-back since w arrived for one (CB_WRITEBACK), and
// reports whether w must wait for them.
func (m *Machine) askWriteback(s *shard, e *entry, t int64, w *waiter, flag uint8, out *[]Action) bool {
	blocked := false
	for i := range e.holders {
		h := &e.holders[i]
		if h.client == w.client || h.flags&flag == 0 || h.wbSeq > w.seq {
			continue
		}
		blocked = true
		mode := Writeback
		if h.flags&fRepinned != 0 {
			// Pinned by a reclaim, on the client's word that it caches:
			// one that is not pinned at its end stops caching before it
			// answers (or becomes pinned), so both ends agree.
			mode = WritebackInvalidate
		}
		m.callback(s, e, t, h.client, mode, false, out)
	}
	return blocked
}

// noClient is no client's id: otherWith(e, noClient, flag) asks about every
// holder. The driver never interns it.
const noClient = ^ClientID(0)

// otherWith reports whether a client other than c holds e with one of flag's
// bits set (a fenced holder holds nothing).
func otherWith(e *entry, c ClientID, flag uint8) bool {
	for i := range e.holders {
		if h := &e.holders[i]; h.client != c && h.flags&flag != 0 && h.flags&fFenced == 0 {
			return true
		}
	}
	return false
}

// otherDirty reports whether a client other than c may hold dirty blocks of e.
func otherDirty(e *entry, c ClientID) bool { return otherWith(e, c, fDirty) }

// pinnedBlock asks every pinned holder other than w's client that has not
// answered a write-back since w arrived for one, and reports whether w must
// wait for it. A pinned holder's kernel writes into its cache without the
// client seeing each write, so nothing else keeps another client from
// reading (or writing under) bytes the holder wrote before the request came:
// every request waits, covered ones included. The holder's own requests do
// not, nor the WRITEs and COMMITs that answer the callback (section 11).
func (m *Machine) pinnedBlock(s *shard, e *entry, t int64, w *waiter, out *[]Action) bool {
	return m.askWriteback(s, e, t, w, fPinned, out)
}

// pinnedOther reports whether a client other than c is a pinned holder of e.
func pinnedOther(e *entry, c ClientID) bool { return otherWith(e, c, fPinned) }
