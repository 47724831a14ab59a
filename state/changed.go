package state

import "time"

// Changed applies a change to f made outside the protocol: by a local process
// on the server machine, writing the exported file directly (the driver learns
// of it from the file system's change notifications, and must not report the
// server's own changes, which the table already accounts for). Nobody's cache
// of f survives it: the version is dropped, so the next OPEN takes a fresh one
// and returns it twice (as after a plain change, section 6.1), and every
// client that may cache f is called back at once - INVALIDATE, or
// WRITEBACK_INVALIDATE from a client that may hold dirty blocks (they go over
// the change: the local process is not a client that could have called them
// back first) - so that a client with f open sees the change without
// reopening it. A client with another callback out about f is owed its
// invalidation: it is sent when that callback ends. Changed never waits and
// parks nothing.
func (m *Machine) Changed(now time.Time, f FileID) []Action {
	t := m.t(now)
	s := m.shard(f)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.files[f]
	if e == nil {
		return nil // no version issued, nobody caches it
	}
	var out []Action
	m.changedLocked(s, e, t, &out)
	return out
}

// ChangedAll is Changed for every file in the table: changes made outside the
// protocol may have gone unreported (the driver's change notifications were
// lost). It scans the table.
func (m *Machine) ChangedAll(now time.Time) []Action { return m.ChangedWhere(now, nil) }

// ChangedWhere is Changed for every file in the table whose handle match
// accepts (nil: every file): the files of an export the server stopped
// serving, whose clients must stop using their caches of them. It scans the
// table.
func (m *Machine) ChangedWhere(now time.Time, match func(handle []byte) bool) []Action {
	t := m.t(now)
	var out []Action
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		for e := s.lru.next; e != &s.lru; e = e.next {
			if match == nil || match([]byte(e.handle)) {
				m.changedLocked(s, e, t, &out)
			}
		}
		s.mu.Unlock()
	}
	return out
}

// changedLocked applies a change outside the protocol to e. Its shard's mu
// is held.
func (m *Machine) changedLocked(s *shard, e *entry, t int64, out *[]Action) {
	m.n.changes.Add(1)
	e.version = 0
	for i := range e.holders {
		h := &e.holders[i]
		if h.flags&fFenced == 0 && h.flags&(fCaching|fDirty|fPinned) != 0 {
			h.flags |= fOwed
		}
	}
	m.sendOwed(s, e, t, out)
}

// sendOwed sends the invalidations owed after a change outside the protocol
// (Changed) to the clients that have no callback out about e.
func (m *Machine) sendOwed(s *shard, e *entry, t int64, out *[]Action) {
	for i := range e.holders {
		h := &e.holders[i]
		if h.flags&fOwed == 0 || e.call(h.client) != nil {
			continue
		}
		mode := Invalidate
		if h.flags&(fDirty|fPinned) != 0 {
			mode = WritebackInvalidate
		}
		m.callback(s, e, t, h.client, mode, true, out)
	}
}

// LeaseWanted reports whether the last ActLease for f took its lease (a
// client may hold dirty blocks of it): the driver, which could not take it or
// gave it up to a local open, tries again while it is.
func (m *Machine) LeaseWanted(f FileID) bool {
	s := m.shard(f)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.files[f]
	return e != nil && e.leased
}

// SyncLease asks for f's lease to be taken or released (ActLease) if whether
// a client may hold dirty blocks of f changed by an input that returns no
// actions (Reclaim).
func (m *Machine) SyncLease(f FileID) []Action {
	s := m.shard(f)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.files[f]
	if e == nil {
		return nil
	}
	var out []Action
	m.tidy(s, e, &out)
	return out
}

// UnsettledWhere counts the files whose handle match accepts that have a
// callback out, or a client that may hold dirty blocks of them and is not
// fenced: after ChangedWhere, the files whose clients have not yet written
// back (the server waits for them before it stops serving the files, so that
// no client's delayed writes are lost to it). It scans the table.
func (m *Machine) UnsettledWhere(now time.Time, match func(handle []byte) bool) int {
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		for e := s.lru.next; e != &s.lru; e = e.next {
			if !match([]byte(e.handle)) {
				continue
			}
			unsettled := e.pend != nil && len(e.pend.calls) > 0
			for j := range e.holders {
				h := &e.holders[j]
				unsettled = unsettled || h.flags&fFenced == 0 && h.flags&(fDirty|fPinned) != 0
			}
			if unsettled {
				n++
			}
		}
		s.mu.Unlock()
	}
	return n
}
