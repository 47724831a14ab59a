package state

import (
	"encoding/binary"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func fid(n int) FileID {
	var f FileID
	binary.BigEndian.PutUint64(f[8:], uint64(n))
	f[0] = 0xfe
	return f
}

// harness is a minimal driver: it persists version blocks and answers probes at
// once, and keeps the callbacks and the answers to parked requests for the test
// to look at.
type harness struct {
	t       testing.TB
	m       *Machine
	now     time.Time
	nextReq ReqID
	calls   []Callback // emitted, not yet answered
	final   map[ReqID]Action
	fences  []Action
	reserve bool // persist version blocks at once
	// holdProbes keeps probes unanswered (in probes) instead of answering OK.
	holdProbes bool
	probes     []ClientID
	reserves   []uint64 // ActReserveVersions not persisted (reserve false)
	persisted  uint64   // the last mark persisted
	leased     map[FileID]bool
}

func newHarness(t testing.TB, cfg Config) *harness {
	h := &harness{t: t, now: t0, final: map[ReqID]Action{}, reserve: true, leased: map[FileID]bool{}}
	h.m = New(cfg, t0)
	h.persisted = h.m.cfg.VersionBase + h.m.cfg.VersionBlock
	h.absorb(h.m.VersionsReserved(t0, h.persisted, nil))
	return h
}

func (h *harness) absorb(acts []Action) {
	for len(acts) > 0 {
		a := acts[0]
		acts = acts[1:]
		switch a.Kind {
		case ActCallback:
			h.calls = append(h.calls, a.Callback)
		case ActProbe:
			if h.holdProbes {
				h.probes = append(h.probes, a.Client)
			} else {
				h.m.CallbackPathVerified(h.now, a.Client, true)
			}
		case ActReserveVersions:
			if h.reserve {
				h.persisted = a.Through
				acts = append(acts, h.m.VersionsReserved(h.now, a.Through, nil)...)
			} else {
				h.reserves = append(h.reserves, a.Through)
			}
		case ActLease:
			if h.leased[a.File] == a.Take {
				h.t.Fatalf("lease of %x: %v twice", a.File[15], a.Take)
			}
			h.leased[a.File] = a.Take
		case ActFence:
			h.fences = append(h.fences, a)
		case ActReply, ActProceed, ActJukebox, ActRefuse, ActAbandon:
			if prev, dup := h.final[a.Req]; dup {
				h.t.Fatalf("request %d answered twice: %+v then %+v", a.Req, prev, a)
			}
			h.final[a.Req] = a
		default:
			h.t.Fatalf("unknown action %+v", a)
		}
	}
}

func (h *harness) register(cs ...ClientID) {
	for _, c := range cs {
		h.absorb(h.m.Register(h.now, c))
	}
}

func (h *harness) open(c ClientID, f FileID, mode Mode) (ReqID, Result) {
	h.nextReq++
	r, acts := h.m.Open(h.now, h.nextReq, OpenArgs{File: f, Handle: f[:], Client: c, Mode: mode})
	h.absorb(acts)
	return h.nextReq, r
}

func (h *harness) close(c ClientID, f FileID, mode Mode, dirty bool) {
	h.absorb(h.m.Close(h.now, CloseArgs{File: f, Client: c, Mode: mode, Dirty: dirty}))
}

func (h *harness) access(c ClientID, f FileID, k AccessKind) (ReqID, Verdict) {
	h.nextReq++
	v, acts := h.m.PlainAccess(h.now, h.nextReq, AccessArgs{File: f, Handle: f[:], Client: c, Kind: k})
	h.absorb(acts)
	return h.nextReq, v
}

// take removes and returns the unanswered callbacks.
func (h *harness) take() []Callback {
	cs := h.calls
	h.calls = nil
	return cs
}

func (h *harness) answer(cb Callback, o Outcome) {
	h.absorb(h.m.CallbackDone(h.now, cb, o))
}

// answerAll answers every callback OK until none is left.
func (h *harness) answerAll() {
	for len(h.calls) > 0 {
		for _, cb := range h.take() {
			h.answer(cb, OK)
		}
	}
}

func (h *harness) advance(d time.Duration) {
	h.now = h.now.Add(d)
	h.absorb(h.m.Tick(h.now))
}

func (h *harness) info(f FileID) FileInfo {
	fi, ok := h.m.Lookup(h.now, f)
	if !ok {
		return FileInfo{State: Closed}
	}
	return fi
}

// openNow opens and expects an immediate reply.
func (h *harness) openNow(c ClientID, f FileID, mode Mode) OpenReply {
	h.t.Helper()
	_, r := h.open(c, f, mode)
	if r.Verdict != Proceed {
		h.t.Fatalf("open by %d of %x for %v: %v, want an immediate reply (calls %+v)", c, f[15], mode, r.Verdict, h.calls)
	}
	return r.Reply
}

// reply returns the answer to a parked OPEN.
func (h *harness) reply(req ReqID) OpenReply {
	h.t.Helper()
	a, ok := h.final[req]
	if !ok || a.Kind != ActReply {
		h.t.Fatalf("request %d: %+v (present %v), want a reply", req, a, ok)
	}
	return a.Reply
}
