package lockmgr

import "slices"

// Holders returns the locks held on k (each owner's merged records), by
// start then owner. Acquiring grants count as held.
func (m *Machine) Holders(k FileKey) []Lock {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.files[k]
	if f == nil {
		return nil
	}
	var out []Lock
	for o, spans := range f.held {
		for _, s := range spans {
			out = append(out, Lock{o, s.t, s.r})
		}
	}
	slices.SortFunc(out, func(a, b Lock) int {
		switch {
		case a.Range.Start != b.Range.Start:
			if a.Range.Start < b.Range.Start {
				return -1
			}
			return 1
		case a.Owner.less(b.Owner):
			return -1
		case b.Owner.less(a.Owner):
			return 1
		}
		return 0
	})
	return out
}

// Waiters returns the requests waiting on k, in arrival order.
func (m *Machine) Waiters(k FileKey) []LockArgs {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.files[k]
	if f == nil {
		return nil
	}
	out := make([]LockArgs, len(f.queue))
	for i, q := range f.queue {
		out[i] = q.LockArgs
	}
	return out
}

// Count is what client c has against its bound: lock records, two per
// waiting request, one per share reservation.
func (m *Machine) Count(c ClientID) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.count[c]
}

// Stats returns the counters and a census.
func (m *Machine) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.n
	s.Files = len(m.files)
	for _, f := range m.files {
		for _, spans := range f.held {
			s.Records += len(spans)
		}
		s.Waiters += len(f.queue)
		s.Shares += len(f.shares)
	}
	return s
}
