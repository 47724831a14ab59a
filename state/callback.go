package state

import "time"

// CallbackSent reports that an ActCallback was written to the client's
// connection: its deadline (CallbackTimeout) starts now, not when it was queued.
func (m *Machine) CallbackSent(now time.Time, cb Callback) {
	s := m.shard(cb.File)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.files[cb.File]; e != nil {
		if oc := e.call(cb.Client); oc != nil && oc.seq == cb.Seq && !oc.sent {
			oc.sent, oc.at = true, m.t(now)
		}
	}
}

// CallbackDone reports how a callback ended. Requests parked on the file go
// on. A late answer (to a callback that already timed out, or whose client
// was fenced meanwhile) is applied only where that is safe: TreatAsClosed and
// Stale say what the client holds when it answers - no open, no dirty block
// (it answers so only with no OPEN of the file in flight, and the driver
// applies an answer before anything the client sent after it) - so its opens
// are dropped as they would have been in time; a fence stands. A late OK or
// Pinned is ignored: the fence, if any, stands, and a client that held
// nothing keeps holding nothing.
func (m *Machine) CallbackDone(now time.Time, cb Callback, o Outcome) []Action {
	t := m.t(now)
	s := m.shard(cb.File)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.files[cb.File]
	if e == nil {
		return nil
	}
	oc := e.call(cb.Client)
	if oc == nil || oc.seq != cb.Seq {
		return m.lateAnswer(s, e, t, cb, o)
	}
	mode, dirtyClose := oc.mode, oc.dirtyClose
	dropCall(e, cb.Client)
	if o >= numOutcomes {
		o = Failed
	}
	m.n.outcomes[o].Add(1)
	var out []Action
	h := e.holder(cb.Client)
	if h != nil && mode&Invalidate != 0 && mode != Relinquish && o != Failed {
		h.flags &^= fOwed // whatever the answer, the client's cache is gone
	}
	switch {
	case o == Failed:
		m.fence(e, cb.Client, &out)
	case h == nil:
	case o == Pinned && h.writers > 0 && h.flags&fFenced == 0:
		h.flags = h.flags&^(fCaching|fRepinned) | fDirty | fPinned
		h.wbSeq = cb.Seq
	case o == OK || o == Pinned: // Pinned without a write open: nothing keeps it writing
		wasPinned := h.flags&fPinned != 0
		h.flags &^= fPinned | fRepinned
		inval := mode&Invalidate != 0 && mode != Relinquish
		if inval {
			h.flags &^= fCaching
		}
		if mode != Invalidate {
			h.wbSeq = cb.Seq
		}
		// A client that still writes into its cache may be dirty again at
		// once. One that CLOSEd dirty while the callback was out may have
		// written into its cache after its write-back began (a callback
		// that does not invalidate lets it), and closed before answering:
		// it stays the last writer until a CLOSE with dirty = FALSE, or the
		// answer to a later callback, says otherwise (docs/protocol.md 5.1).
		// Not so a pinned holder: it answers CB_OK only once nothing
		// writes into its cache any more (it does not cache the file and
		// its kernel's writers are gone), having sent all they wrote, so
		// its OK covers everything, as after an invalidating mode
		// (docs/protocol.md 10.1). Kept dirty, it would stay the last
		// writer of a file others have open, pinned no more: their
		// covered READs would go on without its write-back.
		if mode != Invalidate && (h.writers == 0 || inval || h.flags&fCaching == 0) && (inval || wasPinned || !dirtyClose) {
			h.flags &^= fDirty
		}
		if mode == Relinquish {
			s.touch(e, t) // it is really in use: ask others first next time
		}
	default: // TreatAsClosed, Stale: the client holds nothing of the file
		h.readers, h.writers = 0, 0
		h.flags &^= fCaching | fDirty | fPinned | fRepinned
	}
	e.settle(t)
	m.sendOwed(s, e, t, &out)
	m.run(s, e, t, &out)
	return out
}

// lateAnswer applies a late TreatAsClosed or Stale (see CallbackDone).
func (m *Machine) lateAnswer(s *shard, e *entry, t int64, cb Callback, o Outcome) []Action {
	if o != TreatAsClosed && o != Stale {
		return nil
	}
	h := e.holder(cb.Client)
	if h == nil || h.flags&fFenced != 0 || (!h.opens() && h.flags&(fCaching|fDirty|fPinned) == 0) {
		return nil
	}
	m.n.lateAnswers.Add(1)
	h.readers, h.writers = 0, 0
	h.flags &^= fCaching | fDirty | fPinned | fRepinned
	var out []Action
	s.touch(e, t)
	e.settle(t)
	m.run(s, e, t, &out)
	return out
}

func dropCall(e *entry, c ClientID) {
	calls := e.pend.calls
	for i := range calls {
		if calls[i].client == c {
			copy(calls[i:], calls[i+1:])
			calls[len(calls)-1] = outCall{}
			e.pend.calls = calls[:len(calls)-1]
			return
		}
	}
}

// fence handles a client that did not answer a callback about e: its opens are
// forgotten, whatever dirty blocks it holds are given up, and its requests on
// the file are refused until it opens it again (section 3.2) - an OPEN it sent
// before the fence included, since it does not know of the fence yet. Its
// callback path must answer a probe before it is granted caching anywhere again.
func (m *Machine) fence(e *entry, c ClientID, out *[]Action) {
	m.pathFailed(c, out)
	h := e.holder(c)
	if h == nil || (!h.opens() && h.flags&(fDirty|fCaching) == 0) {
		return // it holds nothing the fence would protect
	}
	h.readers, h.writers, h.plainUntil = 0, 0, 0
	h.flags = fFenced
	m.n.fencings.Add(1)
	*out = append(*out, Action{Kind: ActFence, Client: c, File: e.key})
	if e.pend == nil {
		return
	}
	ws := e.pend.waiters[:0]
	for _, w := range e.pend.waiters {
		if w.client != c {
			ws = append(ws, w)
			continue
		}
		m.n.refused.Add(1)
		*out = append(*out, Action{Kind: ActRefuse, Req: w.req})
	}
	clear(e.pend.waiters[len(ws):])
	e.pend.waiters = ws
}

// Tick is the sweeper: the driver calls it periodically (every few hundred
// milliseconds). Callbacks past their deadline count as failed (their clients
// are fenced and the requests waiting on them go on); parked requests that have
// waited JukeboxAfter are answered NFS3ERR_JUKEBOX.
func (m *Machine) Tick(now time.Time) []Action {
	return m.everyBusy(now, func(s *shard, e *entry, t int64, out *[]Action) {
		for i := 0; e.pend != nil && i < len(e.pend.calls); {
			oc := e.pend.calls[i]
			deadline := oc.emitted + m.queueTimeout + m.cbTimeout
			if oc.sent {
				deadline = oc.at + m.cbTimeout
			}
			if t < deadline {
				i++
				continue
			}
			dropCall(e, oc.client)
			m.n.timeouts.Add(1)
			m.n.outcomes[Failed].Add(1)
			m.fence(e, oc.client, out)
		}
		e.settle(t)
		m.run(s, e, t, out)
		if e.pend == nil {
			return
		}
		ws := e.pend.waiters[:0]
		for _, w := range e.pend.waiters {
			if w.patient || t-w.since < m.jukebox {
				ws = append(ws, w)
				continue
			}
			m.n.jukebox.Add(1)
			*out = append(*out, Action{Kind: ActJukebox, Req: w.req})
		}
		clear(e.pend.waiters[len(ws):])
		e.pend.waiters = ws
	})
}

// ClientGone forgets a client (its connection and registration are gone for
// good, or it registered again after a reboot and so holds no cache): its
// opens, its last-writer records, its fences, its parked requests (ActAbandon)
// and the callbacks out to it (as Stale). It scans the table.
func (m *Machine) ClientGone(now time.Time, c ClientID) []Action {
	m.cmu.Lock()
	delete(m.clients, c)
	m.cmu.Unlock()
	t := m.t(now)
	var out []Action
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		for e := s.lru.next; e != &s.lru; {
			older := e.next
			changed := false
			if e.pend != nil {
				ws := e.pend.waiters[:0]
				for _, w := range e.pend.waiters {
					if w.client == c {
						m.n.abandoned.Add(1)
						out = append(out, Action{Kind: ActAbandon, Req: w.req})
						changed = true
						continue
					}
					ws = append(ws, w)
				}
				clear(e.pend.waiters[len(ws):])
				e.pend.waiters = ws
				if e.call(c) != nil {
					dropCall(e, c)
					m.n.outcomes[Stale].Add(1)
					changed = true
				}
			}
			if h := e.holder(c); h != nil {
				*h = holder{client: c}
				changed = true
			}
			if changed {
				e.settle(t)
				m.run(s, e, t, &out)
			}
			e = older
		}
		s.mu.Unlock()
	}
	return out
}
