package state

import (
	"math"
	"time"
)

// lookupOrInsert returns f's entry, making one if there is room. Near the
// shard's bound it first reclaims (makeRoom); at the bound it returns nil.
func (m *Machine) lookupOrInsert(s *shard, t int64, f FileID, handle []byte, out *[]Action) *entry {
	if e := s.files[f]; e != nil {
		return e
	}
	if len(s.files) >= s.high {
		m.makeRoom(s, t, out)
	}
	if len(s.files) >= s.cap {
		return nil
	}
	return s.insert(t, f, handle)
}

func (s *shard) insert(t int64, f FileID, handle []byte) *entry {
	e := &entry{key: f, handle: string(handle), touched: t}
	s.files[f] = e
	s.pushFront(e)
	return e
}

// makeRoom examines up to ReclaimScan entries from the least recently used end
// (section 4.3.1 and 6.2): entries that record nothing the protocol needs
// (closed, or only expired plain accesses and fences) are dropped at once; the
// last writer of a CLOSED_DIRTY file is asked to write back (the entry is
// dropped by a later pass, once it is CLOSED); the clients of an open file idle
// for RelinquishIdle are asked to RELINQUISH it (a delayed close). Entries still
// in use get a second chance at the other end of the list.
func (m *Machine) makeRoom(s *shard, t int64, out *[]Action) {
	e := s.lru.prev
	for n := 0; n < m.cfg.ReclaimScan && e != &s.lru && len(s.files) >= s.high; n++ {
		newer := e.prev
		if e.pend != nil {
			e = newer
			continue // callbacks are out on it already
		}
		e.settle(t)
		switch {
		case e.onlyFences(t):
			m.n.fencesForgotten.Add(uint64(len(e.holders)))
			m.n.reclaimDrops.Add(1)
			s.remove(e)
		case e.st == ClosedDirty:
			for i := range e.holders {
				if e.holders[i].flags&fDirty != 0 {
					m.n.reclaimCallbacks.Add(1)
					m.callback(s, e, t, e.holders[i].client, Writeback, false, out)
				}
			}
		case t-e.touched >= m.idle && !e.plainHeld(t):
			for i := range e.holders {
				if h := &e.holders[i]; h.opens() || h.flags&fDirty != 0 {
					m.n.reclaimCallbacks.Add(1)
					m.callback(s, e, t, h.client, Relinquish, false, out)
				}
			}
		default:
			s.unlink(e)
			s.pushFront(e)
		}
		e = newer
	}
}

func (e *entry) plainHeld(t int64) bool {
	for i := range e.holders {
		if e.holders[i].plainActive(t) {
			return true
		}
	}
	return false
}

// Reclaim rebuilds one client's record of one file from what the client reports
// after a server restart (Sprite's recovery: the clients together know the
// state). It ignores the table bound and sends no callback; the reports are
// trusted. Versions the clients report are never issued again.
func (m *Machine) Reclaim(now time.Time, a ReclaimArgs) {
	t := m.t(now)
	s := m.shard(a.File)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.files[a.File]
	if e == nil {
		e = s.insert(t, a.File, a.Handle)
	}
	h := e.addHolder(a.Client)
	h.readers = uint32(min(uint64(h.readers)+uint64(a.Readers), math.MaxUint32))
	h.writers = uint32(min(uint64(h.writers)+uint64(a.Writers), math.MaxUint32))
	if a.Caching {
		h.flags |= fCaching
	}
	// A caching writer may write into its cache at any moment, so it counts
	// as dirty whatever it reports, as at an OPEN (applyOpen): a client that
	// reclaimed a write open before writing anything would otherwise close
	// with dirty data the table does not know of, and nobody would call it
	// back.
	if a.Dirty || a.Caching && a.Writers > 0 {
		h.flags |= fDirty
	}
	repin(e)
	if a.Version > e.version {
		e.version = a.Version
	}
	m.vmu.Lock()
	if a.Version >= m.verNext {
		m.verNext = a.Version + 1
	}
	m.vmu.Unlock()
	s.touch(e, t)
	e.settle(t)
}

// repin records as pinned the reclaimed caching writer of e that shares the
// file with another client's open. Before the restart such a writer could
// only have been a pinned holder (Table 1 takes caching from a writer that
// another client opens beside, unless it answered CB_PINNED), which reports
// itself caching and dirty (docs/protocol.md 4.5, 10.1). Recording it pinned at
// once closes the window in which the other client's covered READs and WRITEs
// would be served ahead of what the holder's kernel wrote into its cache and
// has not sent. Its first write-back callback also invalidates (fRepinned,
// askWriteback): a holder that was not pinned after all stops caching and
// answers CB_OK (then it is pinned no more: CallbackDone), so the two ends
// agree. Reports arrive in any order, so each one looks at the whole entry.
//
// Two clients that both report caching the file for writing contradict each
// other (one of them was fenced and the restart forgot it): neither is
// pinned, since two pinned holders would each wait for the other's
// write-back (section 11); they stay as reported.
func repin(e *entry) {
	var w *holder
	n := 0
	for i := range e.holders {
		h := &e.holders[i]
		if h.writers > 0 && h.flags&fFenced == 0 && h.flags&(fCaching|fRepinned) != 0 {
			w, n = h, n+1
		}
	}
	if n > 1 {
		for i := range e.holders {
			if h := &e.holders[i]; h.flags&fRepinned != 0 {
				h.flags = h.flags&^(fPinned|fRepinned) | fCaching
			}
		}
		return
	}
	if n == 0 || w.flags&fRepinned != 0 {
		return
	}
	for i := range e.holders {
		if o := &e.holders[i]; o != w && o.opens() && o.flags&fFenced == 0 {
			w.flags = w.flags&^fCaching | fDirty | fPinned | fRepinned
			return
		}
	}
}
