package state

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Machine is the state table. It is safe for concurrent use: each shard of the
// table has its own mutex, held only while an input is applied (never across I/O,
// which the machine does not do), so a transition waiting for callbacks on one
// file blocks nothing else.
type Machine struct {
	cfg   Config
	epoch time.Time
	// Durations of cfg, as nanoseconds on the machine's time line.
	hold, cbTimeout, queueTimeout, jukebox, backoff, idle int64

	shards []shard

	cmu     sync.Mutex
	clients map[ClientID]*client // guarded by cmu

	vmu       sync.Mutex
	verNext   uint64 // next version to issue; guarded by vmu
	verLimit  uint64 // highest version durably reserved; guarded by vmu
	reserving bool   // an ActReserveVersions is out; guarded by vmu

	seq           atomic.Uint64 // callback sequence numbers
	overflowUntil atomic.Int64  // no caching granted before this time (a plain access went unrecorded)
	n             counters
}

// client is what the machine knows of a protocol client. Guarded by Machine.cmu.
type client struct {
	verified bool // its callback path answered (a NULL) since the last failure
	probing  bool // an ActProbe is out
}

type counters struct {
	callbacks                        [numCallbackModes]atomic.Uint64
	outcomes                         [numOutcomes]atomic.Uint64
	timeouts, fencings, probes       atomic.Uint64
	opens, closes, accesses          atomic.Uint64
	waits, jukebox, refused          atomic.Uint64
	abandoned, tableFull, unrecorded atomic.Uint64
	reclaimDrops, reclaimCallbacks   atomic.Uint64
	fencesForgotten, reservations    atomic.Uint64
	lateAnswers                      atomic.Uint64
	changes                          atomic.Uint64
}

// shard is one independently locked part of the table.
type shard struct {
	mu    sync.Mutex
	files map[FileID]*entry // guarded by mu
	// lru is the sentinel of the recency list: lru.next is the most recently used
	// entry, lru.prev the least. Guarded by mu.
	lru entry
	// busy lists the entries with parked requests or callbacks out, for Tick.
	// Guarded by mu.
	busy      []*entry
	cap, high int
}

// New returns a Machine whose time line starts at now.
func New(cfg Config, now time.Time) *Machine {
	cfg.defaults()
	m := &Machine{
		cfg:          cfg,
		epoch:        now.Add(-time.Second), // so that 0 on the time line means "never"
		hold:         int64(cfg.PlainHold),
		cbTimeout:    int64(cfg.CallbackTimeout),
		queueTimeout: int64(cfg.QueueTimeout),
		jukebox:      int64(cfg.JukeboxAfter),
		backoff:      int64(cfg.RecallBackoff),
		idle:         int64(cfg.RelinquishIdle),
		shards:       make([]shard, cfg.Shards),
		clients:      map[ClientID]*client{},
		verNext:      cfg.VersionBase + 1,
		verLimit:     cfg.VersionBase,
	}
	per := (cfg.MaxEntries + cfg.Shards - 1) / cfg.Shards
	for i := range m.shards {
		s := &m.shards[i]
		s.files = map[FileID]*entry{}
		s.lru.next, s.lru.prev = &s.lru, &s.lru
		s.cap = per
		s.high = per * cfg.HighWater / 100
	}
	return m
}

// t places now on the machine's time line.
func (m *Machine) t(now time.Time) int64 { return int64(now.Sub(m.epoch)) }

func (m *Machine) wall(t int64) time.Time { return m.epoch.Add(time.Duration(t)) }

func (m *Machine) shard(f FileID) *shard {
	h := binary.LittleEndian.Uint64(f[0:8]) ^ binary.LittleEndian.Uint64(f[8:16])*0x9e3779b97f4a7c15
	h ^= h >> 29
	return &m.shards[(h*0xbf58476d1ce4e5b9>>32)%uint64(len(m.shards))]
}

// Register records a protocol client (its REGISTER call) and asks the driver to
// probe its callback path: no caching is granted to it until the probe answered.
func (m *Machine) Register(now time.Time, c ClientID) []Action {
	var out []Action
	m.cmu.Lock()
	cl := m.clients[c]
	if cl == nil {
		cl = &client{}
		m.clients[c] = cl
	}
	cl.verified = false
	m.probeLocked(c, cl, &out)
	m.cmu.Unlock()
	return out
}

// CallbackPathVerified reports the answer to an ActProbe.
func (m *Machine) CallbackPathVerified(now time.Time, c ClientID, ok bool) {
	m.cmu.Lock()
	if cl := m.clients[c]; cl != nil {
		cl.probing = false
		cl.verified = ok
	}
	m.cmu.Unlock()
}

// PathVerified reports whether c's callback path answered a probe since its
// last failure (caching, and directory promises, are granted only then).
func (m *Machine) PathVerified(c ClientID) bool {
	m.cmu.Lock()
	defer m.cmu.Unlock()
	cl := m.clients[c]
	return cl != nil && cl.verified
}

// PathFailed marks c's callback path unverified after a callback outside
// the table failed (a directory promise's break, state.Dirs): no caching is
// granted to c until a probe (the ActProbe returned, unless one is out)
// answers.
func (m *Machine) PathFailed(now time.Time, c ClientID) []Action {
	var out []Action
	m.pathFailed(c, &out)
	return out
}

// probeLocked asks for a probe of c's callback path unless one is out. cmu held.
func (m *Machine) probeLocked(c ClientID, cl *client, out *[]Action) {
	if cl.probing {
		return
	}
	cl.probing = true
	m.n.probes.Add(1)
	*out = append(*out, Action{Kind: ActProbe, Client: c})
}

// protocolClient registers c on its first OPEN if REGISTER did not, and reports
// whether caching may be granted to it.
func (m *Machine) protocolClient(c ClientID, out *[]Action) (verified bool) {
	m.cmu.Lock()
	defer m.cmu.Unlock()
	cl := m.clients[c]
	if cl == nil {
		cl = &client{}
		m.clients[c] = cl
	}
	if !cl.verified {
		m.probeLocked(c, cl, out)
	}
	return cl.verified
}

// pathFailed marks c's callback path unverified after a failed callback.
func (m *Machine) pathFailed(c ClientID, out *[]Action) {
	m.cmu.Lock()
	if cl := m.clients[c]; cl != nil {
		cl.verified = false
		m.probeLocked(c, cl, out)
	}
	m.cmu.Unlock()
}

// newVersion issues a version, or asks for a block to be reserved and reports
// false when none is left. Called with a shard lock held (lock order: shard, vmu).
func (m *Machine) newVersion(out *[]Action) (uint64, bool) {
	m.vmu.Lock()
	defer m.vmu.Unlock()
	if m.verNext > m.verLimit {
		m.reserveLocked(out)
		return 0, false
	}
	v := m.verNext
	m.verNext++
	if m.verLimit-v < m.cfg.VersionBlock/2 {
		m.reserveLocked(out)
	}
	return v, true
}

func (m *Machine) reserveLocked(out *[]Action) {
	if m.reserving {
		return
	}
	m.reserving = true
	m.n.reservations.Add(1)
	*out = append(*out, Action{Kind: ActReserveVersions, Through: max(m.verLimit, m.verNext-1) + m.cfg.VersionBlock})
}

// VersionsReserved reports the outcome of an ActReserveVersions: on success,
// versions up to through may be issued. Requests waiting for a version go on.
func (m *Machine) VersionsReserved(now time.Time, through uint64, err error) []Action {
	m.vmu.Lock()
	m.reserving = false
	if err == nil && through > m.verLimit {
		m.verLimit = through
	}
	m.vmu.Unlock()
	if err != nil {
		return nil
	}
	return m.everyBusy(now, nil)
}

// everyBusy runs fn (if any) and then the queue on every entry with parked
// requests or callbacks out.
func (m *Machine) everyBusy(now time.Time, fn func(s *shard, e *entry, t int64, out *[]Action)) []Action {
	t := m.t(now)
	var out []Action
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		for _, e := range append([]*entry(nil), s.busy...) {
			if fn != nil {
				fn(s, e, t, &out)
			}
			m.run(s, e, t, &out)
		}
		s.mu.Unlock()
	}
	return out
}

// Fenced reports whether c's requests on f are to be refused.
func (m *Machine) Fenced(c ClientID, f FileID) bool {
	s := m.shard(f)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.files[f]; e != nil {
		if h := e.holder(c); h != nil {
			return h.flags&fFenced != 0
		}
	}
	return false
}

// Lookup returns a snapshot of f's entry.
func (m *Machine) Lookup(now time.Time, f FileID) (FileInfo, bool) {
	s := m.shard(f)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.files[f]
	if e == nil {
		return FileInfo{}, false
	}
	t := m.t(now)
	fi := FileInfo{State: e.derive(t, nil), Version: e.version}
	for i := range e.holders {
		h := &e.holders[i]
		if h.empty(t) {
			continue // an expired plain access, not yet swept
		}
		hi := HolderInfo{
			Client: h.client, Readers: h.readers, Writers: h.writers,
			Caching: h.flags&fCaching != 0, Dirty: h.flags&fDirty != 0, Fenced: h.flags&fFenced != 0, Pinned: h.flags&fPinned != 0,
		}
		if h.plainActive(t) {
			hi.Plain, hi.PlainWrite, hi.PlainUntil = true, h.flags&fPlainWrite != 0, m.wall(h.plainUntil)
		}
		fi.Holders = append(fi.Holders, hi)
	}
	if e.pend != nil {
		fi.Waiting, fi.Callbacks = len(e.pend.waiters), len(e.pend.calls)
	}
	return fi, true
}

// Stats returns the counters and a census of the table (a scan: call it at
// scrape intervals, not per request).
func (m *Machine) Stats(now time.Time) Stats {
	t := m.t(now)
	var st Stats
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		st.Entries += len(s.files)
		for _, e := range s.files {
			st.ByState[e.derive(t, nil)]++
		}
		s.mu.Unlock()
	}
	for i := range st.Callbacks {
		st.Callbacks[i] = m.n.callbacks[i].Load()
	}
	for i := range st.Outcomes {
		st.Outcomes[i] = m.n.outcomes[i].Load()
	}
	st.Timeouts, st.Fencings, st.Probes = m.n.timeouts.Load(), m.n.fencings.Load(), m.n.probes.Load()
	st.Opens, st.Closes, st.Accesses = m.n.opens.Load(), m.n.closes.Load(), m.n.accesses.Load()
	st.Waits, st.Jukebox, st.Refused = m.n.waits.Load(), m.n.jukebox.Load(), m.n.refused.Load()
	st.Abandoned, st.TableFull, st.Unrecorded = m.n.abandoned.Load(), m.n.tableFull.Load(), m.n.unrecorded.Load()
	st.ReclaimDrops, st.ReclaimCallbacks = m.n.reclaimDrops.Load(), m.n.reclaimCallbacks.Load()
	st.FencesForgotten, st.Reservations = m.n.fencesForgotten.Load(), m.n.reservations.Load()
	st.LateAnswers = m.n.lateAnswers.Load()
	st.Changes = m.n.changes.Load()
	return st
}

func (m *Machine) String() string {
	return fmt.Sprintf("state.Machine{%d shards of %d entries}", len(m.shards), m.shards[0].cap)
}
