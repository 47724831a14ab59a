package lockmgr

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// Machine is the lock manager. It is safe for concurrent use: one mutex, held
// only while an input is applied (the machine does no I/O), because deadlock
// detection walks owners across files.
type Machine struct {
	mu        sync.Mutex
	cfg       Config
	graceEnd  time.Time
	graceHeld bool // a queue run was held back by the grace period
	seq       uint64

	files   map[FileKey]*file
	reqs    map[ReqID]*request // every live request
	waiting map[Owner][]*request
	count   map[ClientID]int // records + 2 per waiter + shares, for the bound
	n       Stats
}

// reqState is where a live request is.
type reqState uint8

const (
	stWaiting   reqState = iota // in its file's queue
	stAcquiring                 // granted here; its ActBacking (acquire) is out
	stNotifying                 // a waiter's grant: its ActGranted is out
)

type request struct {
	LockArgs
	f         *file
	seq       uint64 // arrival order
	st        reqState
	immediate bool      // acquiring for a Lock that BackingDone answers
	retryAt   time.Time // waiting: the backing file refused it; not tried before
	shadow    []span    // acquiring, notifying: the owner's spans in Range before the grant
	untouched []Range   // notifying: the parts of Range the owner has not changed since
	cancelled bool      // acquiring: back it out at BackingDone
}

type file struct {
	key      FileKey
	held     map[Owner][]span
	queue    []*request // waiting, in arrival order
	granting []*request // acquiring or notifying
	shares   map[Owner]share
}

type share struct {
	mode   ShareMode
	access ShareAccess
}

// Stats are the machine's counters and census.
type Stats struct {
	Granted, Denied, Blocked, Deadlocks, NoLocks, GraceDenied uint64
	WaitersGranted, BackingRefused, GrantsBackedOut, Cancels  uint64
	ClientsGone                                               uint64
	Files, Records, Waiters, Shares                           int
}

// New returns a Machine; with cfg.Grace it starts in its grace period at now.
func New(cfg Config, now time.Time) *Machine {
	cfg.defaults()
	m := &Machine{
		cfg:     cfg,
		files:   map[FileKey]*file{},
		reqs:    map[ReqID]*request{},
		waiting: map[Owner][]*request{},
		count:   map[ClientID]int{},
	}
	if cfg.Grace > 0 {
		m.graceEnd = now.Add(cfg.Grace)
	}
	return m
}

func (m *Machine) inGrace(now time.Time) bool { return now.Before(m.graceEnd) }

// InGrace reports whether the grace period is on at now.
func (m *Machine) InGrace(now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.inGrace(now)
}

// StartGrace starts (or extends or shortens) the grace period: until now+d
// only reclaims are granted, and waiters are not granted. A grace period
// shortened to end by now (d <= 0) grants at once what it held back, as
// EndGrace does, rather than leaving it to the next Tick.
func (m *Machine) StartGrace(now time.Time, d time.Duration) []Action {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.graceEnd = now.Add(d)
	if m.inGrace(now) || !m.graceHeld {
		return nil
	}
	m.graceHeld = false
	return m.runAll(now, nil)
}

// EndGrace ends the grace period and grants the waiters that can go.
func (m *Machine) EndGrace(now time.Time) []Action {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.graceEnd = time.Time{}
	m.graceHeld = false
	return m.runAll(now, nil)
}

// Tick grants what time makes grantable: waiters after the grace period
// ends, and waiters the backing file refused, again after LocalRetry. The
// driver calls it every few hundred milliseconds; it runs only the queues
// that time can have changed.
func (m *Machine) Tick(now time.Time) []Action {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.inGrace(now) {
		return nil
	}
	if m.graceHeld {
		m.graceHeld = false
		return m.runAll(now, nil)
	}
	return m.runWhere(now, nil, func(f *file) bool {
		return slices.ContainsFunc(f.queue, func(w *request) bool { return !w.retryAt.IsZero() && !now.Before(w.retryAt) })
	})
}

func (m *Machine) runAll(now time.Time, out []Action) []Action {
	return m.runWhere(now, out, func(*file) bool { return true })
}

func (m *Machine) runWhere(now time.Time, out []Action, which func(*file) bool) []Action {
	keys := make([]FileKey, 0, len(m.files))
	for k, f := range m.files {
		if len(f.queue) > 0 && which(f) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		f := m.files[k]
		m.run(f, now, &out)
		m.gc(f)
	}
	return out
}

func (m *Machine) file(k FileKey) *file {
	f := m.files[k]
	if f == nil {
		f = &file{key: k, held: map[Owner][]span{}, shares: map[Owner]share{}}
		m.files[k] = f
	}
	return f
}

// gc drops a file that records nothing.
func (m *Machine) gc(f *file) {
	if len(f.held) == 0 && len(f.queue) == 0 && len(f.granting) == 0 && len(f.shares) == 0 {
		delete(m.files, f.key)
	}
}

// setHeld replaces o's spans on f, keeping the client's count.
func (m *Machine) setHeld(f *file, o Owner, s []span) {
	m.count[o.Client] += len(s) - len(f.held[o])
	if len(s) == 0 {
		delete(f.held, o)
	} else {
		f.held[o] = s
	}
	m.dropCount(o.Client)
}

func (m *Machine) dropCount(c ClientID) {
	if m.count[c] == 0 {
		delete(m.count, c)
	}
}

// backing appends an ActBacking for o's change of r to t on f.
func (m *Machine) backing(f *file, o Owner, r Range, t LockType, req ReqID, acquire bool, out *[]Action) {
	*out = append(*out, Action{Kind: ActBacking, Req: req, File: f.key, Owner: o, Type: t, Range: r,
		Acquire: acquire, Last: len(f.held[o]) == 0})
}

// conflicts reports whether a lock (t, r) conflicts with held spans.
func conflicts(spans []span, t LockType, r Range) (span, bool) {
	for _, s := range spans {
		if s.r.overlaps(r) && (t == Write || s.t == Write) {
			return s, true
		}
	}
	return span{}, false
}

// heldConflict finds the first lock of another owner on f that conflicts with
// (t, r): held, or the shadow of an acquiring grant (what the owner held
// before, until the backing file has taken the new lock).
func (m *Machine) heldConflict(f *file, o Owner, t LockType, r Range) (Lock, bool) {
	var best Lock
	found := false
	consider := func(p Owner, s span) {
		if !found || s.r.Start < best.Range.Start || s.r.Start == best.Range.Start && p.less(best.Owner) {
			best, found = Lock{p, s.t, s.r}, true
		}
	}
	for p, spans := range f.held {
		if p == o {
			continue
		}
		for _, s := range spans {
			if s.r.overlaps(r) && (t == Write || s.t == Write) {
				consider(p, s)
			}
		}
	}
	for _, q := range f.granting {
		if q.st != stAcquiring || q.Owner == o {
			continue
		}
		if s, ok := conflicts(q.shadow, t, r); ok {
			consider(q.Owner, s)
		}
	}
	return best, found
}

// waiterConflict finds the first waiting request on f, earlier than seq, of
// another owner, that a lock (t, r) of o conflicts with and must not overtake:
// the fairness rule. A waiter that is itself blocked by a lock o holds is
// overtaken (o's request cannot make its wait longer than o's own lock does;
// refusing it would turn o's upgrade of its own lock into a deadlock).
func (m *Machine) waiterConflict(f *file, o Owner, t LockType, r Range, seq uint64) (*request, bool) {
	for _, w := range f.queue {
		if w.seq >= seq {
			break
		}
		if w.Owner == o || !w.Range.overlaps(r) || t != Write && w.Type != Write {
			continue
		}
		if _, ok := conflicts(f.held[o], w.Type, w.Range); ok {
			continue
		}
		return w, true
	}
	return nil, false
}

// blockers lists the owners a request (o, t, r, seq) on f waits for.
func (m *Machine) blockers(f *file, o Owner, t LockType, r Range, seq uint64) []Owner {
	var out []Owner
	for p, spans := range f.held {
		if p != o {
			if _, ok := conflicts(spans, t, r); ok {
				out = append(out, p)
			}
		}
	}
	for _, q := range f.granting {
		if q.st == stAcquiring && q.Owner != o {
			if _, ok := conflicts(q.shadow, t, r); ok {
				out = append(out, q.Owner)
			}
		}
	}
	for _, w := range f.queue {
		if w.seq >= seq {
			break
		}
		if w.Owner == o || !w.Range.overlaps(r) || t != Write && w.Type != Write {
			continue
		}
		if _, ok := conflicts(f.held[o], w.Type, w.Range); !ok {
			out = append(out, w.Owner)
		}
	}
	return out
}

// deadlock reports whether o waiting for the owners in start closes a cycle
// of the wait-for graph (owners waiting, through any of their waiting
// requests, for the owners blocking them).
func (m *Machine) deadlock(o Owner, start []Owner) bool {
	seen := map[Owner]bool{}
	stack := append([]Owner(nil), start...)
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if p == o {
			return true
		}
		if seen[p] {
			continue
		}
		seen[p] = true
		for _, w := range m.waiting[p] {
			stack = append(stack, m.blockers(w.f, p, w.Type, w.Range, w.seq)...)
		}
	}
	return false
}

// touch records that o changed r on f: grants with their callback out keep,
// for a back-out, only the parts o has not changed since.
func (m *Machine) touch(f *file, o Owner, r Range) {
	for _, q := range f.granting {
		if q.st == stNotifying && q.Owner == o {
			q.untouched = subtract(q.untouched, r)
		}
	}
}

func (m *Machine) removeGranting(q *request) {
	f := q.f
	if i := slices.Index(f.granting, q); i >= 0 {
		f.granting = slices.Delete(f.granting, i, i+1)
	}
}

func (m *Machine) addWaiter(q *request) {
	f := q.f
	q.st = stWaiting
	i, _ := slices.BinarySearchFunc(f.queue, q.seq, func(w *request, s uint64) int { return cmp.Compare(w.seq, s) })
	f.queue = slices.Insert(f.queue, i, q)
	m.waiting[q.Owner] = append(m.waiting[q.Owner], q)
	m.reqs[q.Req] = q
	m.count[q.Owner.Client] += 2
}

func (m *Machine) removeWaiter(q *request) {
	f := q.f
	if i := slices.Index(f.queue, q); i >= 0 {
		f.queue = slices.Delete(f.queue, i, i+1)
	}
	ws := m.waiting[q.Owner]
	if i := slices.Index(ws, q); i >= 0 {
		ws = slices.Delete(ws, i, i+1)
	}
	if len(ws) == 0 {
		delete(m.waiting, q.Owner)
	} else {
		m.waiting[q.Owner] = ws
	}
	m.count[q.Owner.Client] -= 2
	m.dropCount(q.Owner.Client)
}

// run grants, in arrival order, the waiters of f that can go: a waiter that
// still conflicts stays, and later waiters it conflicts with stay behind it.
// Passes repeat while a grant (a downgrade) may have freed an earlier waiter.
// It stops at a grant that must be acquired on the backing file; BackingDone
// runs the queue on.
func (m *Machine) run(f *file, now time.Time, out *[]Action) {
	if m.inGrace(now) {
		m.graceHeld = m.graceHeld || len(f.queue) > 0
		return
	}
	for again := true; again; {
		again = false
		for i := 0; i < len(f.queue); {
			if m.acquiring(f) {
				// One acquisition per file at a time: the next grant waits
				// for BackingDone, so the backing file sees the owners'
				// changes in the machine's order.
				return
			}
			w := f.queue[i]
			if now.Before(w.retryAt) {
				i++
				continue
			}
			w.retryAt = time.Time{} // tried now: releases run it from here on
			if _, ok := m.heldConflict(f, w.Owner, w.Type, w.Range); ok {
				i++
				continue
			}
			if _, ok := m.waiterConflict(f, w.Owner, w.Type, w.Range, w.seq); ok {
				i++
				continue
			}
			m.removeWaiter(w)
			m.n.WaitersGranted++
			m.grant(f, w, out)
			again = again || i > 0
		}
	}
}

// acquiring reports whether f has an acquisition out.
func (m *Machine) acquiring(f *file) bool {
	for _, q := range f.granting {
		if q.st == stAcquiring {
			return true
		}
	}
	return false
}

// grant applies q's lock for its owner: at once if the backing file need not
// acquire anything (then a waiter's ActGranted goes out), or provisionally
// with an ActBacking to acquire.
func (m *Machine) grant(f *file, q *request, out *[]Action) {
	o := q.Owner
	old := f.held[o]
	q.shadow = clip(old, q.Range)
	next := setRange(old, q.Range, q.Type)
	m.setHeld(f, o, next)
	m.reqs[q.Req] = q
	if raises(old, q.Range, q.Type) {
		q.st = stAcquiring
		f.granting = append(f.granting, q)
		m.backing(f, o, q.Range, q.Type, q.Req, true, out)
		return
	}
	if !spansEqual(old, next) {
		m.backing(f, o, q.Range, q.Type, 0, false, out)
	}
	m.notify(f, q, out)
}

// notify makes a grant final: an immediate request is forgotten, a waiter's
// ActGranted goes out.
func (m *Machine) notify(f *file, q *request, out *[]Action) {
	m.touch(f, q.Owner, q.Range)
	if q.immediate {
		delete(m.reqs, q.Req)
		return
	}
	q.st = stNotifying
	q.untouched = []Range{q.Range}
	f.granting = append(f.granting, q)
	*out = append(*out, Action{Kind: ActGranted, Req: q.Req, File: f.key, Owner: q.Owner, Type: q.Type, Range: q.Range})
}

// backOut undoes a grant whose owner never learned of it, on the parts of
// its range the owner has not changed since: each byte goes back to what the
// owner held before, but no stronger than the grant (others may have taken
// shared locks next to a lock downgraded by the grant), so the backing file
// only ever lowers.
func (m *Machine) backOut(f *file, q *request, out *[]Action) {
	m.n.GrantsBackedOut++
	o := q.Owner
	var pieces []span
	for _, u := range q.untouched {
		next, tail := u.Start, true
		for _, s := range clip(q.shadow, u) {
			if s.r.Start > next {
				pieces = append(pieces, span{Range{next, s.r.Start - 1}, Unlocked})
			}
			pieces = append(pieces, span{s.r, min(s.t, q.Type)})
			if s.r.End == u.End {
				tail = false
				break
			}
			next = s.r.End + 1
		}
		if tail {
			pieces = append(pieces, span{Range{next, u.End}, Unlocked})
		}
	}
	for _, p := range pieces {
		if p.t == q.Type {
			continue
		}
		m.setHeld(f, o, setRange(f.held[o], p.r, p.t))
		m.backing(f, o, p.r, p.t, 0, false, out)
	}
}
