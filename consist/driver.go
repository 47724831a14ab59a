package consist

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
	"snfs/sunrpc"
)

// Errors a request may end with; package server maps them to protocol status.
var (
	// ErrJukebox: callbacks this request waits for did not finish in time, or
	// the table is full: try again later (NFS3ERR_JUKEBOX).
	ErrJukebox = errors.New("consist: waiting for callbacks; try again later")
	// ErrFenced: the client did not answer a callback on this file and is
	// refused until it opens the file again (SNFS_ERR_FENCED).
	ErrFenced = errors.New("consist: client fenced for this file")
	// ErrStaleClientID: no such registration in this server instance
	// (SNFS_ERR_STALE_CLIENTID).
	ErrStaleClientID = errors.New("consist: unknown client id")
	// ErrGone: the request's client went away before it could be answered:
	// drop the request.
	ErrGone = errors.New("consist: client gone")
)

// Config configures a Driver.
type Config struct {
	// StateDir is where the registrations and the version mark are kept; ""
	// keeps them in memory only (nothing survives a restart: no grace period).
	StateDir string
	// Grace bounds the grace period after a restart, while the clients recorded
	// before it reclaim their state (docs/protocol.md, "Grace period"); 0 or
	// less: none.
	Grace  time.Duration
	Table  state.Config // the table's bounds and timings (VersionBase comes from StateDir)
	Logger *slog.Logger
	// Attr returns the current attributes of the file a handle names, for the
	// CALLBACK arguments (nil, or a nil result: none).
	Attr func(handle []byte) *nfs3.Fattr
	// Clock is what the driver reads the time from and waits with (nil: the
	// wall clock); tests move it forward (OffsetClock).
	Clock Clock
	// TickEvery is the sweeper's period (default 200 ms); MaxSenders bounds the
	// callbacks and probes being sent at once (default 256).
	TickEvery  time.Duration
	MaxSenders int
	// Dirs bounds the directory promises (docs/protocol.md section 20);
	// its timings are Table's.
	Dirs state.DirConfig
	// Permits bounds the write-back permits (docs/protocol.md section 21);
	// its timings are Table's.
	Permits state.PermitConfig
	// Leases holds a lease on each file a client may hold dirty blocks of
	// (lease.go); nil: none are held.
	Leases Leaser
}

// Driver is the server side of the consistency protocol around a state table.
type Driver struct {
	m         *state.Machine
	clock     Clock          // what the time is read from (clock.go)
	dirs      *state.Dirs    // directory promises (dirs.go)
	permits   *state.Permits // write-back permits (permits.go)
	log       *slog.Logger
	rec       *records
	verf      snfs1.Verifier
	attr      func(handle []byte) *nfs3.Fattr
	leases    Leaser
	noLeases  sync.Once // the first lease refused for want of leases is logged
	cbTimeout time.Duration
	senders   chan struct{}
	met       *metrics
	reqs      atomic.Uint64
	active    atomic.Bool // a client has registered, or grace lasts: plain accesses go through the table
	grace     grace
	gone      func(state.ClientID) // OnClientGone; set before serving

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // sweeper, senders, continuations; added to only through goOwned
	// gmu orders goOwned's wg.Add before Stop's wg.Wait: once stopped is set
	// no goroutine starts (an Add after the Wait returned would run against
	// closed records, and the race detector rightly flags it).
	gmu     sync.RWMutex
	stopped bool // guarded by gmu

	mu     sync.RWMutex
	parked map[state.ReqID]func(state.OpenReply, error) // guarded by mu
	early  map[state.ReqID]answer                       // answers that came before their request was parked; guarded by mu
	byID   map[snfs1.ClientID]*client                   // guarded by mu
	byName map[string]*client                           // guarded by mu
	byMid  map[state.ClientID]*client                   // guarded by mu
	// callers: the registration the calls read on each connection come
	// from, from the connection's REGISTER until every call it read is
	// served (a close does not end it: calls read before it still run, as
	// that client's); guarded by mu.
	callers map[*sunrpc.Conn]*client
	plain   map[string]state.ClientID // plain clients by address; guarded by mu
	rearm   map[string]struct{}       // handles whose lease the sweeper tries again; guarded by mu
	nextMid state.ClientID            // guarded by mu
}

type answer struct {
	reply state.OpenReply
	err   error
}

// client is one registered protocol client.
type client struct {
	id   snfs1.ClientID
	mid  state.ClientID
	name string
	// conn is its callback path (nil while it has none); bound is closed while
	// it has one, and replaced when it loses it; unbound is closed when conn
	// stops being its path. All guarded by Driver.mu.
	conn    *sunrpc.Conn
	bound   chan struct{}
	unbound chan struct{}
	// permits: its registration's record says it was granted a write-back
	// permit (permitreclaim.go); guarded by Driver.mu.
	permits bool
	// conns: the connections its calls came on whose calls are not all
	// served yet (Driver.callers); guarded by Driver.mu.
	conns map[*sunrpc.Conn]struct{}
}

// New opens the durable records in cfg.StateDir, starts the table and its
// sweeper.
func New(cfg Config) (*Driver, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.TickEvery <= 0 {
		cfg.TickEvery = 200 * time.Millisecond
	}
	if cfg.MaxSenders <= 0 {
		cfg.MaxSenders = 256
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	rec, err := openRecords(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	mark, err := rec.versionMark()
	if err != nil {
		rec.close()
		return nil, fmt.Errorf("consist: read the version mark: %w", err)
	}
	tc := cfg.Table
	tc.VersionBase = mark
	if tc.CallbackTimeout <= 0 {
		tc.CallbackTimeout = 5 * time.Second
	}
	d := &Driver{m: state.New(tc, cfg.Clock.Now()), clock: cfg.Clock, log: cfg.Logger, rec: rec, attr: cfg.Attr, leases: cfg.Leases,
		cbTimeout: tc.CallbackTimeout, senders: make(chan struct{}, cfg.MaxSenders),
		parked: map[state.ReqID]func(state.OpenReply, error){}, early: map[state.ReqID]answer{},
		byID: map[snfs1.ClientID]*client{}, byName: map[string]*client{}, byMid: map[state.ClientID]*client{},
		callers: map[*sunrpc.Conn]*client{}, plain: map[string]state.ClientID{}, rearm: map[string]struct{}{}}
	dc := cfg.Dirs
	dc.CallbackTimeout, dc.QueueTimeout = tc.CallbackTimeout, tc.QueueTimeout
	d.dirs = state.NewDirs(dc, d.now())
	rand.Read(d.verf[:])
	pc := cfg.Permits
	pc.CallbackTimeout, pc.QueueTimeout = tc.CallbackTimeout, tc.QueueTimeout
	// Permit ids of this start: a random base in the high half (the server
	// verifier's bits), counted up from there.
	pc.IDBase = binary.BigEndian.Uint64(d.verf[:]) &^ (1<<32 - 1)
	d.permits = state.NewPermits(pc, d.now())
	d.met = newMetrics(d)
	d.ctx, d.cancel = context.WithCancel(context.Background())
	recs, err := rec.all()
	if err != nil {
		rec.close()
		return nil, err
	}
	d.startGrace(d.now(), recs, cfg.Grace)
	d.goOwned(func() { d.sweep(cfg.TickEvery) })
	return d, nil
}

// goOwned runs fn in a goroutine Stop waits for, unless Stop has begun: then
// it reports false and fn does not run.
func (d *Driver) goOwned(fn func()) bool {
	d.gmu.RLock()
	defer d.gmu.RUnlock()
	if d.stopped {
		return false
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		fn()
	}()
	return true
}

// Stop stops the sweeper and the senders, waits for them, and closes the
// records. Requests still parked are dropped.
func (d *Driver) Stop() error {
	d.cancel()
	d.gmu.Lock()
	d.stopped = true
	d.gmu.Unlock()
	d.wg.Wait()
	d.mu.Lock()
	parked := d.parked
	d.parked = map[state.ReqID]func(state.OpenReply, error){}
	d.mu.Unlock()
	for _, fn := range parked {
		fn(state.OpenReply{}, ErrGone)
	}
	return d.rec.close()
}

// ServerVerifier changes at every start of the server.
func (d *Driver) ServerVerifier() snfs1.Verifier { return d.verf }

// CallbackTimeout is how long a callback may take before its client is fenced.
func (d *Driver) CallbackTimeout() time.Duration { return d.cbTimeout }

// Active reports whether any protocol client has registered since the start:
// until then no client caches anything, and plain accesses need no record.
func (d *Driver) Active() bool { return d.active.Load() }

// Table returns the state table (for tests and metrics).
func (d *Driver) Table() *state.Machine { return d.m }

func (d *Driver) sweep(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-d.ctx.Done():
			return
		case <-t.C:
			now := d.now()
			d.do(d.m.Tick(now))
			d.doDirs(d.dirs.Tick(now))
			d.doPermits(d.permits.Tick(now))
			d.rearmLeases()
		}
	}
}

// do carries out the table's actions, in order.
func (d *Driver) do(acts []state.Action) {
	for i := 0; i < len(acts); i++ {
		a := &acts[i]
		switch a.Kind {
		case state.ActCallback:
			d.sendCallback(a.Callback)
		case state.ActProbe:
			d.sendProbe(a.Client)
		case state.ActReply:
			d.answer(a.Req, a.Reply, nil)
		case state.ActProceed:
			d.answer(a.Req, state.OpenReply{}, nil)
		case state.ActJukebox:
			d.met.jukebox.Inc()
			d.answer(a.Req, state.OpenReply{}, ErrJukebox)
		case state.ActRefuse:
			d.answer(a.Req, state.OpenReply{}, ErrFenced)
		case state.ActAbandon:
			d.answer(a.Req, state.OpenReply{}, ErrGone)
		case state.ActFence:
			d.log.Warn("client fenced: it did not answer a callback in time", "client", d.clientName(a.Client), "file", fmt.Sprintf("%x", a.File[:8]))
		case state.ActReserveVersions:
			d.reserve(a.Through)
		case state.ActLease:
			d.lease(a.Handle, a.Take)
		}
	}
}

// reserve makes "versions up to through are used" durable, off the request
// path (a commit is a flush; the table asks for the next block while half of
// the current one is left, so nobody waits for it unless versions run out).
func (d *Driver) reserve(through uint64) {
	d.goOwned(func() {
		err := d.rec.setVersionMark(through)
		if err != nil {
			d.log.Error("cannot make the version mark durable", "err", err)
		}
		d.do(d.m.VersionsReserved(d.now(), through, err))
	})
}

// park records the continuation of a request the table parked; an answer that
// came first is delivered at once.
func (d *Driver) park(req state.ReqID, fn func(state.OpenReply, error)) {
	d.mu.Lock()
	if a, ok := d.early[req]; ok {
		delete(d.early, req)
		d.mu.Unlock()
		d.continueWith(fn, a)
		return
	}
	if d.ctx.Err() != nil {
		// Stopping: Stop answers those parked before its wait only, and
		// once stopped no goroutine is left to answer (a block of
		// versions, a callback): answered as Stop answers them.
		d.mu.Unlock()
		d.continueWith(fn, answer{err: ErrGone})
		return
	}
	d.parked[req] = fn
	d.mu.Unlock()
}

// answer delivers the table's answer to a parked request.
func (d *Driver) answer(req state.ReqID, r state.OpenReply, err error) {
	d.mu.Lock()
	fn := d.parked[req]
	if fn == nil {
		d.early[req] = answer{r, err}
		d.mu.Unlock()
		return
	}
	delete(d.parked, req)
	d.mu.Unlock()
	d.continueWith(fn, answer{r, err})
}

// continueWith runs a parked request's continuation in its own goroutine: it
// may be long (a deferred NFS WRITE), and whoever delivers the answer (the
// sweeper, a callback's completion) must not wait for it.
func (d *Driver) continueWith(fn func(state.OpenReply, error), a answer) {
	if !d.goOwned(func() { fn(a.reply, a.err) }) {
		fn(state.OpenReply{}, ErrGone) // stopping: as Stop answers the parked ones
	}
}

// Open applies an OPEN by table client c. answer is called exactly once: before
// Open returns when the table answers at once, else later from another
// goroutine (the caller defers its reply meanwhile). During the grace period
// every OPEN gets ErrGrace (a JUKEBOX): the table is still being rebuilt.
//
// change is the file's change attribute when the caller has no change
// notifications for its file system (state.OpenArgs.Change), else 0.
func (d *Driver) Open(c state.ClientID, fh []byte, mode state.Mode, change uint64, answer func(state.OpenReply, error)) {
	if d.grace.active.Load() {
		d.met.graceJukebox.Inc()
		answer(state.OpenReply{}, ErrGrace)
		return
	}
	req := state.ReqID(d.reqs.Add(1))
	res, acts := d.m.Open(d.now(), req, state.OpenArgs{File: state.FileIDOf(fh), Handle: fh, Client: c, Mode: mode, Change: change})
	if d.tracing() {
		d.trace("table: OPEN", fh, "client", d.clientName(c), "mode", mode, "verdict", res.Verdict, "caching", res.Reply.CacheEnabled)
		if res.Verdict == state.Wait {
			inner := answer
			answer = func(r state.OpenReply, err error) {
				d.trace("table: OPEN answered after callbacks", fh, "client", d.clientName(c), "caching", r.CacheEnabled, "err", err)
				inner(r, err)
			}
		}
	}
	switch res.Verdict {
	case state.Wait:
		d.park(req, answer)
		d.do(acts)
		return
	case state.Proceed:
		d.do(acts)
		answer(res.Reply, nil)
	case state.Jukebox:
		d.met.jukebox.Inc()
		d.do(acts)
		answer(state.OpenReply{}, ErrJukebox)
	default:
		d.do(acts)
		answer(state.OpenReply{}, ErrFenced)
	}
}

// Close applies a CLOSE by table client c. It never waits.
func (d *Driver) Close(c state.ClientID, fh []byte, mode state.Mode, dirty bool) error {
	f := state.FileIDOf(fh)
	if d.m.Fenced(c, f) {
		return ErrFenced
	}
	if d.tracing() {
		d.trace("table: CLOSE", fh, "client", d.clientName(c), "mode", mode, "dirty", dirty)
	}
	d.do(d.m.Close(d.now(), state.CloseArgs{File: f, Client: c, Mode: mode, Dirty: dirty}))
	return nil
}

// ChangedWhere calls back every client that may cache a file whose handle
// match accepts, as for a change by a local process (Changed): the server
// stopped serving those files' export, and a client must not go on answering
// from its cache of them; its next call on them is answered NFS3ERR_STALE.
func (d *Driver) ChangedWhere(match func(fh []byte) bool) {
	if !d.active.Load() || d.ctx.Err() != nil {
		return
	}
	d.doDirs(d.dirs.ChangedWhere(d.now(), match))
	d.doPermits(d.permits.ChangedAll(d.now())) // rare (an export removed): every permit, not only the export's
	d.do(d.m.ChangedWhere(d.now(), match))
}

// WriteBackWhere calls back every client that may cache a file whose handle
// match accepts (as ChangedWhere) and waits until none of them has a callback
// out or may hold dirty blocks of such a file (each has written back, or was
// fenced at its callback deadline), or until ctx ends: the server is about to
// stop serving those files, and a client's delayed writes must reach them
// first (docs/protocol.md section 7.2).
func (d *Driver) WriteBackWhere(ctx context.Context, match func(fh []byte) bool) error {
	d.ChangedWhere(match)
	if !d.active.Load() {
		return nil
	}
	// Each check scans the table: the wait between them grows, so that a
	// client slow to write back costs a few scans, not one per tick.
	wait := 5 * time.Millisecond
	for d.m.UnsettledWhere(d.now(), match) > 0 {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("consist: clients still writing back: %w", ctx.Err())
		case <-d.ctx.Done():
			t.Stop()
			return d.ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
	return nil
}

// Access applies an NFSv3 request of kind on the file fh names by table client
// c (section 6.1; a protocol client's own reads and writes of files it has open
// go through at once). proceed is called exactly once: nil to go ahead (before
// Access returns, unless callbacks must be answered first), ErrJukebox,
// ErrFenced or ErrGone. During the grace period only an expected client's
// access to a file it reclaimed goes on; others get ErrGrace (a JUKEBOX).
func (d *Driver) Access(c state.ClientID, fh []byte, kind state.AccessKind, proceed func(error)) {
	d.access(state.AccessArgs{File: state.FileIDOf(fh), Handle: fh, Client: c, Kind: kind}, proceed)
}

// BatchAccess is Access for a REINTEGRATE record (state.AccessArgs.Patient):
// it waits for the callbacks it needs, never answered ErrJukebox for the
// time they take.
func (d *Driver) BatchAccess(c state.ClientID, fh []byte, kind state.AccessKind, proceed func(error)) {
	d.access(state.AccessArgs{File: state.FileIDOf(fh), Handle: fh, Client: c, Kind: kind, Patient: true}, proceed)
}

// access is Access with the table's arguments.
func (d *Driver) access(a state.AccessArgs, proceed func(error)) {
	c, fh, kind := a.Client, a.Handle, a.Kind
	if err := d.GraceAccess(c, fh); err != nil {
		proceed(err)
		return
	}
	req := state.ReqID(d.reqs.Add(1))
	v, acts := d.m.PlainAccess(d.now(), req, a)
	if d.tracing() {
		d.trace("table: access", fh, "client", d.clientName(c), "kind", kind, "verdict", v)
		if v == state.Wait {
			inner := proceed
			proceed = func(err error) {
				d.trace("table: access goes on after callbacks", fh, "client", d.clientName(c), "kind", kind, "err", err)
				inner(err)
			}
		}
	}
	switch v {
	case state.Wait:
		d.park(req, func(_ state.OpenReply, err error) { proceed(err) })
		d.do(acts)
	case state.Proceed:
		d.do(acts)
		proceed(nil)
	case state.Jukebox:
		d.met.jukebox.Inc()
		d.do(acts)
		proceed(ErrJukebox)
	default:
		d.do(acts)
		proceed(ErrFenced)
	}
}

// Fenced reports whether table client c is refused on the file fh names (for
// requests Access does not cover, such as COMMIT).
func (d *Driver) Fenced(c state.ClientID, fh []byte) bool {
	return d.m.Fenced(c, state.FileIDOf(fh))
}

// Changed applies a change that a local process on the server machine made to
// the file fh names (the store's change notifier reports it): the table drops
// the file's version and calls back every client that may cache it. A nil fh
// means any file may have changed (the notifier lost events, or stopped):
// every file's version is dropped and every cache called back. It never
// blocks (it is called from the notifier's drain), and does nothing before a
// protocol client registered (nobody caches) or once the driver stops.
func (d *Driver) Changed(fh []byte) {
	if !d.active.Load() || d.ctx.Err() != nil {
		return
	}
	d.localDirChange(fh)
	d.localPermitChange(fh)
	if fh == nil {
		d.log.Warn("file change notifications were lost: every client's cache is called back")
		d.do(d.m.ChangedAll(d.now()))
		return
	}
	acts := d.m.Changed(d.now(), state.FileIDOf(fh))
	if len(acts) > 0 && d.tracing() {
		d.trace("table: changed by a local process", fh, "actions", len(acts))
	}
	d.do(acts)
}
