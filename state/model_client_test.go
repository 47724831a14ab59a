package state_test

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"snfs/state"
	"snfs/state/clientfile"
)

// The both-ends model: the server's table (state.Machine) and, for every
// client and file, the client's machine (clientfile.File), with the
// messages between them. The test plays the drivers: it carries out each
// side's actions, keeps each client's cache (one integer per file, labelled
// with a version) and the server's file, and lets the messages' delivery
// interleave with the applications' opens, reads, writes and releases: OPEN
// answers in transit, callbacks whose work and answer are separate steps (an
// application releases, writes or opens in between), delayed write-backs,
// delayed closes and their timers, JUKEBOX, and server restarts with
// reclaim. After every step it checks:
//
//   - no two writers caching: a client that caches a file it holds open
//     for writing is the only one that caches it;
//   - no stale read: every read returns the latest write (close-to-open and
//     Sprite's stronger promise);
//   - no acknowledged data lost: the server has the latest write, or the one
//     client the server records as possibly dirty has it (and a fresh
//     client's OPEN and read at the end finds it);
//   - callbacks answered as docs/protocol.md 5.1 says: CB_TREAT_AS_CLOSED
//     only with no application open, no OPEN in flight and nothing dirty;
//     CB_STALE only holding nothing;
//   - both ends agree: the server counts exactly the opens the client will
//     CLOSE (its applications', its delayed closes, the answers in transit),
//     records it dirty whenever it is, and caching whenever it caches an
//     open file.
//
// Callbacks are answered within their timeout (no fencing: the old model,
// model_test.go, covers fences, plain clients and pinned holders with a
// hand-written client).

const (
	bFiles   = 2
	bClients = 3 // 1..3; client 4 is the final reader
)

var bt0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func bFile(f int) state.FileID {
	var id state.FileID
	binary.BigEndian.PutUint64(id[8:], uint64(2000+f))
	return id
}

// bOpen is an OPEN the client sent and has not applied the answer of.
type bOpen struct {
	req    state.ReqID
	tok    clientfile.Open
	answer *state.OpenReply // nil: parked at the server
	failed bool             // answered JUKEBOX (or refused)
	// applied: OpenAnswered ran and asked for ActCache; OpenCached (after
	// the driver's I/O: settling the attributes, relabelling) is to come.
	applied bool
}

// bCallback is a callback delivered to a client.
type bCallback struct {
	cb    state.Callback
	begun bool
	tok   clientfile.Callback
	// work is what CallbackBegin asked for from its write-back on, done
	// in a later step: the applications go on meanwhile (caching stopped
	// already for a callback that invalidates).
	work []clientfile.Action
	pt   bool // the client had a passthrough write open when it began
}

// bClient is one client's file: its machine and its cache.
type bClient struct {
	f       *clientfile.File
	val     int    // cached value
	valid   bool   // val is cached (clean or dirty)
	label   uint64 // the version val is labelled with
	handles []state.Mode
	opens   []*bOpen
	calls   []*bCallback
	timerAt time.Time // zero: no timer armed
	// wb is the delayed write-back loop's write-back in progress: its
	// WRITEs are sent, its end (COMMIT, marking clean) is to come.
	wb *clientfile.WriteBack
	// pt: its one application open (for writing) passes through: the
	// kernel reads and writes the cache file itself, cached or not (the
	// pinned mode, docs/protocol.md 10.1). No other open of the file is
	// made meanwhile.
	pt bool
	// parked is a READ or WRITE of the file waiting at the server behind
	// another client's pinned holding; the applications wait with it.
	parked *bAccess
}

// bAccess is a covered READ or WRITE parked at the server.
type bAccess struct {
	req  state.ReqID
	kind state.AccessKind
}

type bWorld struct {
	t       testing.TB
	r       *rand.Rand
	m       *state.Machine
	cfg     state.Config
	now     time.Time
	delay   time.Duration
	nextReq state.ReqID
	nextVal int
	mark    uint64 // versions durably reserved
	pt      bool   // passthrough write opens (and so pinned holders) in this run
	server  [bFiles]int
	latest  [bFiles]int
	cl      [bClients + 2][bFiles]*bClient
	log     []string
}

func newBWorld(t testing.TB, seed uint64) *bWorld {
	w := &bWorld{t: t, r: rand.New(rand.NewPCG(seed, 0xc11e)), now: bt0}
	w.cfg = state.Config{CallbackTimeout: time.Hour, JukeboxAfter: time.Second, RecallBackoff: 500 * time.Millisecond,
		RelinquishIdle: 5 * time.Second, VersionBlock: 8}
	if seed%3 == 1 {
		w.cfg.MaxEntries, w.cfg.Shards, w.cfg.HighWater = 2, 1, 50 // RELINQUISH and reclaiming
	}
	if seed%2 == 1 {
		w.delay = 2 * time.Second
	}
	w.pt = seed%4 >= 2
	for c := range w.cl {
		for f := range bFiles {
			w.cl[c][f] = &bClient{f: clientfile.New(clientfile.Config{CloseDelay: w.delay})}
		}
	}
	w.m = state.New(w.cfg, w.now)
	w.register()
	return w
}

func (w *bWorld) register() {
	for c := 1; c <= bClients+1; c++ {
		w.absorb(w.m.Register(w.now, state.ClientID(c)))
	}
}

func (w *bWorld) logf(format string, args ...any) {
	w.log = append(w.log, fmt.Sprintf("%6.2fs ", w.now.Sub(bt0).Seconds())+fmt.Sprintf(format, args...))
}

func (w *bWorld) fail(format string, args ...any) {
	w.t.Helper()
	tail := w.log[max(0, len(w.log)-50):]
	w.t.Fatalf("%s\nlast steps:\n  %s", fmt.Sprintf(format, args...), strings.Join(tail, "\n  "))
}

func fileOf(id state.FileID) int { return int(binary.BigEndian.Uint64(id[8:]) - 2000) }

// absorb carries out the server's actions.
func (w *bWorld) absorb(acts []state.Action) {
	for _, a := range acts {
		switch a.Kind {
		case state.ActCallback:
			c, f := int(a.Callback.Client), fileOf(a.Callback.File)
			w.logf("  -> callback %v to %d on f%d", a.Callback.Mode, c, f)
			w.m.CallbackSent(w.now, a.Callback)
			w.cl[c][f].calls = append(w.cl[c][f].calls, &bCallback{cb: a.Callback})
		case state.ActProbe:
			w.m.CallbackPathVerified(w.now, a.Client, true)
		case state.ActReserveVersions:
			w.mark = a.Through
			w.absorb(w.m.VersionsReserved(w.now, a.Through, nil))
		case state.ActLease:
		case state.ActProceed:
			w.proceed(a)
		case state.ActReply, state.ActJukebox, state.ActRefuse, state.ActAbandon:
			if !w.accessAnswered(a) {
				w.answered(a)
			}
		default:
			w.fail("unexpected server action %+v", a)
		}
	}
}

// answered: the server answered a parked OPEN.
func (w *bWorld) answered(a state.Action) {
	for c := range w.cl {
		for f := range bFiles {
			for _, o := range w.cl[c][f].opens {
				if o.req != a.Req {
					continue
				}
				w.logf("  -> %v to %d's OPEN of f%d (req %d): %+v", a.Kind, c, f, a.Req, a.Reply)
				if a.Kind != state.ActReply {
					o.failed = true
					w.apply(c, f, o)
					return
				}
				r := a.Reply
				o.answer = &r
				w.maybeApply(c, f, o)
				return
			}
		}
	}
	w.fail("answer to unknown request %+v", a)
}

// advance lets time pass: the server's sweeper, the clients' timers.
func (w *bWorld) advance(d time.Duration) {
	w.now = w.now.Add(d)
	w.logf("tick +%v", d)
	w.absorb(w.m.Tick(w.now))
	for c := range w.cl {
		for f := range bFiles {
			s := w.cl[c][f]
			if !s.timerAt.IsZero() && !w.now.Before(s.timerAt) {
				s.timerAt = time.Time{}
				acts := s.f.TimerFired(w.now)
				w.logf("%d: timer of f%d: %v", c, f, acts)
				w.do(c, f, acts)
			}
		}
	}
}

// quiet reports whether no message is in flight.
func (w *bWorld) quiet() bool { return w.quietBut(false) }

// quietBut is quiet, but with grants true it lets OPEN answers that allow
// caching be in the client's hands (OpenAnswered applied, OpenCached to
// come): the mount settles the attributes and relabels its cache between
// them, calls to the server that a restart may cross, and its reclaim runs
// in between.
func (w *bWorld) quietBut(grants bool) bool {
	for c := range w.cl {
		for f := range bFiles {
			s := w.cl[c][f]
			for _, o := range s.opens {
				if !grants || !o.applied {
					return false
				}
			}
			if len(s.calls) > 0 || s.wb != nil || s.parked != nil {
				return false
			}
		}
	}
	return true
}

// anyPassthrough reports whether some client has a passthrough open.
func (w *bWorld) anyPassthrough() bool {
	for c := range w.cl {
		for f := range bFiles {
			if w.cl[c][f].pt {
				return true
			}
		}
	}
	return false
}

// restart: the server restarts (its table lost, versions durable); every
// client registers again and reclaims what it holds, then writes its dirty
// data back.
func (w *bWorld) restart() {
	w.logf("server restart")
	cfg := w.cfg
	cfg.VersionBase = w.mark
	w.m = state.New(cfg, w.now)
	w.mark += cfg.VersionBlock
	w.absorb(w.m.VersionsReserved(w.now, w.mark, nil))
	w.register()
	for c := range w.cl {
		for f := range bFiles {
			rd, wr, caching, dirty, v, ok := w.cl[c][f].f.ReclaimItem()
			if ok {
				w.m.Reclaim(w.now, state.ReclaimArgs{File: bFile(f), Handle: []byte{byte(f)}, Client: state.ClientID(c),
					Readers: uint32(rd), Writers: uint32(wr), Caching: caching, Dirty: dirty, Version: v})
			}
		}
	}
	for c := range w.cl {
		for f := range bFiles {
			w.do(c, f, w.cl[c][f].f.ServerRestarted(false))
		}
	}
}

func (w *bWorld) step() {
	c, f := 1+w.r.IntN(bClients), w.r.IntN(bFiles)
	s := w.cl[c][f]
	switch w.r.IntN(12) {
	case 0, 1:
		w.open(c, f, state.Mode(1+w.r.IntN(2)))
	case 2:
		if len(s.handles) > 0 && !w.protoBusy(c, f) && s.parked == nil {
			w.release(c, f)
		}
	case 3:
		if len(s.handles) > 0 && s.parked == nil {
			w.read(c, f)
		}
	case 4:
		if slices.Contains(s.handles, state.Write) && s.parked == nil {
			w.write(c, f)
		}
	case 5:
		for _, o := range s.opens {
			if o.applied {
				w.cached(c, f, o)
				break
			}
			if o.answer != nil {
				w.apply(c, f, o)
				break
			}
		}
	case 6, 7:
		if len(s.calls) > 0 {
			bc := s.calls[w.r.IntN(len(s.calls))]
			switch {
			case !bc.begun:
				w.callbackBegin(c, f, bc)
			case len(bc.work) > 0:
				w.callbackWork(c, f, bc)
			default:
				w.callbackEnd(c, f, bc)
			}
		}
	case 8:
		w.advance([...]time.Duration{100 * time.Millisecond, 700 * time.Millisecond, 1500 * time.Millisecond}[w.r.IntN(3)])
	case 9: // the delayed write-back loop: its start, or its end
		if s.wb != nil {
			w.writeBackEnd(c, f)
			w.do(c, f, s.f.IdleClean())
		} else if s.f.Dirty() {
			w.logf("%d: delayed write-back of f%d", c, f)
			w.writeBackBegin(c, f)
		}
	case 10:
		// Passthrough writers included: a reclaimed caching writer that
		// shares the file is pinned again at once (state/reclaim.go repin,
		// docs/protocol.md 10.1).
		// So may OPEN answers granting caching that the client has not
		// applied yet (quietBut).
		if w.r.IntN(8) == 0 && w.quietBut(true) {
			w.restart()
		}
	case 11: // a callback resent, or crossing a CLOSE, is served as any
	}
}

// check verifies the invariants listed at the top.
func (w *bWorld) check() {
	for f := range bFiles {
		fi, _ := w.m.Lookup(w.now, bFile(f))
		cachingWriter := 0
		for c := 1; c < len(w.cl); c++ {
			s := w.cl[c][f]
			if s.f.Caching() && s.f.Opens(state.Write)+s.f.Kept(state.Write) > 0 {
				cachingWriter = c
			}
		}
		for c := 1; c < len(w.cl); c++ {
			s := w.cl[c][f]
			if cachingWriter != 0 && c != cachingWriter && s.f.Caching() && s.f.Held() > 0 {
				w.fail("f%d: %d caches it for writing while %d caches it too", f, cachingWriter, c)
			}
			var h state.HolderInfo
			for _, x := range fi.Holders {
				if int(x.Client) == c {
					h = x
				}
			}
			r, wr := s.f.Opens(state.Read)+s.f.Kept(state.Read), s.f.Opens(state.Write)+s.f.Kept(state.Write)
			for _, o := range s.opens {
				if o.answer != nil && !o.applied {
					if o.tok.Mode == state.Write {
						wr++
					} else {
						r++
					}
				}
			}
			if int(h.Readers) != r || int(h.Writers) != wr {
				w.fail("f%d: the server counts %d readers %d writers for %d, the client %d %d", f, h.Readers, h.Writers, c, r, wr)
			}
			if s.f.Dirty() && !h.Dirty {
				w.fail("f%d: %d is dirty, the server does not know: %+v", f, c, fi)
			}
			if h.Pinned && !s.f.Pinned() {
				w.fail("f%d: the server has %d pinned, the client is not: %+v", f, c, fi)
			}
			if s.f.Caching() && s.f.Held() > 0 && !h.Caching {
				w.fail("f%d: %d caches an open file, the server does not know: %+v", f, c, fi)
			}
			if s.f.Dirty() && (!s.valid || s.val != w.latest[f]) && w.server[f] != w.latest[f] {
				w.fail("f%d: %d is dirty with %d, latest %d not on the server (%d)", f, c, s.val, w.latest[f], w.server[f])
			}
		}
		if w.server[f] != w.latest[f] {
			if d, ok := fi.LastWriter(); !ok || !w.cl[d][f].f.Dirty() || w.cl[d][f].val != w.latest[f] {
				w.fail("f%d: the latest write %d is nowhere the server would find it (server %d, %+v)", f, w.latest[f], w.server[f], fi)
			}
		}
	}
}

// drain delivers every message, releases every open, lets the delayed
// closes expire, then has a fresh client open and read every file.
func (w *bWorld) drain() {
	w.logf("drain")
	for range 400 {
		busy := false
		for c := 1; c <= bClients; c++ {
			for f := range bFiles {
				s := w.cl[c][f]
				for _, o := range s.opens {
					if o.applied {
						w.cached(c, f, o)
						busy = true
						break
					}
					if o.answer != nil {
						w.apply(c, f, o)
						busy = true
						break
					}
				}
				if s.wb != nil {
					w.writeBackEnd(c, f)
					busy = true
				}
				if w.serveOne(c, f) {
					busy = true
				} else if len(s.handles) > 0 && !w.protoBusy(c, f) && s.parked == nil {
					w.release(c, f)
					busy = true
				}
				w.check()
			}
		}
		if !busy {
			if w.quiet() {
				break
			}
			w.advance(time.Second)
			w.check()
		}
	}
	if !w.quiet() {
		w.fail("messages still in flight after draining")
	}
	if w.r.IntN(2) == 0 {
		// Unmount: the kept opens are CLOSEd now.
		for c := 1; c <= bClients; c++ {
			for f := range bFiles {
				acts := w.cl[c][f].f.CloseAllDelayed()
				w.logf("%d unmounts f%d: %v", c, f, acts)
				w.do(c, f, acts)
				w.check()
			}
		}
	}
	w.advance(w.delay + time.Second)
	w.check()
	const reader = bClients + 1
	for f := range bFiles {
		w.open(reader, f, state.Read)
		for range 100 {
			busy := false
			for c := 1; c <= bClients; c++ {
				busy = w.serveOne(c, f) || busy
			}
			s := w.cl[reader][f]
			if len(s.opens) == 0 && !busy {
				break
			}
			if len(s.opens) > 0 && s.opens[0].applied {
				w.cached(reader, f, s.opens[0])
			} else if len(s.opens) > 0 && s.opens[0].answer != nil {
				w.apply(reader, f, s.opens[0])
			} else if !busy {
				w.advance(100 * time.Millisecond)
			}
			w.check()
		}
		if s := w.cl[reader][f]; len(s.handles) == 0 {
			w.fail("f%d: the final reader's OPEN did not succeed", f)
		}
		w.read(reader, f)
	}
}

// serveOne takes the next step of c's first callback about f, if any.
func (w *bWorld) serveOne(c, f int) bool {
	s := w.cl[c][f]
	if len(s.calls) == 0 {
		return false
	}
	if bc := s.calls[0]; !bc.begun {
		w.callbackBegin(c, f, bc)
	} else {
		w.callbackEnd(c, f, bc)
	}
	return true
}

func runBWorld(t testing.TB, seed uint64, steps int) {
	w := newBWorld(t, seed)
	for range steps {
		w.step()
		w.check()
	}
	w.drain()
}

// TestModelBothEnds runs the both-ends model over deterministic seeds
// (STATE_BOTH_SEEDS=N explores more).
func TestModelBothEnds(t *testing.T) {
	n, steps := 2000, 300
	if testing.Short() {
		n = 200
	}
	if v, err := strconv.Atoi(os.Getenv("STATE_BOTH_SEEDS")); err == nil && v > 0 {
		n, steps = v, 1000
	}
	for seed := range n {
		if !t.Run(fmt.Sprint(seed), func(t *testing.T) { runBWorld(t, uint64(seed), steps) }) {
			break
		}
	}
}

// FuzzModelBothEnds explores seeds and run lengths beyond TestModelBothEnds's.
func FuzzModelBothEnds(f *testing.F) {
	f.Add(uint64(4), uint16(300))
	f.Add(uint64(18), uint16(300))
	f.Fuzz(func(t *testing.T, seed uint64, steps uint16) {
		runBWorld(t, seed, int(steps%2000))
	})
}
