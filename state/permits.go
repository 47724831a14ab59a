package state

import (
	"sync"
	"sync/atomic"
	"time"
)

// Permits is the table of write-back permits on directories
// (docs/protocol.md section 21; Coda's write-back caching, section 3 of the
// Coda/InterMezzo paper): a client holding a directory's permit makes its
// changes of that directory locally, logs them, and reintegrates the log
// later (REINTEGRATE), many records per call. Like Dirs it is pure and
// clock-injected: it returns actions (ActCallback, ActProceed, ActFence) for
// a driver to carry out and never does I/O, sleeps or logs.
//
// One client at most holds a directory's permit. Acquire records it pending;
// the driver breaks every other client's directory promise on the directory
// and, once the breaks have ended, Granted makes it held (a change of the
// directory by anyone else meanwhile cancels the pending permit: its client
// is answered "not granted" and has learned of nothing to give back).
//
// A change of a directory whose permit another client holds (Changed) recalls
// the permit (CALLBACK with RecallPermit) and, unless it cannot wait (a local
// process's, req 0), parks until the recall has ended: the holder answered
// (it reintegrated its log of that directory first), released the permit,
// or its answer is past its deadline (CallbackTimeout from sending; the
// permit is then revoked, and the holder's reintegration refused). The
// holder's own changes never wait for its permit.
//
// Bounds: MaxPerClient permits per client and MaxPermits in all; past them
// Acquire refuses, and no permit is recalled to make room.
//
// Permits are independent of Table 1 and of Dirs: a permit is not a
// promise (its holder lists the directory under a promise like anyone
// else), and Dirs never consults it; the driver refuses other clients'
// promises on a directory whose permit is held or pending (HeldByOther).
type Permits struct {
	cfg                     PermitConfig
	epoch                   time.Time
	cbTimeout, queueTimeout int64

	mu        sync.Mutex
	dirs      map[FileID]*permit  // guarded by mu
	per       map[ClientID]int    // permits held or pending, per client; guarded by mu
	waiters   map[ReqID]int       // parked changes: recalls left; guarded by mu
	recalling map[FileID]struct{} // permits with a recall out; guarded by mu
	seq, ids  uint64              // guarded by mu
	some      atomic.Bool         // any permit exists: Changed has work
	n         permitCounters
}

// PermitConfig configures Permits. Zero fields take the defaults.
type PermitConfig struct {
	MaxPerClient int // default 1024
	MaxPermits   int // default 1<<16
	// CallbackTimeout and QueueTimeout are Config's (defaults 5 s and
	// CallbackTimeout).
	CallbackTimeout time.Duration
	QueueTimeout    time.Duration
	// IDBase is added to every permit id: the driver makes it differ from
	// one server start to the next, so that a permit of an earlier start
	// never names one of this start's.
	IDBase uint64
}

func (c *PermitConfig) defaults() {
	if c.MaxPerClient <= 0 {
		c.MaxPerClient = 1024
	}
	if c.MaxPermits <= 0 {
		c.MaxPermits = 1 << 16
	}
	if c.CallbackTimeout <= 0 {
		c.CallbackTimeout = 5 * time.Second
	}
	if c.QueueTimeout <= 0 {
		c.QueueTimeout = c.CallbackTimeout
	}
}

// permit is one directory's permit.
type permit struct {
	key     FileID
	handle  []byte
	holder  ClientID
	id      uint64
	pending bool     // being granted: other clients' promises are being broken
	recall  *dirCall // non-nil: recalled, the callback out
	// batches counts the holder's REINTEGRATEs under the permit being
	// applied (BeginBatch): the permit does not end under them. An end
	// that comes meanwhile (the recall answered, failed or past its
	// deadline, a release) is kept in ending and carried out when the last
	// batch ends (EndBatch).
	batches int
	ending  permitEnd
}

// permitEnd is how a permit ends once the batches under it are applied.
type permitEnd uint8

const (
	endNone     permitEnd = iota
	endReleased           // answered or released
	endRevoked            // its recall failed or passed its deadline
)

type permitCounters struct {
	grants, refusals, cancels, recalls, releases, revocations, waits atomic.Uint64
}

// PermitStats are the permit table's counters.
type PermitStats struct {
	Permits     int    // held or pending now
	Grants      uint64 // GET_PERMITs granted (and permits given on new directories)
	Refusals    uint64 // GET_PERMITs refused (held by another, recalled, bounds)
	Cancels     uint64 // pending permits cancelled by a change
	Recalls     uint64 // recall callbacks sent
	Releases    uint64 // permits given back (PERMIT_RELEASE, or a recall answered)
	Revocations uint64 // recalls that failed or ended at their deadline
	Waits       uint64 // changes parked until a recall ended
}

// NewPermits returns an empty permit table whose time line starts at now.
func NewPermits(cfg PermitConfig, now time.Time) *Permits {
	cfg.defaults()
	return &Permits{cfg: cfg, epoch: now.Add(-time.Second),
		cbTimeout: int64(cfg.CallbackTimeout), queueTimeout: int64(cfg.QueueTimeout),
		dirs: map[FileID]*permit{}, per: map[ClientID]int{}, waiters: map[ReqID]int{}, recalling: map[FileID]struct{}{}}
}

func (p *Permits) t(now time.Time) int64 { return int64(now.Sub(p.epoch)) }

// Acquire asks for client c's permit on directory dir (handle). ok false:
// refused (another client holds or is being granted it, c's own is being
// recalled or granted, or a bound is reached). fresh true: the permit is
// pending, and the driver must break the other clients' promises on dir and
// then call Granted (or Abort); fresh false with ok: c holds it already,
// with the same id.
func (p *Permits) Acquire(now time.Time, c ClientID, dir FileID, handle []byte) (id uint64, fresh, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.dirs[dir]; e != nil {
		if e.holder == c && !e.pending && e.recall == nil && e.ending == endNone {
			p.n.grants.Add(1)
			return e.id, false, true
		}
		p.n.refusals.Add(1)
		return 0, false, false
	}
	if p.per[c] >= p.cfg.MaxPerClient || len(p.dirs) >= p.cfg.MaxPermits {
		p.n.refusals.Add(1)
		return 0, false, false
	}
	e := p.addLocked(c, dir, handle)
	e.pending = true
	return e.id, true, true
}

func (p *Permits) addLocked(c ClientID, dir FileID, handle []byte) *permit {
	p.ids++
	e := &permit{key: dir, handle: append([]byte(nil), handle...), holder: c, id: p.cfg.IDBase + p.ids}
	p.dirs[dir] = e
	p.per[c]++
	p.some.Store(true)
	return e
}

// Granted ends the grant of the pending permit id on dir: it reports whether
// the permit is now held (false: a change cancelled it meanwhile).
func (p *Permits) Granted(now time.Time, dir FileID, id uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.dirs[dir]
	if e == nil || e.id != id || !e.pending {
		return false
	}
	e.pending = false
	p.n.grants.Add(1)
	return true
}

// Abort takes back the pending permit id on dir (its grant could not
// finish).
func (p *Permits) Abort(now time.Time, dir FileID, id uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.dirs[dir]; e != nil && e.id == id && e.pending {
		p.dropLocked(e, new([]Action))
	}
}

// GrantNew gives client c a permit on the directory dir that c has just
// made under the permit of its parent (a reintegrated MKDIR): nobody else
// can have changed or cached it yet, so nothing is broken. It returns the
// permit's id (c's own if it holds one on dir already), 0 when a bound is
// reached or another client holds dir's permit.
func (p *Permits) GrantNew(now time.Time, c ClientID, dir FileID, handle []byte) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.dirs[dir]; e != nil {
		if e.holder == c && !e.pending {
			return e.id // made again by a resent batch: the permit it got then
		}
		return 0
	}
	if p.per[c] >= p.cfg.MaxPerClient || len(p.dirs) >= p.cfg.MaxPermits {
		return 0
	}
	p.n.grants.Add(1)
	return p.addLocked(c, dir, handle).id
}

// Changed applies a change of the directories dirs made by client by (0 with
// self false: a local process's, or nobody to spare). Every other client's
// permit on them is recalled (a pending one is cancelled instead). The
// change has not been made yet: req is parked until the recalls it needs
// have ended (Wait; an ActProceed with req comes later). req 0 (a change
// already made, a local process's) recalls without waiting.
func (p *Permits) Changed(now time.Time, req ReqID, by ClientID, self bool, dirs []FileID) (Verdict, []Action) {
	if !p.some.Load() {
		return Proceed, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Action
	left := 0
	for _, f := range dirs {
		e := p.dirs[f]
		if e == nil || (self && e.holder == by) {
			continue
		}
		if e.pending {
			p.n.cancels.Add(1)
			p.dropLocked(e, &out)
			continue
		}
		if e.recall == nil {
			p.seq++
			e.recall = &dirCall{seq: p.seq, emitted: p.t(now)}
			p.recalling[f] = struct{}{}
			p.n.recalls.Add(1)
			out = append(out, Action{Kind: ActCallback, Callback: Callback{File: f, Handle: e.handle, Client: e.holder, Mode: RecallPermit, Seq: p.seq}})
		}
		if req != 0 {
			e.recall.waiters = append(e.recall.waiters, req)
			left++
		}
	}
	if left == 0 {
		return Proceed, out
	}
	p.waiters[req] += left
	p.n.waits.Add(1)
	return Wait, out
}

// ChangedAll recalls every permit without waiting: changes may have gone
// unreported (a local process's, when change notifications were lost).
func (p *Permits) ChangedAll(now time.Time) []Action {
	p.mu.Lock()
	dirs := make([]FileID, 0, len(p.dirs))
	for f := range p.dirs {
		dirs = append(dirs, f)
	}
	p.mu.Unlock()
	_, out := p.Changed(now, 0, 0, false, dirs)
	return out
}

// permitOf returns the permit whose recall cb is, or nil. mu held.
func (p *Permits) permitOf(cb Callback) *permit {
	e := p.dirs[cb.File]
	if e == nil || e.holder != cb.Client || e.recall == nil || e.recall.seq != cb.Seq {
		return nil
	}
	return e
}

// CallbackSent reports that a recall was written: its deadline starts now.
func (p *Permits) CallbackSent(now time.Time, cb Callback) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.permitOf(cb); e != nil && !e.recall.sent {
		e.recall.sent, e.recall.at = true, p.t(now)
	}
}

// CallbackDone reports how a recall ended. The permit is gone either way:
// answered, its holder reintegrated first and gave it back; failed, it is
// revoked (the holder's later reintegration under it is refused). The
// changes waiting for it go on when it was their last.
func (p *Permits) CallbackDone(now time.Time, cb Callback, o Outcome) []Action {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.permitOf(cb)
	if e == nil {
		return nil
	}
	end := endReleased
	if o == Failed {
		end = endRevoked
	}
	var out []Action
	p.endLocked(e, end, &out)
	return out
}

// endLocked ends permit e as end says, or, while batches under it are being
// applied, once the last of them ends (EndBatch): a batch begun under the
// permit is applied whole under it, and the changes waiting for its recall
// are made after it. A revocation is counted, and fenced, when carried out.
func (p *Permits) endLocked(e *permit, end permitEnd, out *[]Action) {
	if e.batches > 0 {
		if e.ending == endNone || end == endRevoked {
			e.ending = end
		}
		delete(p.recalling, e.key) // no deadline left to watch: the batch's end decides
		return
	}
	if end == endRevoked {
		p.n.revocations.Add(1)
		*out = append(*out, Action{Kind: ActFence, Client: e.holder, File: e.key})
	} else {
		p.n.releases.Add(1)
	}
	p.dropLocked(e, out)
}

// BeginBatch reports whether c holds the permit id on dir and, if so,
// counts a REINTEGRATE under it as being applied: until EndBatch, the
// permit does not end (Holds stays true) - an answer to its recall, a
// failure, its deadline or a release is carried out at EndBatch. The
// changes waiting for the recall so wait for the batch; its time is bounded
// by the callbacks of other clients its records wait for (each bounded by
// CallbackTimeout) and the disk. docs/protocol.md section 21.4.
func (p *Permits) BeginBatch(c ClientID, dir FileID, id uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.dirs[dir]
	if e == nil || e.holder != c || e.id != id || e.pending {
		return false
	}
	e.batches++
	return true
}

// EndBatch ends a batch BeginBatch counted on c's permit id on dir, and
// carries out an end of the permit that came meanwhile.
func (p *Permits) EndBatch(now time.Time, c ClientID, dir FileID, id uint64) []Action {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.dirs[dir]
	if e == nil || e.holder != c || e.id != id || e.batches == 0 {
		return nil
	}
	e.batches--
	if e.batches > 0 || e.ending == endNone {
		return nil
	}
	var out []Action
	end := e.ending
	e.ending = endNone
	p.endLocked(e, end, &out)
	return out
}

// dropLocked forgets permit e and answers the changes waiting for its recall
// that have no other to wait for.
func (p *Permits) dropLocked(e *permit, out *[]Action) {
	if e.recall != nil {
		for _, r := range e.recall.waiters {
			if p.waiters[r]--; p.waiters[r] <= 0 {
				delete(p.waiters, r)
				*out = append(*out, Action{Kind: ActProceed, Req: r})
			}
		}
	}
	delete(p.dirs, e.key)
	delete(p.recalling, e.key)
	if p.per[e.holder]--; p.per[e.holder] <= 0 {
		delete(p.per, e.holder)
	}
	p.some.Store(len(p.dirs) > 0)
}

// Tick revokes the permits whose recall is past its deadline
// (CallbackTimeout from sending, or QueueTimeout plus CallbackTimeout from
// asking when never reported sent): the changes waiting for them go on, and
// an ActFence says whose callback path failed.
func (p *Permits) Tick(now time.Time) []Action {
	t := p.t(now)
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Action
	for f := range p.recalling {
		e := p.dirs[f]
		if e == nil || e.recall == nil {
			delete(p.recalling, f)
			continue
		}
		deadline := e.recall.emitted + p.queueTimeout + p.cbTimeout
		if e.recall.sent {
			deadline = e.recall.at + p.cbTimeout
		}
		if t >= deadline {
			p.endLocked(e, endRevoked, &out)
		}
	}
	return out
}

// Release gives back c's permit id on dir (PERMIT_RELEASE; id 0: whatever
// its id). Released during its recall, it ends the recall: the changes
// waiting go on. A pending permit is not released (its GET_PERMIT has not
// been answered).
func (p *Permits) Release(now time.Time, c ClientID, dir FileID, id uint64) []Action {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.dirs[dir]
	if e == nil || e.holder != c || e.pending || (id != 0 && e.id != id) {
		return nil
	}
	var out []Action
	p.endLocked(e, endReleased, &out)
	return out
}

// ClientGone forgets every permit of c (its registration is gone, or it
// registered again after a reboot): the changes waiting for its recalls go
// on.
func (p *Permits) ClientGone(now time.Time, c ClientID) []Action {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.per[c] == 0 {
		return nil
	}
	var out []Action
	for _, e := range p.dirs {
		if e.holder == c {
			p.dropLocked(e, &out)
		}
	}
	return out
}

// Holds reports whether c holds the permit id on dir (recalled or not:
// the holder reintegrates during its recall).
func (p *Permits) Holds(c ClientID, dir FileID, id uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.dirs[dir]
	return e != nil && e.holder == c && e.id == id && !e.pending
}

// HeldID returns the id of the permit c holds on dir (recalled or not), 0
// when it holds none.
func (p *Permits) HeldID(c ClientID, dir FileID) uint64 {
	if !p.some.Load() {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.dirs[dir]; e != nil && e.holder == c && !e.pending {
		return e.id
	}
	return 0
}

// HeldByOther reports whether a client other than c holds, or is being
// granted, a permit on dir.
func (p *Permits) HeldByOther(c ClientID, dir FileID) bool {
	if !p.some.Load() {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.dirs[dir]
	return e != nil && e.holder != c
}

// Holder returns the client that holds, or is being granted, a permit on
// dir (false: none).
func (p *Permits) Holder(dir FileID) (ClientID, bool) {
	if !p.some.Load() {
		return 0, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.dirs[dir]; e != nil {
		return e.holder, true
	}
	return 0, false
}

// Active reports whether any permit exists (Changed has nothing to do
// otherwise).
func (p *Permits) Active() bool { return p.some.Load() }

// Held returns how many permits c holds or is being granted.
func (p *Permits) Held(c ClientID) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.per[c]
}

// Stats returns the counters and a census.
func (p *Permits) Stats() PermitStats {
	p.mu.Lock()
	st := PermitStats{Permits: len(p.dirs)}
	p.mu.Unlock()
	st.Grants, st.Refusals, st.Cancels = p.n.grants.Load(), p.n.refusals.Load(), p.n.cancels.Load()
	st.Recalls, st.Releases, st.Revocations, st.Waits = p.n.recalls.Load(), p.n.releases.Load(), p.n.revocations.Load(), p.n.waits.Load()
	return st
}
