package state

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The property test drives the machine with random sequences of opens, closes,
// reads, writes, plain NFS accesses, callback answers (and failures), time
// passing and client deaths, over three protocol clients, two plain clients and
// two files. The clients are simulated Spritely clients with caches (delayed
// writes, delayed closes), each file's content is one integer, and every read
// checks Sprite's promise: it returns the most recently written value. After
// every step it checks the table's invariants.
//
// A caching writer may answer a callback that invalidates with Pinned (the
// mount whose kernel writes into its cache file itself, docs/protocol.md
// 10.1): it writes back, and from then on, while it has write opens, it
// answers every callback Pinned after writing back, writes into its cache
// and reads its own dirty value or the server's. Every other client's read
// or write of the file, covered ones included, may then wait (parked), and
// must find the pinned holder's writes on the server when it goes on. The
// write-back at its last write close may fail: that CLOSE says dirty, and
// it stays pinned until a callback's write-back.
//
// A client called back to write back (CB_WRITEBACK, CB_RELINQUISH) keeps
// caching: an application write may land in its cache while it writes back,
// and the application may close the file (CLOSE, dirty) before the answer.
//
// A client applies an OPEN's answer after the server sent it, and may serve a
// callback in between (the answer is in transit: a mount serves callbacks on
// their own goroutines, issue 22 item 3); it then counts the OPEN as in
// flight (no CB_STALE, no CB_TREAT_AS_CLOSED) and, if the callback took
// caching away, does not cache on that answer. An application write may land
// while a callback that invalidates writes back: the client stopped caching
// before the write-back, so the write goes through after it. The client
// logic before that (oldLogic) is what TestPropertyFindsOldClientWindows
// shows the checker finds.

const (
	nFiles   = 2
	nClients = 3 // protocol clients 1..3
)

var plainClients = [...]ClientID{100, 101}

// source gives the random choices: a PRNG, or a fuzzer's bytes.
type source interface {
	intn(n int) int
	done() bool
}

type prng struct {
	r    *rand.Rand
	left int
}

func (p *prng) intn(n int) int { p.left--; return p.r.IntN(n) }
func (p *prng) done() bool     { return p.left <= 0 }

type bytesSource struct{ b []byte }

func (s *bytesSource) intn(n int) int {
	if len(s.b) == 0 {
		return 0
	}
	v := int(s.b[0])
	s.b = s.b[1:]
	return v % n
}
func (s *bytesSource) done() bool { return len(s.b) == 0 }

// cstate is a simulated client's view of one file.
type cstate struct {
	appR, appW   int // the applications' opens
	sentR, sentW int // opens the server knows of (more than app*: delayed closes)
	caching      bool
	valid        bool // cached value present
	dirty        bool
	tag          uint64 // version of the last OPEN reply
	val          int
	pending      bool // an OPEN is parked at the server
	parked       bool // a read or write of an open file is parked (behind a pinned holder)
	pinned       bool // it answered Pinned and has not ended it (its kernel writes into its cache)
	revoked      bool // a callback took caching away while an OPEN was pending
}

type pendOpen struct {
	c    ClientID
	f    int
	mode Mode
}

type pendPlain struct {
	c     ClientID
	f     int
	kind  AccessKind
	proto bool // a protocol client's read or write of a file it has open
	since int  // the file's latest value when the request arrived
	lost  int  // the file's losses (w.lost) when the request arrived
}

type outCb struct {
	cb   Callback
	void bool // its client was fenced or died meanwhile: it reacts no more
}

type world struct {
	t         testing.TB
	src       source
	m         *Machine
	cfg       Config
	now       time.Time
	nextReq   ReqID
	nextVal   int
	server    [nFiles]int
	latest    [nFiles]int
	lost      [nFiles]int // dirty data lost (fences, deaths): latest went back to the server's
	cl        [nClients + 1][nFiles]cstate
	pendOpens map[ReqID]pendOpen
	pendPlain map[ReqID]pendPlain
	calls     []outCb
	fences    []Action
	reserves  []uint64
	leased    [nFiles]bool // the last ActLease of each file took its lease
	log       []string
	transit   []inTransit
	old       oldLogic
}

func newWorld(t testing.TB, src source, tight bool) *world {
	cfg := Config{CallbackTimeout: 2 * time.Second, JukeboxAfter: time.Second, RecallBackoff: 500 * time.Millisecond,
		PlainHold: 60 * time.Second, RelinquishIdle: 5 * time.Second, VersionBlock: 8}
	if tight {
		cfg.MaxEntries, cfg.Shards, cfg.HighWater = 2, 1, 50
	}
	w := &world{t: t, src: src, cfg: cfg, now: t0, pendOpens: map[ReqID]pendOpen{}, pendPlain: map[ReqID]pendPlain{}}
	w.m = New(cfg, t0)
	for c := ClientID(1); c <= nClients; c++ {
		w.absorb(w.m.Register(w.now, c))
	}
	return w
}

func fileID(f int) FileID { return fid(1000 + f) }

func (w *world) fail(format string, args ...any) {
	w.t.Helper()
	tail := w.log[max(0, len(w.log)-40):]
	w.t.Fatalf("%s\nlast steps:\n  %s", fmt.Sprintf(format, args...), strings.Join(tail, "\n  "))
}

func (w *world) logf(format string, args ...any) {
	w.log = append(w.log, fmt.Sprintf("%6.2fs ", w.now.Sub(t0).Seconds())+fmt.Sprintf(format, args...))
}

func (w *world) absorb(acts []Action) {
	for _, a := range acts {
		switch a.Kind {
		case ActCallback:
			w.logf("  -> callback %v to %d on f%d (seq %d)", a.Callback.Mode, a.Callback.Client, a.Callback.File[15]-0xe8, a.Callback.Seq)
			w.calls = append(w.calls, outCb{cb: a.Callback})
			if w.src.intn(4) != 0 {
				w.m.CallbackSent(w.now, a.Callback)
			}
		case ActProbe:
			ok := w.src.intn(8) != 0
			w.logf("  -> probe %d: %v", a.Client, ok)
			w.m.CallbackPathVerified(w.now, a.Client, ok)
		case ActReserveVersions:
			if w.src.intn(2) == 0 {
				w.absorb(w.m.VersionsReserved(w.now, a.Through, nil))
			} else {
				w.reserves = append(w.reserves, a.Through) // persisted later
			}
		case ActLease:
			f := a.File[15] - 0xe8
			if w.leased[f] == a.Take {
				w.fail("f%d: lease %v twice", f, a.Take)
			}
			w.leased[f] = a.Take
		case ActFence:
			w.logf("  -> fence %d on f%d", a.Client, a.File[15]-0xe8)
			w.fences = append(w.fences, a)
			// The data is lost now, before the actions after this one run.
			if s := &w.cl[a.Client][a.File[15]-0xe8]; s.dirty {
				w.lose(int(a.File[15] - 0xe8))
				s.dirty = false
			}
		case ActReply:
			po, ok := w.pendOpens[a.Req]
			if !ok {
				w.fail("reply to unknown request %d", a.Req)
			}
			delete(w.pendOpens, a.Req)
			w.logf("  -> reply %d (%d f%d %v): %+v", a.Req, po.c, po.f, po.mode, a.Reply)
			w.replied(po.c, po.f, po.mode, a.Reply)
		case ActProceed:
			pp, ok := w.pendPlain[a.Req]
			if !ok {
				w.fail("proceed of unknown request %d", a.Req)
			}
			delete(w.pendPlain, a.Req)
			w.logf("  -> proceed %d (%d f%d %v)", a.Req, pp.c, pp.f, pp.kind)
			if pp.proto {
				w.cl[pp.c][pp.f].parked = false
			}
			w.plainDone(pp.c, pp.f, pp.kind, pp.since, pp.lost)
		case ActJukebox, ActAbandon, ActRefuse:
			w.logf("  -> %v %d", a.Kind, a.Req)
			if po, ok := w.pendOpens[a.Req]; ok {
				if a.Kind == ActRefuse && !w.m.Fenced(po.c, fileID(po.f)) {
					w.fail("an OPEN refused, its client not fenced")
				}
				delete(w.pendOpens, a.Req)
				w.cl[po.c][po.f].pending, w.cl[po.c][po.f].revoked = false, false
			} else if pp, ok := w.pendPlain[a.Req]; ok {
				delete(w.pendPlain, a.Req)
				if pp.proto {
					w.cl[pp.c][pp.f].parked = false
				}
			} else {
				w.fail("%v for unknown request %d", a.Kind, a.Req)
			}
		default:
			w.fail("unexpected action %+v", a)
		}
	}
}

// react handles the fences the last input caused: the client, silent until
// now, tries to write, is refused, and gives the file up (its dirty data lost).
func (w *world) react() {
	for len(w.fences) > 0 {
		a := w.fences[0]
		w.fences = w.fences[1:]
		c, f := a.Client, int(a.File[15]-0xe8)
		for i := range w.calls {
			if w.calls[i].cb.Client == c && w.calls[i].cb.File == a.File {
				w.calls[i].void = true
			}
		}
		for i := range w.transit {
			if w.transit[i].c == c && w.transit[i].f == f {
				w.transit[i].void = true
			}
		}
		if !w.m.Fenced(c, a.File) {
			w.fail("fence of %d on f%d not recorded", c, f)
		}
		w.nextReq++
		if v, acts := w.m.PlainAccess(w.now, w.nextReq, AccessArgs{File: a.File, Client: c, Kind: AccessWrite}); v != Refuse || len(acts) != 0 {
			w.fail("fenced client's write: %v %+v", v, acts)
		}
		w.forget(c, f)
	}
}

// forget resets a client's state for a file; dirty data is lost.
func (w *world) forget(c ClientID, f int) {
	s := &w.cl[c][f]
	if s.dirty {
		w.lose(f)
	}
	pending, parked, revoked := s.pending, s.parked, s.revoked
	*s = cstate{pending: pending, parked: parked, revoked: revoked}
}

func (w *world) openReplied(c ClientID, f int, mode Mode, r OpenReply) {
	s := &w.cl[c][f]
	if mode == Write {
		s.sentW++
		s.appW++
	} else {
		s.sentR++
		s.appR++
	}
	if r.CacheEnabled {
		fi, _ := w.m.Lookup(w.now, fileID(f))
		for _, h := range fi.Holders {
			if h.Client != c && h.Dirty {
				w.fail("cacheable reply to %d while %d holds dirty blocks of f%d", c, h.Client, f)
			}
		}
	}
	if s.valid && s.tag != r.Version && s.tag != r.OldVersion {
		// (A pinned holder's versions move with others' writes between its
		// write-backs; it takes nothing from the version.)
		if s.dirty && !s.pinned {
			w.fail("client %d has dirty f%d of version %d, reply %+v", c, f, s.tag, r)
		}
		s.valid = false
	}
	s.tag = r.Version
	s.caching = r.CacheEnabled
	if !s.caching {
		w.flush(c, f)
		s.valid = false
	}
}

// flush writes a client's dirty value back (a covered WRITE: never parked).
func (w *world) flush(c ClientID, f int) {
	s := &w.cl[c][f]
	if !s.dirty {
		return
	}
	w.nextReq++
	v, acts := w.m.PlainAccess(w.now, w.nextReq, AccessArgs{File: fileID(f), Client: c, Kind: AccessWrite})
	if v != Proceed || len(acts) != 0 {
		w.fail("write-back by %d of f%d: %v %+v", c, f, v, acts)
	}
	w.server[f] = s.val
	s.dirty = false
}

// access sends protocol client c's READ or WRITE of f, which it has open. It
// proceeds at once (the caller does the rest), or waits behind another
// client's pinned holding (access reports true: plainDone finishes it).
func (w *world) access(c ClientID, f int, k AccessKind) (parked bool) {
	w.nextReq++
	req := w.nextReq
	v, acts := w.m.PlainAccess(w.now, req, AccessArgs{File: fileID(f), Client: c, Kind: k})
	if v == Proceed && len(acts) == 0 {
		return false
	}
	if v != Wait {
		w.fail("%v by %d of f%d it has open: %v %+v", k, c, f, v, acts)
	}
	fi, _ := w.m.Lookup(w.now, fileID(f))
	if !slices.ContainsFunc(fi.Holders, func(h HolderInfo) bool { return h.Client != c && h.Pinned }) {
		w.fail("%v by %d of f%d it has open waits, and no other client is pinned: %+v", k, c, f, fi)
	}
	w.logf("%d: %v f%d waits behind a pinned holder (req %d)", c, k, f, req)
	w.pendPlain[req] = pendPlain{c: c, f: f, kind: k, proto: true, since: w.latest[f], lost: w.lost[f]}
	w.cl[c][f].parked = true
	w.absorb(acts)
	return true
}

// plainDone finishes c's access of f, which arrived when f's latest value
// was since and its losses lost.
func (w *world) plainDone(c ClientID, f int, k AccessKind, since, lost int) {
	fi, _ := w.m.Lookup(w.now, fileID(f))
	for _, h := range fi.Holders {
		if h.Client != c && h.Pinned && !h.Fenced {
			// It stays the dirty holder; what it wrote must be on the
			// server before anyone else's request goes on.
			if w.cl[h.Client][f].dirty {
				w.fail("%v by %d of f%d goes on while pinned %d has unwritten data", k, c, f, h.Client)
			}
			continue
		}
		// A GETATTR leaves a caching writer caching (and so maybe dirty):
		// only what the server has when it goes on matters.
		if h.Client != c && k != AccessGetattr && (h.Dirty || (h.Caching && k != AccessRead)) {
			w.fail("plain %v by %d of f%d while %+v", k, c, f, h)
		}
	}
	if k == AccessGetattr {
		// What was written before it arrived (unless a fence or a death
		// lost it since); a caching writer's writes since (during its
		// write-back) need not be there.
		if w.lost[f] == lost && w.server[f] < since {
			w.fail("plain GETATTR by %d of f%d: %d, latest when it arrived %d", c, f, w.server[f], since)
		}
		return
	}
	if k == AccessRead {
		if w.server[f] != w.latest[f] {
			w.fail("plain read by %d of f%d: %d, latest %d", c, f, w.server[f], w.latest[f])
		}
		return
	}
	w.nextVal++
	w.server[f], w.latest[f] = w.nextVal, w.nextVal
}

func (w *world) step() {
	c := ClientID(1 + w.src.intn(nClients))
	f := w.src.intn(nFiles)
	s := &w.cl[c][f]
	switch op := w.src.intn(15); op {
	case 0, 1: // open
		mode := Mode(1 + w.src.intn(2))
		if s.pending || s.parked {
			return
		}
		if (mode == Read && s.sentR > s.appR) || (mode == Write && s.sentW > s.appW) {
			// A delayed close is reused without asking the server.
			if mode == Write {
				s.appW++
			} else {
				s.appR++
			}
			w.logf("%d reuses its delayed open of f%d for %v", c, f, mode)
			return
		}
		w.nextReq++
		req := w.nextReq
		w.pendOpens[req] = pendOpen{c, f, mode}
		s.pending = true
		w.logf("%d opens f%d for %v (req %d)", c, f, mode, req)
		r, acts := w.m.Open(w.now, req, OpenArgs{File: fileID(f), Handle: []byte{byte(f)}, Client: c, Mode: mode})
		w.absorb(acts)
		switch r.Verdict {
		case Proceed:
			delete(w.pendOpens, req)
			w.logf("  = %+v", r.Reply)
			w.replied(c, f, mode, r.Reply)
		case Jukebox:
			delete(w.pendOpens, req)
			s.pending, s.revoked = false, false
			w.logf("  = jukebox")
		case Wait:
			w.logf("  = wait")
		default:
			w.fail("open: %v", r.Verdict)
		}
	case 2: // close
		mode := Mode(1 + w.src.intn(2))
		if (mode == Read && s.appR == 0) || (mode == Write && s.appW == 0) || s.parked {
			return
		}
		if mode == Read {
			s.appR--
		} else {
			s.appW--
		}
		if w.src.intn(3) == 0 {
			w.logf("%d closes f%d for %v (delayed)", c, f, mode)
			return
		}
		if mode == Read {
			s.sentR--
		} else {
			s.sentW--
		}
		if mode == Write && s.sentW+w.transitWrites(c, f) == 0 && s.pinned {
			if s.dirty && w.src.intn(4) == 0 {
				// The write-back at the close failed: the CLOSE says
				// dirty, and it stays the pinned holder until a
				// callback's write-back (or a clean CLOSE).
				w.logf("%d's write-back of f%d at its last write close fails", c, f)
			} else {
				// Its kernel's last write open: what it wrote is made
				// durable at close, and the pinning ends.
				w.flush(c, f)
				s.pinned, s.valid = false, false
			}
		}
		w.logf("%d closes f%d for %v (dirty %v)", c, f, mode, s.dirty)
		w.absorb(w.m.Close(w.now, CloseArgs{File: fileID(f), Client: c, Mode: mode, Dirty: s.dirty}))
	case 3, 4: // read
		if s.appR+s.appW == 0 || s.pending || s.parked {
			return
		}
		val := s.val
		if s.pinned && s.dirty {
			w.logf("%d reads f%d: %d (its own, pinned)", c, f, val)
		} else if !(s.caching && s.valid) {
			if w.access(c, f, AccessRead) {
				return
			}
			val = w.server[f]
			if s.caching {
				s.valid, s.val = true, val
			}
		}
		w.logf("%d reads f%d: %d (cached %v)", c, f, val, s.caching && s.valid)
		if val != w.latest[f] {
			w.fail("client %d read f%d = %d, latest %d (state %+v)", c, f, val, w.latest[f], *s)
		}
	case 5: // write
		if s.appW == 0 || s.pending || s.parked {
			return
		}
		if s.caching || s.pinned {
			w.nextVal++
			w.latest[f] = w.nextVal
			s.valid, s.val, s.dirty = true, w.nextVal, true
			w.logf("%d writes f%d = %d into its cache (pinned %v)", c, f, w.nextVal, s.pinned)
			return
		}
		if w.access(c, f, AccessWrite) {
			return
		}
		w.nextVal++
		w.latest[f] = w.nextVal
		w.logf("%d writes f%d = %d through", c, f, w.nextVal)
		w.server[f] = w.nextVal
	case 6, 7: // a plain client
		p := plainClients[w.src.intn(len(plainClients))]
		for _, pp := range w.pendPlain {
			if pp.c == p {
				return
			}
		}
		k := AccessRead
		if w.src.intn(2) == 0 {
			k = AccessGetattr
		}
		if op == 7 {
			k = AccessKind(2 + w.src.intn(4))
		}
		w.nextReq++
		req := w.nextReq
		w.logf("plain %d: %v f%d (req %d)", p, k, f, req)
		w.pendPlain[req] = pendPlain{c: p, f: f, kind: k, since: w.latest[f], lost: w.lost[f]}
		v, acts := w.m.PlainAccess(w.now, req, AccessArgs{File: fileID(f), Handle: []byte{byte(f)}, Client: p, Kind: k})
		w.absorb(acts)
		switch v {
		case Proceed:
			delete(w.pendPlain, req)
			w.plainDone(p, f, k, w.latest[f], w.lost[f])
		case Wait:
			w.logf("  = wait")
		default:
			w.fail("plain access: %v", v)
		}
	case 8, 9, 10: // a client answers a callback
		if len(w.calls) == 0 {
			return
		}
		i := w.src.intn(len(w.calls))
		oc := w.calls[i]
		w.calls = slices.Delete(w.calls, i, i+1)
		w.answer(oc, w.src.intn(16) == 0)
	case 11: // time passes
		d := [...]time.Duration{10 * time.Millisecond, 300 * time.Millisecond, time.Second, 3 * time.Second, 61 * time.Second}[w.src.intn(5)]
		w.now = w.now.Add(d)
		w.logf("tick +%v", d)
		w.absorb(w.m.Tick(w.now))
	case 12: // a client dies (and comes back with an empty cache)
		if w.src.intn(4) != 0 {
			return
		}
		w.logf("client %d dies", c)
		for i := range w.calls {
			if w.calls[i].cb.Client == c {
				w.calls[i].void = true
			}
		}
		var mine []ReqID
		for req, po := range w.pendOpens {
			if po.c == c {
				mine = append(mine, req)
			}
		}
		for f := range nFiles {
			w.forget(c, f)
		}
		w.transit = slices.DeleteFunc(w.transit, func(tr inTransit) bool { return tr.c == c })
		w.absorb(w.m.ClientGone(w.now, c))
		for _, req := range mine {
			if _, still := w.pendOpens[req]; still {
				w.fail("parked open %d of a dead client not abandoned", req)
			}
		}
		for req, pp := range w.pendPlain {
			if pp.c == c {
				w.fail("parked access %d of a dead client not abandoned", req)
			}
		}
		for f := range nFiles {
			w.cl[c][f].pending, w.cl[c][f].parked, w.cl[c][f].revoked = false, false, false
		}
		w.absorb(w.m.Register(w.now, c))
	case 13: // the driver has persisted a version block
		for len(w.reserves) > 0 {
			through := w.reserves[0]
			w.reserves = w.reserves[1:]
			w.logf("versions reserved through %d", through)
			w.absorb(w.m.VersionsReserved(w.now, through, nil))
		}
	case 14: // the client applies an OPEN's answer that was in transit
		if len(w.transit) == 0 {
			return
		}
		i := w.src.intn(len(w.transit))
		tr := w.transit[i]
		w.transit = slices.Delete(w.transit, i, i+1)
		w.deliver(tr)
	}
	w.react()
}

// current reports whether cb is still out as far as the machine knows: not
// timed out (a late failure is ignored: the client was fenced then, or held
// nothing; what it holds now it was granted since).
func (w *world) current(cb Callback) bool {
	s := w.m.shard(cb.File)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.files[cb.File]
	if e == nil || e.pend == nil {
		return false
	}
	oc := e.call(cb.Client)
	return oc != nil && oc.seq == cb.Seq
}

// check verifies the table's invariants against the simulated clients.
func (w *world) check() {
	for f := range nFiles {
		fi, _ := w.m.Lookup(w.now, fileID(f))
		var cachingWriter, dirty ClientID
		pinned := false // the dirty holder is pinned: others' requests wait for its write-backs
		open := 0
		for _, h := range fi.Holders {
			o := h.Readers+h.Writers > 0 || h.Plain
			if o {
				open++
			}
			if h.Caching && (h.Writers > 0 || h.PlainWrite) {
				cachingWriter = h.Client
			}
			if h.Dirty {
				if dirty != 0 {
					w.fail("f%d: two dirty clients %d and %d", f, dirty, h.Client)
				}
				dirty, pinned = h.Client, h.Pinned
			}
			if h.Pinned && !h.Dirty {
				// (A pinned holder without a write open: its last write
				// CLOSE said dirty.)
				w.fail("f%d: pinned holder %+v, want it dirty", f, h)
			}
			if h.Caching && fi.State == WriteShared {
				w.fail("f%d: %d caching a WRITE_SHARED file", f, h.Client)
			}
		}
		if (dirty != 0) != w.leased[f] {
			w.fail("f%d: leased %v, dirty holder %d: %+v", f, w.leased[f], dirty, fi)
		}
		for _, h := range fi.Holders {
			o := h.Readers+h.Writers > 0 || h.Plain
			if cachingWriter != 0 && h.Client != cachingWriter && o {
				w.fail("f%d: %d caches and writes while %d has it open: %+v", f, cachingWriter, h.Client, fi)
			}
			if dirty != 0 && h.Client != dirty && o && !pinned {
				w.fail("f%d: %d may be dirty while %d has it open: %+v", f, dirty, h.Client, fi)
			}
		}
		for c := ClientID(1); c <= nClients; c++ {
			s := w.cl[c][f]
			// Opens whose answers are in transit are the server's already.
			for _, tr := range w.transit {
				if tr.c == c && tr.f == f && !tr.void {
					if tr.mode == Write {
						s.sentW++
					} else {
						s.sentR++
					}
				}
			}
			var h HolderInfo
			for _, x := range fi.Holders {
				if x.Client == c {
					h = x
				}
			}
			if int(h.Readers) != s.sentR || int(h.Writers) != s.sentW {
				w.fail("f%d: server counts %d readers %d writers for %d, client %+v", f, h.Readers, h.Writers, c, s)
			}
			if s.dirty && !h.Dirty {
				w.fail("f%d: client %d is dirty, the server does not know: %+v", f, c, fi)
			}
			if s.caching && s.sentR+s.sentW > 0 && !h.Caching {
				w.fail("f%d: client %d caches an open file, the server does not know: %+v", f, c, fi)
			}
			if s.pinned != h.Pinned && !h.Fenced {
				w.fail("f%d: client %d pinned %v, the server says %v: %+v", f, c, s.pinned, h.Pinned, fi)
			}
		}
	}
}

// drain answers every callback and lets time pass until nothing is in flight.
func (w *world) drain() {
	w.logf("drain")
	for range 100 {
		for len(w.reserves) > 0 {
			through := w.reserves[0]
			w.reserves = w.reserves[1:]
			w.absorb(w.m.VersionsReserved(w.now, through, nil))
		}
		for len(w.calls) > 0 {
			oc := w.calls[0]
			w.calls = w.calls[1:]
			w.answer(oc, false)
			w.check()
		}
		for len(w.transit) > 0 {
			tr := w.transit[0]
			w.transit = w.transit[1:]
			w.deliver(tr)
			w.check()
		}
		if len(w.pendOpens)+len(w.pendPlain)+len(w.calls) == 0 {
			break
		}
		w.now = w.now.Add(w.cfg.JukeboxAfter)
		w.absorb(w.m.Tick(w.now))
		w.react()
		w.check()
	}
	if n := len(w.pendOpens) + len(w.pendPlain) + len(w.calls) + len(w.transit); n != 0 {
		w.fail("still in flight after draining: %v %v %v %v", w.pendOpens, w.pendPlain, w.calls, w.transit)
	}
	for f := range nFiles {
		if fi, _ := w.m.Lookup(w.now, fileID(f)); fi.Waiting != 0 || fi.Callbacks != 0 {
			w.fail("f%d still busy: %+v", f, fi)
		}
	}
}

func runWorld(t testing.TB, src source, tight bool) { runWorldWith(t, src, tight, oldLogic{}) }

func runWorldWith(t testing.TB, src source, tight bool, old oldLogic) {
	w := newWorld(t, src, tight)
	w.old = old
	for !src.done() {
		w.step()
		w.check()
	}
	w.drain()
}

func TestProperty(t *testing.T) {
	n, steps := 3000, 400
	if testing.Short() {
		n = 300
	}
	// STATE_PROPERTY_SEEDS=100000 explores more (the seeds are deterministic).
	if v, err := strconv.Atoi(os.Getenv("STATE_PROPERTY_SEEDS")); err == nil && v > 0 {
		n, steps = v, 1000
	}
	for seed := range n {
		src := &prng{r: rand.New(rand.NewPCG(uint64(seed), 0x5717e)), left: steps}
		ok := t.Run(fmt.Sprint(seed), func(t *testing.T) { runWorld(t, src, seed%2 == 1) })
		if !ok {
			break
		}
	}
}

func FuzzStateMachine(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 1, 1, 0, 1, 8, 0, 0, 11, 3})
	f.Add([]byte("\x01\x00\x01\x01\x02\x00\x01\x00\x08\x00\x00\x06\x01\x00\x0b\x04\x0c\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		runWorld(t, &bytesSource{b: b[1:]}, b[0]&1 == 1)
	})
}

// TestPropertyLateTreatAsClosed replays seed 38070 of the 100,000-seed run
// (STATE_PROPERTY_SEEDS=100000): a client whose INVALIDATE timed out while it
// held nothing (so it was not fenced) opens the file again, closes it
// (delayed), and then answers the old callback TREAT_AS_CLOSED. The answer is
// late, but it says what the client holds: no open. Ignored, it left the
// server counting an open the client will never CLOSE.
func TestPropertyLateTreatAsClosed(t *testing.T) {
	const seed = 38070
	runWorld(t, &prng{r: rand.New(rand.NewPCG(seed, 0x5717e)), left: 1000}, seed%2 == 1)
}

// TestPropertyLateFailure replays seed 44214 of the 100,000-seed run: a
// client's callback times out while it holds nothing (no fence), it opens the
// file again, and then its answer to the old callback comes, an error. The
// machine ignores it - the opens it holds now were granted after the timeout -
// and the model expected a fence.
func TestPropertyLateFailure(t *testing.T) {
	const seed = 44214
	runWorld(t, &prng{r: rand.New(rand.NewPCG(seed, 0x5717e)), left: 1000}, seed%2 == 1)
}
