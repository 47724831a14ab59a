package state

import (
	"sync"
	"sync/atomic"
	"time"
)

// Dirs is the table of directory promises (docs/protocol.md, "Directory
// promises"; Sprite's name caching under the server's callbacks, Coda's
// directory callbacks): a client that lists a directory with LISTDIR may cache
// its entries and the attributes listed with them until the promise is broken
// by a CALLBACK INVALIDATE with the directory's handle. Like Machine it is
// pure and clock-injected: it returns actions (ActCallback, ActProceed) for a
// driver to carry out, and never does I/O, sleeps or logs.
//
// A change (Changed) names the objects it changed: the directories whose
// entries it changed and the objects whose attributes it changed. Every
// promise on such a directory, and every promise that lists such an object's
// attributes, is broken, except the changer's own (it learns of its change
// from the reply). The change was already made: its request is parked (Wait)
// until every callback it waits for has ended - answered, failed, or timed out
// at its deadline (a partitioned client's promises lapse with its lease, so
// the change then goes on) - and is never refused: a change cannot be undone.
//
// A promise is recorded before the directory is read (BeginList) and covers
// what EndList names: a change made while the listing is read breaks it (the
// change of a directory breaks the promise; the change of an object listed in
// it is remembered by the listing and breaks the promise at EndList). So a
// reader either reads a listing with every change made before its promise or
// has its promise broken.
//
// Bounds: MaxPerClient promises per client and MaxPromises in all (a LISTDIR
// beyond them is answered without a promise), MaxListed listed objects per
// promise and MaxListedTotal in all (a listing beyond them loses its promise by
// a callback), maxListingChanges remembered changes per listing in progress.
//
// Directory promises are independent of Table 1: a directory never has an
// entry in Machine, and a regular file's open state never depends on a
// promise listing it.
type Dirs struct {
	cfg                     DirConfig
	epoch                   time.Time
	cbTimeout, queueTimeout int64

	mu       sync.Mutex
	dirs     map[FileID]*dirEntry      // guarded by mu
	listedIn map[FileID]map[FileID]int // object -> directories whose promises list its attributes (count of promises); guarded by mu
	per      map[ClientID]int          // promises held per client; guarded by mu
	total    int                       // promises held; guarded by mu
	listed   int                       // listed objects in all promises; guarded by mu
	lists    map[uint64]*listing       // listings in progress; guarded by mu
	waiters  map[ReqID]int             // parked changes: callbacks left; guarded by mu
	busy     map[FileID]struct{}       // directories with a callback out; guarded by mu
	seq, tok uint64                    // guarded by mu
	some     atomic.Bool               // any promise or listing exists: Changed has work
	n        dirCounters
}

// DirConfig configures Dirs. Zero fields take the defaults.
type DirConfig struct {
	MaxPerClient   int // default 4096
	MaxPromises    int // default 1<<18
	MaxListed      int // objects listed per promise (default 1<<16)
	MaxListedTotal int // objects listed in all promises (default 1<<22)
	// CallbackTimeout and QueueTimeout are Config's (defaults 5 s and
	// CallbackTimeout).
	CallbackTimeout time.Duration
	QueueTimeout    time.Duration
}

// maxListingChanges bounds the changes a listing in progress remembers;
// beyond it the listing loses its promise.
const maxListingChanges = 1024

func (c *DirConfig) defaults() {
	if c.MaxPerClient <= 0 {
		c.MaxPerClient = 4096
	}
	if c.MaxPromises <= 0 {
		c.MaxPromises = 1 << 18
	}
	if c.MaxListed <= 0 {
		c.MaxListed = 1 << 16
	}
	if c.MaxListedTotal <= 0 {
		c.MaxListedTotal = 1 << 22
	}
	if c.CallbackTimeout <= 0 {
		c.CallbackTimeout = 5 * time.Second
	}
	if c.QueueTimeout <= 0 {
		c.QueueTimeout = c.CallbackTimeout
	}
}

type dirEntry struct {
	key     FileID
	handle  []byte
	holders map[ClientID]*promise
}

// promise is one client's promise on a directory.
type promise struct {
	listed map[FileID]struct{} // objects whose attributes it covers
	call   *dirCall            // non-nil: broken, its callback out
}

type dirCall struct {
	seq         uint64
	emitted, at int64
	sent        bool
	waiters     []ReqID
}

// listing is a LISTDIR in progress: the changes made meanwhile.
type listing struct {
	client   ClientID
	dir      FileID
	changed  map[FileID]struct{}
	overflow bool
	created  bool // BeginList made the promise (FailList takes it back)
}

type dirCounters struct {
	grants, refusals, breaks, releases, timeouts, waits atomic.Uint64
}

// DirStats are the directory table's counters.
type DirStats struct {
	Promises  int    // held now
	Grants    uint64 // LISTDIRs that got (or kept) a promise
	Refusals  uint64 // LISTDIRs answered without a promise (bounds, a break out)
	Breaks    uint64 // callbacks sent
	Releases  uint64 // promises given back by their clients
	Timeouts  uint64 // breaks that ended at their deadline
	Waits     uint64 // changes parked until breaks ended
	Listed    int    // listed objects covered now
	Listings  int    // listings in progress
	Directory int    // directories with a promise
}

// NewDirs returns an empty directory table whose time line starts at now.
func NewDirs(cfg DirConfig, now time.Time) *Dirs {
	cfg.defaults()
	return &Dirs{cfg: cfg, epoch: now.Add(-time.Second),
		cbTimeout: int64(cfg.CallbackTimeout), queueTimeout: int64(cfg.QueueTimeout),
		dirs: map[FileID]*dirEntry{}, listedIn: map[FileID]map[FileID]int{}, per: map[ClientID]int{},
		lists: map[uint64]*listing{}, waiters: map[ReqID]int{}, busy: map[FileID]struct{}{}}
}

func (d *Dirs) t(now time.Time) int64 { return int64(now.Sub(d.epoch)) }

// BeginList records client c's promise on directory dir (handle) before the
// directory is read. ok false: no promise (c's bound or the table's is
// reached, or a break of c's promise on dir is still out): the listing may
// be returned, but not cached. tok names the listing for EndList, which must
// follow (also when ok is false), or FailList when the read fails.
func (d *Dirs) BeginList(now time.Time, c ClientID, dir FileID, handle []byte) (tok uint64, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.dirs[dir]
	var p *promise
	created := false
	if e != nil {
		p = e.holders[c]
	}
	switch {
	case p != nil && p.call != nil:
		ok = false // broken, not yet answered: a promise now would be undone by that answer
	case p != nil:
		ok = true
	case d.per[c] >= d.cfg.MaxPerClient || d.total >= d.cfg.MaxPromises:
		ok = false
	default:
		created = true
		if e == nil {
			e = &dirEntry{key: dir, handle: append([]byte(nil), handle...), holders: map[ClientID]*promise{}}
			d.dirs[dir] = e
		}
		e.holders[c] = &promise{}
		d.per[c]++
		d.total++
		ok = true
	}
	if !ok {
		d.n.refusals.Add(1)
		return 0, false
	}
	d.tok++
	d.lists[d.tok] = &listing{client: c, dir: dir, created: created}
	d.some.Store(true)
	return d.tok, true
}

// EndList ends the listing tok: the promise covers the attributes of listed
// (the objects the listing returned). It reports whether the client holds
// the promise now. A listing that saw one of listed change, or that would
// pass the bounds, loses its promise: the promise is broken by a callback
// (the client may hold it from an earlier listing) and EndList reports false.
func (d *Dirs) EndList(now time.Time, tok uint64, listed []FileID) (bool, []Action) {
	d.mu.Lock()
	defer d.mu.Unlock()
	l := d.lists[tok]
	if l == nil {
		return false, nil
	}
	delete(d.lists, tok)
	defer func() { d.some.Store(d.total > 0 || len(d.lists) > 0) }()
	e := d.dirs[l.dir]
	if e == nil {
		return false, nil
	}
	p := e.holders[l.client]
	if p == nil || p.call != nil {
		return false, nil // broken meanwhile: its callback is out
	}
	fresh := 0
	for _, f := range listed {
		if _, ok := p.listed[f]; !ok {
			fresh++
		}
	}
	lost := l.overflow || len(p.listed)+fresh > d.cfg.MaxListed || d.listed+fresh > d.cfg.MaxListedTotal
	if _, self := l.changed[l.dir]; self {
		lost = true
	}
	for _, f := range listed {
		if _, ch := l.changed[f]; ch {
			lost = true
			break
		}
	}
	if lost {
		var out []Action
		d.breakLocked(now, e, l.client, p, 0, &out)
		return false, out
	}
	if p.listed == nil && len(listed) > 0 {
		p.listed = make(map[FileID]struct{}, len(listed))
	}
	for _, f := range listed {
		if _, ok := p.listed[f]; ok {
			continue
		}
		p.listed[f] = struct{}{}
		in := d.listedIn[f]
		if in == nil {
			in = map[FileID]int{}
			d.listedIn[f] = in
		}
		in[l.dir]++
		d.listed++
	}
	d.n.grants.Add(1)
	return true, nil
}

// FailList ends the listing tok whose read failed: the client is answered an
// error and never learns of a promise, so one this listing made is taken back
// (else it would count against the client's bound, and changes would wait
// for its breaks, until one broke it). A promise held from an earlier
// listing stays.
func (d *Dirs) FailList(now time.Time, tok uint64) []Action {
	d.mu.Lock()
	defer d.mu.Unlock()
	l := d.lists[tok]
	if l == nil {
		return nil
	}
	delete(d.lists, tok)
	defer func() { d.some.Store(d.total > 0 || len(d.lists) > 0) }()
	e := d.dirs[l.dir]
	if e == nil || !l.created {
		return nil
	}
	p := e.holders[l.client]
	if p == nil || p.call != nil || len(p.listed) > 0 {
		return nil // broken meanwhile (its callback is out), or listed since by another listing
	}
	var out []Action
	d.dropLocked(e, l.client, p, &out)
	return out
}

// Changed applies a change made by client by (0 with self false: nobody's
// promise is spared) to each object of changed: a directory whose entries
// changed, or an object whose attributes changed. Every other client's
// promise on such a directory, or listing such an object, is broken. The
// change is already made; req (0: a change that cannot wait, a local
// process's) is parked until the callbacks it needs have ended: Wait, and an
// ActProceed with req comes later. Otherwise Proceed.
func (d *Dirs) Changed(now time.Time, req ReqID, by ClientID, self bool, changed []FileID) (Verdict, []Action) {
	if !d.some.Load() {
		return Proceed, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []Action
	left := 0
	for _, f := range changed {
		for _, l := range d.lists {
			if l.overflow {
				continue
			}
			if len(l.changed) >= maxListingChanges {
				l.overflow = true
				continue
			}
			if l.changed == nil {
				l.changed = map[FileID]struct{}{}
			}
			l.changed[f] = struct{}{}
		}
		if e := d.dirs[f]; e != nil {
			left += d.breakEntry(now, e, req, by, self, &out)
		}
		for dir := range d.listedIn[f] {
			if dir == f {
				continue
			}
			if e := d.dirs[dir]; e != nil {
				left += d.breakEntry(now, e, req, by, self, &out)
			}
		}
	}
	if left == 0 || req == 0 {
		return Proceed, out
	}
	d.waiters[req] += left
	d.n.waits.Add(1)
	return Wait, out
}

// breakEntry breaks every promise on e but by's, and adds req to the callbacks
// it must wait for. It returns how many it added.
func (d *Dirs) breakEntry(now time.Time, e *dirEntry, req ReqID, by ClientID, self bool, out *[]Action) int {
	n := 0
	for c, p := range e.holders {
		if self && c == by {
			continue
		}
		d.breakLocked(now, e, c, p, req, out)
		if req != 0 {
			n++
		}
	}
	return n
}

// breakLocked sends the callback that breaks c's promise p on e, unless one
// is out, and adds req (if any) to its waiters.
func (d *Dirs) breakLocked(now time.Time, e *dirEntry, c ClientID, p *promise, req ReqID, out *[]Action) {
	if p.call == nil {
		d.seq++
		p.call = &dirCall{seq: d.seq, emitted: d.t(now)}
		d.busy[e.key] = struct{}{}
		d.n.breaks.Add(1)
		*out = append(*out, Action{Kind: ActCallback, Callback: Callback{File: e.key, Handle: e.handle, Client: c, Mode: Invalidate, Seq: d.seq}})
	}
	if req != 0 {
		p.call.waiters = append(p.call.waiters, req)
	}
}

// ChangedAll breaks every promise: changes may have gone unreported (the
// change notifications were lost). Listings in progress lose their promises.
func (d *Dirs) ChangedAll(now time.Time) []Action {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []Action
	for _, l := range d.lists {
		l.overflow = true
	}
	for _, e := range d.dirs {
		d.breakEntry(now, e, 0, 0, false, &out)
	}
	return out
}

// ChangedWhere breaks every promise on a directory whose handle match
// accepts (the directories of an export the server stopped serving).
func (d *Dirs) ChangedWhere(now time.Time, match func(handle []byte) bool) []Action {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []Action
	for _, e := range d.dirs {
		if match(e.handle) {
			d.breakEntry(now, e, 0, 0, false, &out)
		}
	}
	return out
}

// CallbackSent reports that a break was written: its deadline starts now.
func (d *Dirs) CallbackSent(now time.Time, cb Callback) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if p := d.promiseOf(cb); p != nil && !p.call.sent {
		p.call.sent, p.call.at = true, d.t(now)
	}
}

// promiseOf returns the promise whose break cb is, or nil. mu held.
func (d *Dirs) promiseOf(cb Callback) *promise {
	e := d.dirs[cb.File]
	if e == nil {
		return nil
	}
	p := e.holders[cb.Client]
	if p == nil || p.call == nil || p.call.seq != cb.Seq {
		return nil
	}
	return p
}

// CallbackDone reports how a break ended. Whatever the outcome the promise is
// gone: a client that answered dropped its cache of the directory; one that
// did not is past its lease (docs/protocol.md) by the deadline, or was told
// of the break and dropped it before answering. The changes waiting for it go
// on when it was their last.
func (d *Dirs) CallbackDone(now time.Time, cb Callback, o Outcome) []Action {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.dirs[cb.File]
	if p := d.promiseOf(cb); p != nil {
		var out []Action
		d.dropLocked(e, cb.Client, p, &out)
		return out
	}
	return nil
}

// dropLocked forgets c's promise p on e, and answers the changes waiting for
// its break that have no other to wait for.
func (d *Dirs) dropLocked(e *dirEntry, c ClientID, p *promise, out *[]Action) {
	for f := range p.listed {
		if in := d.listedIn[f]; in != nil {
			if in[e.key]--; in[e.key] <= 0 {
				delete(in, e.key)
			}
			if len(in) == 0 {
				delete(d.listedIn, f)
			}
		}
	}
	d.listed -= len(p.listed)
	if p.call != nil {
		for _, r := range p.call.waiters {
			if d.waiters[r]--; d.waiters[r] <= 0 {
				delete(d.waiters, r)
				*out = append(*out, Action{Kind: ActProceed, Req: r})
			}
		}
	}
	delete(e.holders, c)
	if d.per[c]--; d.per[c] <= 0 {
		delete(d.per, c)
	}
	d.total--
	if len(e.holders) == 0 {
		delete(d.dirs, e.key)
		delete(d.busy, e.key)
	} else if !e.hasCall() {
		delete(d.busy, e.key)
	}
	d.some.Store(d.total > 0 || len(d.lists) > 0)
}

func (e *dirEntry) hasCall() bool {
	for _, p := range e.holders {
		if p.call != nil {
			return true
		}
	}
	return false
}

// Tick ends the breaks past their deadline (CallbackTimeout from sending, or
// QueueTimeout plus CallbackTimeout from asking when never reported sent): the
// changes waiting for them go on, and an ActFence says whose callback path
// failed (no file is fenced: the driver has the path probed again).
func (d *Dirs) Tick(now time.Time) []Action {
	t := d.t(now)
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []Action
	for key := range d.busy {
		e := d.dirs[key]
		if e == nil {
			delete(d.busy, key)
			continue
		}
		for c, p := range e.holders {
			if p.call == nil {
				continue
			}
			deadline := p.call.emitted + d.queueTimeout + d.cbTimeout
			if p.call.sent {
				deadline = p.call.at + d.cbTimeout
			}
			if t >= deadline {
				d.n.timeouts.Add(1)
				out = append(out, Action{Kind: ActFence, Client: c, File: key})
				d.dropLocked(e, c, p, &out)
			}
		}
	}
	return out
}

// Release gives back c's promise on dir (its DIR_RELEASE). A promise whose
// break is out stays until the break ends.
func (d *Dirs) Release(now time.Time, c ClientID, dir FileID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e := d.dirs[dir]; e != nil {
		if p := e.holders[c]; p != nil && p.call == nil {
			d.n.releases.Add(1)
			d.dropLocked(e, c, p, new([]Action))
		}
	}
}

// ClientGone forgets every promise of c (its registration is gone, or it
// registered again after a reboot): the changes waiting for its breaks go on.
func (d *Dirs) ClientGone(now time.Time, c ClientID) []Action {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []Action
	if d.per[c] == 0 {
		return nil
	}
	for _, e := range d.dirs {
		if p := e.holders[c]; p != nil {
			d.dropLocked(e, c, p, &out)
		}
	}
	return out
}

// Active reports whether any promise or listing exists (Changed has nothing
// to do otherwise).
func (d *Dirs) Active() bool { return d.some.Load() }

// Holds reports whether c holds a promise on dir that is not being broken.
func (d *Dirs) Holds(c ClientID, dir FileID) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e := d.dirs[dir]; e != nil {
		p := e.holders[c]
		return p != nil && p.call == nil
	}
	return false
}

// Held returns how many promises c holds (broken ones not yet answered included).
func (d *Dirs) Held(c ClientID) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.per[c]
}

// Stats returns the counters and a census.
func (d *Dirs) Stats() DirStats {
	d.mu.Lock()
	st := DirStats{Promises: d.total, Listed: d.listed, Listings: len(d.lists), Directory: len(d.dirs)}
	d.mu.Unlock()
	st.Grants, st.Refusals, st.Breaks = d.n.grants.Load(), d.n.refusals.Load(), d.n.breaks.Load()
	st.Releases, st.Timeouts, st.Waits = d.n.releases.Load(), d.n.timeouts.Load(), d.n.waits.Load()
	return st
}
