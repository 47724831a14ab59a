package state

import (
	"testing"
	"time"
)

// permitHarness drives a Permits with an injected clock, keeping the
// recalls sent, the parked changes answered and the revocations.
type permitHarness struct {
	t       *testing.T
	p       *Permits
	now     time.Time
	calls   []Callback
	proceed map[ReqID]bool
	fenced  []ClientID
}

func newPermitHarness(t *testing.T, cfg PermitConfig) *permitHarness {
	return &permitHarness{t: t, p: NewPermits(cfg, t0), now: t0, proceed: map[ReqID]bool{}}
}

func (h *permitHarness) absorb(acts []Action) {
	for _, a := range acts {
		switch a.Kind {
		case ActCallback:
			if a.Callback.Mode != RecallPermit {
				h.t.Fatalf("recall with mode %v", a.Callback.Mode)
			}
			h.calls = append(h.calls, a.Callback)
			h.p.CallbackSent(h.now, a.Callback)
		case ActFence:
			h.fenced = append(h.fenced, a.Client)
		case ActProceed:
			if h.proceed[a.Req] {
				h.t.Fatalf("request %d answered twice", a.Req)
			}
			h.proceed[a.Req] = true
		default:
			h.t.Fatalf("unexpected action %v", a.Kind)
		}
	}
}

func (h *permitHarness) grant(c ClientID, dir FileID) uint64 {
	id, fresh, ok := h.p.Acquire(h.now, c, dir, dir[:])
	if !ok || !fresh || !h.p.Granted(h.now, dir, id) {
		h.t.Fatalf("client %d: permit on %d not granted", c, dir)
	}
	return id
}

func (h *permitHarness) change(req ReqID, by ClientID, dirs ...FileID) Verdict {
	v, acts := h.p.Changed(h.now, req, by, true, dirs)
	h.absorb(acts)
	return v
}

// TestPermitsRecallWaits: another client's change of a permitted directory
// recalls the permit and waits until the holder answers; the holder's own
// changes neither recall nor wait; its permit is held, with its id, until
// the answer, and gone after.
func TestPermitsRecallWaits(t *testing.T) {
	h := newPermitHarness(t, PermitConfig{})
	dir := fid(1)
	id := h.grant(1, dir)
	if v := h.change(10, 1, dir); v != Proceed || len(h.calls) != 0 {
		t.Fatalf("the holder's own change: %v, %d recalls", v, len(h.calls))
	}
	if v := h.change(11, 2, dir); v != Wait || len(h.calls) != 1 || h.calls[0].Client != 1 {
		t.Fatalf("another client's change: %v, recalls %+v", v, h.calls)
	}
	if v := h.change(12, 3, dir); v != Wait || len(h.calls) != 1 {
		t.Fatalf("a second change during the recall: %v, %d recalls (one is out)", v, len(h.calls))
	}
	if !h.p.Holds(1, dir, id) || h.p.Holds(1, dir, id+1) || h.p.Holds(2, dir, id) {
		t.Fatal("Holds during the recall")
	}
	if _, _, ok := h.p.Acquire(h.now, 1, dir, nil); ok {
		t.Fatal("a recalled permit granted again")
	}
	h.absorb(h.p.CallbackDone(h.now, h.calls[0], OK))
	if !h.proceed[11] || !h.proceed[12] || h.p.Holds(1, dir, id) || h.p.Active() {
		t.Fatalf("after the answer: proceed %v, holds %v", h.proceed, h.p.Holds(1, dir, id))
	}
	if st := h.p.Stats(); st.Recalls != 1 || st.Releases != 1 || st.Waits != 2 || st.Revocations != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestPermitsRevokedAtDeadline: a recall not answered within the callback
// timeout from sending revokes the permit; the change goes on, the holder's
// later use of the permit is refused, a late answer changes nothing.
func TestPermitsRevokedAtDeadline(t *testing.T) {
	h := newPermitHarness(t, PermitConfig{CallbackTimeout: time.Second})
	dir := fid(1)
	id := h.grant(1, dir)
	if h.change(20, 0, dir) != Wait {
		t.Fatal("a plain client's change did not wait")
	}
	h.now = h.now.Add(999 * time.Millisecond)
	h.absorb(h.p.Tick(h.now))
	if h.proceed[20] {
		t.Fatal("proceeded before the deadline")
	}
	h.now = h.now.Add(time.Millisecond)
	h.absorb(h.p.Tick(h.now))
	if !h.proceed[20] || len(h.fenced) != 1 || h.fenced[0] != 1 || h.p.Holds(1, dir, id) {
		t.Fatalf("at the deadline: proceed %v fenced %v", h.proceed, h.fenced)
	}
	h.absorb(h.p.CallbackDone(h.now, h.calls[0], OK))
	if st := h.p.Stats(); st.Revocations != 1 || st.Releases != 0 {
		t.Fatalf("stats %+v", st)
	}
	// A new permit has a new id: a reintegration naming the old one fails.
	id2 := h.grant(1, dir)
	if id2 == id || h.p.Holds(1, dir, id) || !h.p.Holds(1, dir, id2) {
		t.Fatal("a new permit kept the revoked one's id")
	}
}

// TestPermitsPendingCancelled: a change while a permit is being granted
// cancels it without waiting: its client learns "not granted".
func TestPermitsPendingCancelled(t *testing.T) {
	h := newPermitHarness(t, PermitConfig{})
	dir := fid(1)
	id, fresh, ok := h.p.Acquire(h.now, 1, dir, nil)
	if !ok || !fresh {
		t.Fatal("not pending")
	}
	if _, _, ok := h.p.Acquire(h.now, 2, dir, nil); ok || !h.p.HeldByOther(2, dir) || h.p.HeldByOther(1, dir) {
		t.Fatal("a pending permit is not exclusive")
	}
	if v := h.change(30, 2, dir); v != Proceed || len(h.calls) != 0 {
		t.Fatalf("a change during the grant: %v, %d recalls", v, len(h.calls))
	}
	if h.p.Granted(h.now, dir, id) || h.p.Holds(1, dir, id) || h.p.Stats().Cancels != 1 {
		t.Fatal("a cancelled permit was granted")
	}
}

// TestPermitsReleaseAndBounds: a release during the recall ends it; a
// client's bound and the table's refuse more; a client gone frees its
// permits and the changes waiting for them; a local change (req 0) recalls
// without waiting; GrantNew gives a permit on a new directory.
func TestPermitsReleaseAndBounds(t *testing.T) {
	h := newPermitHarness(t, PermitConfig{MaxPerClient: 2, MaxPermits: 3})
	a, b := h.grant(1, fid(1)), h.grant(1, fid(2))
	if _, _, ok := h.p.Acquire(h.now, 1, fid(3), nil); ok {
		t.Fatal("past the client's bound")
	}
	if h.p.GrantNew(h.now, 1, fid(3), nil) != 0 {
		t.Fatal("GrantNew past the client's bound")
	}
	h.grant(2, fid(3))
	if _, _, ok := h.p.Acquire(h.now, 3, fid(4), nil); ok {
		t.Fatal("past the table's bound")
	}
	if h.change(40, 2, fid(1)) != Wait {
		t.Fatal("no wait")
	}
	h.absorb(h.p.Release(h.now, 1, fid(1), a+100)) // a wrong id releases nothing
	if h.proceed[40] {
		t.Fatal("released by a wrong id")
	}
	h.absorb(h.p.Release(h.now, 1, fid(1), a))
	if !h.proceed[40] {
		t.Fatal("a release during the recall did not end it")
	}
	if v := h.change(0, 0, fid(2)); v != Proceed || len(h.calls) != 2 {
		t.Fatalf("a local change: %v, %d recalls", v, len(h.calls))
	}
	if h.change(41, 3, fid(2)) != Wait {
		t.Fatal("no wait behind the local change's recall")
	}
	h.absorb(h.p.ClientGone(h.now, 1))
	if !h.proceed[41] || h.p.Held(1) != 0 || h.p.Holds(1, fid(2), b) {
		t.Fatal("client gone")
	}
	if id := h.p.GrantNew(h.now, 1, fid(5), nil); id == 0 || !h.p.Holds(1, fid(5), id) {
		t.Fatal("GrantNew")
	}
	h.absorb(h.p.ChangedAll(h.now))
	if len(h.calls) != 4 { // fid(3)'s and fid(5)'s
		t.Fatalf("ChangedAll: %d recalls", len(h.calls))
	}
}

// TestPermitsBatchHoldsEnd: a permit whose recall passes its deadline, or
// is answered, or released, while a REINTEGRATE under it is being applied
// (BeginBatch) ends only when that batch ends (EndBatch): Holds stays true
// for the batch's records meanwhile and the change waiting for the recall
// proceeds after the batch; a deadline passed is then a revocation.
func TestPermitsBatchHoldsEnd(t *testing.T) {
	for _, end := range []string{"deadline", "failed", "answered", "released"} {
		h := newPermitHarness(t, PermitConfig{CallbackTimeout: time.Second})
		dir := fid(1)
		id := h.grant(1, dir)
		if h.p.BeginBatch(2, dir, id) || h.p.BeginBatch(1, dir, id+1) {
			t.Fatalf("%s: a batch counted under a permit its client does not hold", end)
		}
		if !h.p.BeginBatch(1, dir, id) {
			t.Fatalf("%s: the holder's batch not counted", end)
		}
		if v := h.change(10, 2, dir); v != Wait || len(h.calls) != 1 {
			t.Fatalf("%s: the change: %v, %d recalls", end, v, len(h.calls))
		}
		switch end {
		case "deadline":
			h.now = h.now.Add(2 * time.Second)
			h.absorb(h.p.Tick(h.now))
		case "failed":
			h.absorb(h.p.CallbackDone(h.now, h.calls[0], Failed))
		case "answered":
			h.absorb(h.p.CallbackDone(h.now, h.calls[0], OK))
		case "released":
			h.absorb(h.p.Release(h.now, 1, dir, id))
		}
		if h.proceed[10] || !h.p.Holds(1, dir, id) || len(h.fenced) != 0 {
			t.Fatalf("%s: the permit ended during its batch (proceed %v, holds %v, fenced %v)", end, h.proceed[10], h.p.Holds(1, dir, id), h.fenced)
		}
		if _, _, ok := h.p.Acquire(h.now, 1, dir, nil); ok {
			t.Fatalf("%s: a permit ending granted again", end)
		}
		h.absorb(h.p.EndBatch(h.now, 1, dir, id))
		if !h.proceed[10] || h.p.Holds(1, dir, id) {
			t.Fatalf("%s: after the batch: proceed %v, holds %v", end, h.proceed[10], h.p.Holds(1, dir, id))
		}
		revoked := end == "deadline" || end == "failed"
		if st := h.p.Stats(); (st.Revocations == 1) != revoked || (len(h.fenced) == 1) != revoked || st.Permits != 0 {
			t.Fatalf("%s: stats %+v, fenced %v", end, st, h.fenced)
		}
	}
}
