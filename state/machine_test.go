package state

import (
	"errors"
	"testing"
	"time"
)

const (
	cX ClientID = 1
	cY ClientID = 2
	cZ ClientID = 3
	cP ClientID = 100 // a plain NFSv3 client (never registers)
	cQ ClientID = 101
)

func wantCalls(t *testing.T, got []Callback, want ...RowCallback) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("callbacks %+v, want %+v", got, want)
	}
	for i := range got {
		if int(got[i].Client) != want[i].Client || got[i].Mode != want[i].Mode {
			t.Fatalf("callbacks %+v, want %+v", got, want)
		}
	}
}

func wantFinal(t *testing.T, h *harness, req ReqID, k ActionKind) Action {
	t.Helper()
	a, ok := h.final[req]
	if !ok || a.Kind != k {
		t.Fatalf("request %d: %+v (present %v), want %v", req, a, ok, k)
	}
	return a
}

// The called-back client's write-backs and CLOSE are served while the OPEN
// that called it back is parked, and other files are not blocked.
func TestCalledBackClientIsServed(t *testing.T) {
	h := newHarness(t, Config{})
	h.register(cX, cY, cZ)
	f, g := fid(1), fid(2)
	h.openNow(cX, f, Write)
	req, r := h.open(cY, f, Read)
	if r.Verdict != Wait {
		t.Fatalf("open against a caching writer: %v", r.Verdict)
	}
	cbs := h.take()
	wantCalls(t, cbs, RowCallback{1, WritebackInvalidate})
	if _, v := h.access(cX, f, AccessWrite); v != Proceed {
		t.Fatalf("write-back during the callback: %v", v)
	}
	if _, v := h.access(cX, f, AccessRead); v != Proceed {
		t.Fatalf("read during the callback: %v", v)
	}
	h.close(cX, f, Write, true)
	if len(h.calls) != 0 || len(h.final) != 0 {
		t.Fatalf("close during the callback did something: %+v %+v", h.calls, h.final)
	}
	if rep := h.openNow(cZ, g, Write); !rep.CacheEnabled {
		t.Fatalf("another file: %+v", rep)
	}
	h.answer(cbs[0], OK)
	if rep := h.reply(req); !rep.CacheEnabled {
		t.Fatalf("reader after the writer wrote back and closed: %+v", rep)
	}
	if fi := h.info(f); fi.State != OneReader {
		t.Fatalf("state %v", fi.State)
	}
}

// A parked OPEN is answered NFS3ERR_JUKEBOX after JukeboxAfter; the callback
// stays out and the retried OPEN waits for it without a second callback.
func TestJukeboxThenRetry(t *testing.T) {
	h := newHarness(t, Config{JukeboxAfter: time.Second, CallbackTimeout: 5 * time.Second})
	h.register(cX, cY)
	f := fid(1)
	h.openNow(cX, f, Write)
	req, _ := h.open(cY, f, Write)
	cbs := h.take()
	h.advance(999 * time.Millisecond)
	if _, ok := h.final[req]; ok {
		t.Fatal("answered before the bound")
	}
	h.advance(time.Millisecond)
	wantFinal(t, h, req, ActJukebox)
	req2, r := h.open(cY, f, Write)
	if r.Verdict != Wait || len(h.calls) != 0 {
		t.Fatalf("retry: %v, new callbacks %+v", r.Verdict, h.calls)
	}
	h.answer(cbs[0], OK)
	if rep := h.reply(req2); rep.CacheEnabled {
		t.Fatalf("retry after the recall it caused: %+v", rep)
	}
	if st := h.m.Stats(h.now); st.Jukebox != 1 || st.Waits != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// A callback that is not answered within CallbackTimeout of being sent fences
// its client for the file and lets the parked OPEN proceed.
func TestCallbackTimeoutFences(t *testing.T) {
	h := newHarness(t, Config{JukeboxAfter: time.Minute, CallbackTimeout: 2 * time.Second})
	h.register(cX, cY)
	f := fid(1)
	h.openNow(cX, f, Write)
	req, _ := h.open(cY, f, Write)
	cbs := h.take()
	h.m.CallbackSent(h.now, cbs[0])
	h.holdProbes = true
	h.advance(2 * time.Second)
	rep := h.reply(req)
	if !rep.CacheEnabled {
		t.Fatalf("open after the silent writer was fenced: %+v", rep)
	}
	if len(h.fences) != 1 || h.fences[0].Client != cX || h.fences[0].File != f {
		t.Fatalf("fences %+v", h.fences)
	}
	if !h.m.Fenced(cX, f) {
		t.Fatal("not fenced")
	}
	if _, v := h.access(cX, f, AccessWrite); v != Refuse {
		t.Fatalf("fenced client's write: %v", v)
	}
	h.close(cX, f, Write, true) // ignored: its opens were forgotten
	if fi := h.info(f); fi.State != OneWriter {
		t.Fatalf("state %v", fi.State)
	}
	// The late answer changes nothing.
	if acts := h.m.CallbackDone(h.now, cbs[0], OK); len(acts) != 0 {
		t.Fatalf("late answer: %+v", acts)
	}
	// Its callback path must answer a probe before it caches anywhere again.
	if len(h.probes) != 1 || h.probes[0] != cX {
		t.Fatalf("probes %+v", h.probes)
	}
	if rep := h.openNow(cX, fid(2), Read); rep.CacheEnabled {
		t.Fatalf("caching granted before the probe answered: %+v", rep)
	}
	h.m.CallbackPathVerified(h.now, cX, true)
	if rep := h.openNow(cX, fid(3), Read); !rep.CacheEnabled {
		t.Fatalf("after the probe: %+v", rep)
	}
	// Opening again lifts the fence (once the open is applied).
	h.open(cX, f, Read)
	h.answerAll()
	if h.m.Fenced(cX, f) {
		t.Fatal("still fenced after opening again")
	}
	if st := h.m.Stats(h.now); st.Timeouts != 1 || st.Fencings != 1 || st.Outcomes[Failed] != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// A callback's deadline starts when the driver reports it sent, not when the
// machine asked for it; one never reported sent still fails eventually.
func TestDeadlineStartsWhenSent(t *testing.T) {
	h := newHarness(t, Config{JukeboxAfter: time.Minute, CallbackTimeout: 2 * time.Second, QueueTimeout: 3 * time.Second})
	h.register(cX, cY)
	f, g := fid(1), fid(2)
	h.openNow(cX, f, Write)
	h.openNow(cX, g, Write)
	h.open(cY, f, Read)
	h.open(cY, g, Read)
	cbs := h.take()
	h.advance(1500 * time.Millisecond)
	h.m.CallbackSent(h.now, cbs[0])
	h.advance(1900 * time.Millisecond) // 3.4 s after it was queued, 1.9 s after it was sent
	if len(h.fences) != 0 {
		t.Fatalf("timed out from queueing: %+v", h.fences)
	}
	h.advance(100 * time.Millisecond)
	if len(h.fences) != 1 || h.fences[0].File != f {
		t.Fatalf("fences %+v", h.fences)
	}
	h.advance(1600 * time.Millisecond) // 5.1 s: queue and callback bounds of the unsent one
	if len(h.fences) != 2 || h.fences[1].File != g {
		t.Fatalf("fences %+v", h.fences)
	}
}

// After a recall, opens that arrive within RecallBackoff get no caching, so two
// clients alternating on a file stop calling each other back.
func TestRecallBackoff(t *testing.T) {
	h := newHarness(t, Config{RecallBackoff: 2 * time.Second})
	h.register(cX, cY)
	f := fid(1)
	h.openNow(cX, f, Write)
	h.close(cX, f, Write, true)
	req, _ := h.open(cY, f, Write) // recall 1
	h.answerAll()
	if rep := h.reply(req); !rep.CacheEnabled {
		t.Fatalf("the open that caused the recall: %+v", rep)
	}
	h.close(cY, f, Write, true)
	h.now = h.now.Add(100 * time.Millisecond)
	req, _ = h.open(cX, f, Write) // Y is dirty: recall 2, but inside recall 1's back-off
	h.answerAll()
	if rep := h.reply(req); rep.CacheEnabled {
		t.Fatalf("open inside the back-off: %+v", rep)
	}
	h.close(cX, f, Write, true) // X wrote through: nothing dirty
	h.now = h.now.Add(100 * time.Millisecond)
	if rep := h.openNow(cY, f, Write); rep.CacheEnabled || len(h.calls) != 0 {
		t.Fatalf("ping-pong: %+v, callbacks %+v", rep, h.calls)
	}
	h.close(cY, f, Write, true)
	h.now = h.now.Add(2 * time.Second)
	if rep := h.openNow(cX, f, Write); !rep.CacheEnabled {
		t.Fatalf("after the back-off: %+v", rep)
	}
}

// Caching is granted only once the client's callback path answered a probe.
func TestProbeGatesCaching(t *testing.T) {
	h := newHarness(t, Config{})
	h.holdProbes = true
	h.register(cX)
	if len(h.probes) != 1 {
		t.Fatalf("probes %+v", h.probes)
	}
	f := fid(1)
	if rep := h.openNow(cX, f, Write); rep.CacheEnabled {
		t.Fatalf("unverified: %+v", rep)
	}
	if fi := h.info(f); fi.Holders[0].Dirty {
		t.Fatal("a write-through writer recorded as dirty")
	}
	h.m.CallbackPathVerified(h.now, cX, true)
	if rep := h.openNow(cX, f, Write); !rep.CacheEnabled {
		t.Fatalf("verified: %+v", rep)
	}
}

// Section 6.2: a delayed-close holder answers TREAT_AS_CLOSED, and the new
// opener gets the file as if it had been closed.
func TestDelayedCloseTreatAsClosed(t *testing.T) {
	h := newHarness(t, Config{})
	h.register(cX, cY)
	f := fid(1)
	h.openNow(cX, f, Write) // the application closed it long ago; the client did not
	req, _ := h.open(cY, f, Write)
	cbs := h.take()
	wantCalls(t, cbs, RowCallback{1, WritebackInvalidate})
	h.answer(cbs[0], TreatAsClosed)
	if rep := h.reply(req); !rep.CacheEnabled {
		t.Fatalf("%+v", rep)
	}
	fi := h.info(f)
	if fi.State != OneWriter || len(fi.Holders) != 1 || fi.Holders[0].Client != cY {
		t.Fatalf("%+v", fi)
	}
	h.close(cX, f, Write, false) // the client's stray close changes nothing
	if fi := h.info(f); fi.State != OneWriter || fi.Holders[0].Writers != 1 {
		t.Fatalf("%+v", fi)
	}
}

// Opens and uncovered plain accesses on a file are applied in arrival order.
func TestParkedRequestsInOrder(t *testing.T) {
	h := newHarness(t, Config{})
	h.register(cX, cY)
	f := fid(1)
	h.openNow(cX, f, Read)
	reqY, _ := h.open(cY, f, Write)
	reqX, r := h.open(cX, f, Read)
	if r.Verdict != Wait {
		t.Fatalf("an open behind a parked one: %v", r.Verdict)
	}
	reqP, v := h.access(cP, f, AccessRead)
	if v != Wait {
		t.Fatalf("a plain access behind a parked open: %v", v)
	}
	cbs := h.take()
	wantCalls(t, cbs, RowCallback{1, Invalidate})
	h.answer(cbs[0], OK)
	if rep := h.reply(reqY); rep.CacheEnabled {
		t.Fatalf("writer: %+v", rep)
	}
	if rep := h.reply(reqX); rep.CacheEnabled {
		t.Fatalf("reader after the writer: %+v", rep)
	}
	wantFinal(t, h, reqP, ActProceed)
	if fi := h.info(f); fi.State != WriteShared || fi.Waiting != 0 {
		t.Fatalf("%+v", fi)
	}
}

func TestClientGone(t *testing.T) {
	h := newHarness(t, Config{})
	h.register(cX, cY)
	f1, f2, f3 := fid(1), fid(2), fid(3)
	h.openNow(cX, f1, Read)
	h.openNow(cY, f2, Write)
	reqX, _ := h.open(cX, f2, Read) // parked on Y
	h.openNow(cX, f3, Write)
	reqY, _ := h.open(cY, f3, Read) // parked on X
	h.take()
	h.absorb(h.m.ClientGone(h.now, cX))
	wantFinal(t, h, reqX, ActAbandon)
	if rep := h.reply(reqY); !rep.CacheEnabled {
		t.Fatalf("%+v", rep)
	}
	if fi := h.info(f1); len(fi.Holders) != 0 || fi.State != Closed {
		t.Fatalf("%+v", fi)
	}
	if fi := h.info(f3); fi.State != OneReader {
		t.Fatalf("%+v", fi)
	}
}

func TestVersions(t *testing.T) {
	h := newHarness(t, Config{})
	h.register(cX, cY)
	f := fid(1)
	r1 := h.openNow(cX, f, Read)
	if r1.Version == 0 || r1.OldVersion != r1.Version {
		t.Fatalf("first open: %+v", r1)
	}
	r2 := h.openNow(cX, f, Write)
	if r2.Version <= r1.Version || r2.OldVersion != r1.Version {
		t.Fatalf("open for write: %+v after %+v", r2, r1)
	}
	r3 := h.openNow(cX, f, Read)
	if r3.Version != r2.Version || r3.OldVersion != r2.Version {
		t.Fatalf("read after write: %+v", r3)
	}
	h.close(cX, f, Read, true)
	h.close(cX, f, Read, true)
	h.close(cX, f, Write, false)
	if r := h.openNow(cY, f, Read); r.Version != r2.Version || r.OldVersion != r2.Version {
		t.Fatalf("closed file keeps its version: %+v", r)
	}
	h.close(cY, f, Read, false)
	if _, v := h.access(cP, f, AccessWrite); v != Proceed {
		t.Fatal(v)
	}
	r4 := h.openNow(cY, f, Read)
	if r4.Version <= r2.Version || r4.OldVersion != r4.Version {
		t.Fatalf("after a plain write: %+v", r4)
	}
}

// Versions are durable: a machine started from the persisted mark never issues
// a version at or below it, and issues none before a block is reserved.
func TestVersionsDurable(t *testing.T) {
	h := newHarness(t, Config{VersionBlock: 4})
	h.register(cX)
	var last uint64
	for i := 0; i < 10; i++ {
		r := h.openNow(cX, fid(i), Write)
		if r.Version <= last {
			t.Fatalf("version %d after %d", r.Version, last)
		}
		last = r.Version
	}
	if n := h.m.Stats(h.now).Reservations; n < 2 {
		t.Fatalf("%d reservations for 10 versions in blocks of 4", n)
	}
	// Restart from the durable mark the driver wrote last.
	mark := h.persisted
	if mark < last {
		t.Fatalf("version %d issued above the durable mark %d", last, mark)
	}
	h2 := &harness{t: t, now: t0, final: map[ReqID]Action{}}
	h2.m = New(Config{VersionBase: mark, VersionBlock: 4}, t0)
	h2.register(cX)
	req, r := h2.open(cX, fid(0), Read)
	if r.Verdict != Wait || len(h2.reserves) != 1 || h2.reserves[0] != mark+4 {
		t.Fatalf("first open before any reservation: %v, reserves %v", r.Verdict, h2.reserves)
	}
	h2.absorb(h2.m.VersionsReserved(h2.now, 0, errors.New("disk full")))
	if _, ok := h2.final[req]; ok {
		t.Fatal("answered without a durable version")
	}
	h2.reserves = nil
	h2.open(cX, fid(1), Read) // asks again after the failure
	if len(h2.reserves) != 1 {
		t.Fatalf("reserves %v", h2.reserves)
	}
	h2.absorb(h2.m.VersionsReserved(h2.now, h2.reserves[0], nil))
	if rep := h2.reply(req); rep.Version <= mark {
		t.Fatalf("version %d reissued (mark %d)", rep.Version, mark)
	}
}

// Section 6.1: plain NFSv3 accesses count as opens and call back the caches
// they conflict with.
func TestCoexistence(t *testing.T) {
	h := newHarness(t, Config{PlainHold: time.Minute})
	h.register(cX, cY)
	f := fid(1)

	// A plain READ of a file open for writing: write back, invalidate, shared.
	h.openNow(cX, f, Write)
	req, v := h.access(cP, f, AccessRead)
	if v != Wait {
		t.Fatalf("plain read of a cached written file: %v", v)
	}
	cbs := h.take()
	wantCalls(t, cbs, RowCallback{1, WritebackInvalidate})
	h.answer(cbs[0], OK)
	wantFinal(t, h, req, ActProceed)
	if fi := h.info(f); fi.State != WriteShared {
		t.Fatalf("%+v", fi)
	}
	if rep := h.openNow(cX, f, Write); rep.CacheEnabled {
		t.Fatalf("%+v", rep)
	}
	// The plain reader stops counting after PlainHold; the file stays shared
	// until the final close (Table 1), then caching returns.
	h.advance(time.Minute)
	if fi := h.info(f); fi.State != WriteShared || len(fi.Holders) != 1 {
		t.Fatalf("%+v", fi)
	}
	h.close(cX, f, Write, false)
	h.close(cX, f, Write, false)
	if rep := h.openNow(cX, f, Write); !rep.CacheEnabled {
		t.Fatalf("%+v", rep)
	}
	h.close(cX, f, Write, true)

	// A plain READ of a CLOSED_DIRTY file: write back only.
	_, v = h.access(cP, f, AccessRead)
	cbs = h.take()
	wantCalls(t, cbs, RowCallback{1, Writeback})
	h.answer(cbs[0], OK)
	if fi := h.info(f); fi.State != OneReader {
		t.Fatalf("%+v", fi)
	}
	// A protocol reader beside a plain reader may cache; a protocol writer may not,
	// and needs no callback (the plain client has no dirty blocks).
	if rep := h.openNow(cX, f, Read); !rep.CacheEnabled {
		t.Fatalf("%+v", rep)
	}
	if fi := h.info(f); fi.State != MultReaders {
		t.Fatalf("%+v", fi)
	}
	h.close(cX, f, Read, false)
	if rep := h.openNow(cY, f, Write); rep.CacheEnabled || len(h.calls) != 0 {
		t.Fatalf("%+v %+v", rep, h.calls)
	}
	h.close(cY, f, Write, false)
	h.advance(time.Minute)

	// Plain changes of a file cached by readers: invalidate them, new version.
	for _, k := range []AccessKind{AccessWrite, AccessSetattr, AccessRemove, AccessRename} {
		g := fid(10 + int(k))
		r1 := h.openNow(cX, g, Read)
		h.openNow(cY, g, Read)
		req, v := h.access(cQ, g, k)
		if v != Wait {
			t.Fatalf("%v: %v", k, v)
		}
		cbs := h.take()
		wantCalls(t, cbs, RowCallback{1, Invalidate}, RowCallback{2, Invalidate})
		for _, cb := range cbs {
			h.answer(cb, OK)
		}
		wantFinal(t, h, req, ActProceed)
		rep := h.openNow(cX, g, Read)
		if rep.CacheEnabled || rep.Version == r1.Version || rep.OldVersion == r1.Version {
			t.Fatalf("%v: reopen %+v after %+v", k, rep, r1)
		}
		if _, v := h.access(cQ, g, AccessRead); v != Proceed {
			t.Fatalf("%v: the plain client's next access: %v", k, v)
		}
	}

	// A protocol client's own accesses of a file it has open change nothing.
	g := fid(30)
	h.openNow(cX, g, Write)
	before := h.info(g)
	for _, k := range []AccessKind{AccessRead, AccessWrite, AccessSetattr} {
		if _, v := h.access(cX, g, k); v != Proceed {
			t.Fatalf("%v: %v", k, v)
		}
	}
	if after := h.info(g); after.State != OneWriter || after.Version != before.Version || after.Holders[0].Plain {
		t.Fatalf("%+v -> %+v", before, after)
	}
}

// The table is bounded: at the bound the least recently used entries are
// reclaimed (closed ones dropped, dirty ones written back, idle open ones
// relinquished); when none can be freed at once, new opens get NFS3ERR_JUKEBOX
// and unrecorded plain accesses turn caching off until they would have expired.
func TestTableBound(t *testing.T) {
	h := newHarness(t, Config{MaxEntries: 4, Shards: 1, HighWater: 100, RelinquishIdle: 10 * time.Second, PlainHold: time.Minute})
	h.register(cX, cY)
	h.openNow(cX, fid(1), Read)
	h.close(cX, fid(1), Read, false) // CLOSED, kept for its version
	h.openNow(cX, fid(2), Write)
	h.close(cX, fid(2), Write, true) // CLOSED_DIRTY
	h.openNow(cX, fid(3), Read)      // open (a delayed close, say)
	h.openNow(cX, fid(4), Read)
	if st := h.m.Stats(h.now); st.Entries != 4 {
		t.Fatalf("%+v", st)
	}
	h.openNow(cY, fid(5), Read)
	if _, ok := h.m.Lookup(h.now, fid(1)); ok {
		t.Fatal("the closed entry was not dropped")
	}
	// Nothing can go at once: the dirty one is written back, the open asked to
	// retry.
	if _, r := h.open(cY, fid(6), Read); r.Verdict != Jukebox {
		t.Fatalf("full table: %v", r.Verdict)
	}
	cbs := h.take()
	wantCalls(t, cbs, RowCallback{1, Writeback})
	h.answer(cbs[0], OK)
	h.openNow(cY, fid(6), Read)
	if _, ok := h.m.Lookup(h.now, fid(2)); ok {
		t.Fatal("the written-back entry was not dropped")
	}
	// Idle open entries are asked to relinquish.
	h.advance(10 * time.Second)
	h.openNow(cY, fid(5), Read)
	h.openNow(cY, fid(6), Read)
	if _, r := h.open(cY, fid(7), Read); r.Verdict != Jukebox {
		t.Fatalf("%v", r.Verdict)
	}
	cbs = h.take()
	wantCalls(t, cbs, RowCallback{1, Relinquish}, RowCallback{1, Relinquish})
	if cbs[0].File == cbs[1].File || (cbs[0].File != fid(3) && cbs[0].File != fid(4)) || (cbs[1].File != fid(3) && cbs[1].File != fid(4)) {
		t.Fatalf("relinquished %+v", cbs)
	}
	for _, cb := range cbs {
		if cb.File == fid(3) {
			h.answer(cb, TreatAsClosed)
		} else {
			h.answer(cb, OK) // really in use
		}
	}
	h.openNow(cY, fid(7), Read)
	if _, ok := h.m.Lookup(h.now, fid(3)); ok {
		t.Fatal("the relinquished entry was not dropped")
	}
	if fi, ok := h.m.Lookup(h.now, fid(4)); !ok || fi.Holders[0].Readers != 1 {
		t.Fatalf("an entry in use was dropped: %+v", fi)
	}
	// A plain access with no room is let through unrecorded; nobody caches
	// anything new until it would have expired.
	if _, v := h.access(cP, fid(8), AccessWrite); v != Proceed {
		t.Fatal(v)
	}
	if st := h.m.Stats(h.now); st.Unrecorded != 1 || st.TableFull != 2 || st.ReclaimDrops != 3 || st.ReclaimCallbacks != 3 {
		t.Fatalf("%+v", st)
	}
	if rep := h.openNow(cY, fid(4), Read); rep.CacheEnabled {
		t.Fatalf("caching granted after an unrecorded access: %+v", rep)
	}
	h.now = h.now.Add(time.Minute)
	if rep := h.openNow(cY, fid(4), Read); !rep.CacheEnabled {
		t.Fatalf("%+v", rep)
	}
}

// Crash recovery: clients' reports rebuild the entry, and it behaves as before.
func TestReclaim(t *testing.T) {
	h := newHarness(t, Config{VersionBase: 100})
	h.register(cX, cY)
	f := fid(1)
	h.m.Reclaim(h.now, ReclaimArgs{File: f, Handle: f[:], Client: cX, Writers: 1, Caching: true, Dirty: true, Version: 90})
	fi := h.info(f)
	if fi.State != OneWriter || fi.Version != 90 {
		t.Fatalf("%+v", fi)
	}
	req, _ := h.open(cY, f, Read)
	cbs := h.take()
	wantCalls(t, cbs, RowCallback{1, WritebackInvalidate})
	h.answer(cbs[0], OK)
	if rep := h.reply(req); rep.CacheEnabled || rep.Version != 90 {
		t.Fatalf("%+v", rep)
	}
	if rep := h.openNow(cY, f, Write); rep.Version <= 100 {
		t.Fatalf("%+v", rep)
	}

	// A caching write open reclaimed before anything was written (Dirty
	// false) is dirty from then on: after its CLOSE with dirty data, a plain
	// READ calls the client back before it is served.
	g := fid(2)
	h.m.Reclaim(h.now, ReclaimArgs{File: g, Handle: g[:], Client: cX, Writers: 1, Caching: true, Version: 95})
	h.close(cX, g, Write, true)
	if _, v := h.access(cP, g, AccessRead); v != Wait {
		t.Fatalf("plain READ of a file closed dirty after a reclaim without dirty data: %v, want a callback first", v)
	}
	wantCalls(t, h.take(), RowCallback{1, Writeback})
}

// The machine is safe for concurrent use: drivers call it from every
// connection's goroutines at once (run with -race).
func TestConcurrentUse(t *testing.T) {
	m := New(Config{Shards: 4, JukeboxAfter: time.Millisecond}, t0)
	m.VersionsReserved(t0, 1<<40, nil)
	for c := ClientID(1); c <= 4; c++ {
		m.Register(t0, c)
		m.CallbackPathVerified(t0, c, true)
	}
	calls := make(chan Callback, 1<<16)
	emit := func(acts []Action) {
		for _, a := range acts {
			if a.Kind == ActCallback {
				calls <- a.Callback
			}
		}
	}
	done := make(chan struct{})
	for g := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			c := ClientID(g + 1)
			for i := range 2000 {
				now := t0.Add(time.Duration(i) * time.Millisecond)
				f := fid(i % 16)
				switch i % 5 {
				case 0, 1:
					mode := Mode(1 + (i/5+g)%2)
					_, acts := m.Open(now, ReqID(g<<32|i), OpenArgs{File: f, Handle: f[:], Client: c, Mode: mode})
					emit(acts)
					emit(m.Close(now, CloseArgs{File: f, Client: c, Mode: mode, Dirty: i%3 == 0}))
				case 2:
					_, acts := m.PlainAccess(now, ReqID(g<<32|i), AccessArgs{File: f, Handle: f[:], Client: 100 + c, Kind: AccessKind(1 + i%5)})
					emit(acts)
				case 3:
					select {
					case cb := <-calls:
						emit(m.CallbackDone(now, cb, Outcome(i%3)))
					default:
					}
				case 4:
					emit(m.Tick(now))
					m.Stats(now)
				}
			}
		}()
	}
	for range 4 {
		<-done
	}
	now := t0.Add(time.Hour)
	for {
		select {
		case cb := <-calls:
			emit(m.CallbackDone(now, cb, OK))
			continue
		default:
		}
		break
	}
	emit(m.Tick(now))
	for len(calls) > 0 {
		emit(m.CallbackDone(now, <-calls, OK))
	}
	emit(m.Tick(now.Add(time.Hour)))
	for i := range 16 {
		if fi, ok := m.Lookup(now, fid(i)); ok && (fi.Waiting != 0 || fi.Callbacks != 0) {
			t.Errorf("file %d left busy: %+v", i, fi)
		}
	}
}

func TestFileIDOf(t *testing.T) {
	a, b := FileIDOf([]byte("handle-a")), FileIDOf([]byte("handle-b"))
	if a == b || a != FileIDOf([]byte("handle-a")) {
		t.Fatalf("%x %x", a, b)
	}
}

// A plain GETATTR waits only for other clients' dirty blocks: it is answered at
// once for a file the table does not know (and adds no entry), for a clean
// file, and for the holder itself; it calls a dirty holder back with
// CB_WRITEBACK, which leaves it caching, and records no plain hold. A write-back
// the holder answered before the GETATTR arrived does not count.
func TestGetattr(t *testing.T) {
	h := newHarness(t, Config{PlainHold: time.Minute})
	h.register(cX, cY)
	f, g := fid(1), fid(2)

	if _, v := h.access(cP, g, AccessGetattr); v != Proceed {
		t.Fatalf("GETATTR of an unknown file: %v", v)
	}
	if _, ok := h.m.Lookup(h.now, g); ok {
		t.Fatal("a GETATTR of an unknown file added an entry")
	}

	if rep := h.openNow(cX, f, Write); !rep.CacheEnabled {
		t.Fatalf("%+v", rep)
	}
	if _, v := h.access(cX, f, AccessGetattr); v != Proceed {
		t.Fatalf("the writer's own GETATTR: %v", v)
	}
	for round := 0; round < 2; round++ {
		req, v := h.access(cP, f, AccessGetattr)
		if v != Wait {
			t.Fatalf("round %d: plain GETATTR of a file a caching writer holds: %v", round, v)
		}
		cbs := h.take()
		wantCalls(t, cbs, RowCallback{1, Writeback})
		if _, v := h.access(cY, f, AccessGetattr); v != Wait {
			t.Fatalf("round %d: a second GETATTR did not queue behind the first: %v", round, v)
		}
		h.answer(cbs[0], OK)
		wantFinal(t, h, req, ActProceed)
		// The second GETATTR arrived after that callback was sent: one more.
		cbs = h.take()
		wantCalls(t, cbs, RowCallback{1, Writeback})
		h.answer(cbs[0], OK)
		wantFinal(t, h, req+1, ActProceed)
		// The writer still caches (and may be dirty again): the next round
		// calls it back again.
		fi := h.info(f)
		if fi.State != OneWriter || len(fi.Holders) != 1 || !fi.Holders[0].Caching {
			t.Fatalf("round %d: %+v; want the writer alone, still caching (no plain hold)", round, fi)
		}
	}

	// Closed clean: nothing to wait for.
	h.close(cX, f, Write, false)
	if _, v := h.access(cP, f, AccessGetattr); v != Proceed {
		t.Fatalf("plain GETATTR of a clean closed file: %v", v)
	}
	// CLOSED_DIRTY: one write-back, after which the file is clean.
	h.openNow(cX, f, Write)
	h.close(cX, f, Write, true)
	req, v := h.access(cP, f, AccessGetattr)
	if v != Wait {
		t.Fatalf("plain GETATTR of a CLOSED_DIRTY file: %v", v)
	}
	cbs := h.take()
	wantCalls(t, cbs, RowCallback{1, Writeback})
	h.answer(cbs[0], OK)
	wantFinal(t, h, req, ActProceed)
	if _, v := h.access(cP, f, AccessGetattr); v != Proceed {
		t.Fatalf("plain GETATTR after the write-back: %v", v)
	}

	// A holder that does not answer is fenced; the GETATTR goes on.
	h.openNow(cX, f, Write)
	req, _ = h.access(cP, f, AccessGetattr)
	if len(h.take()) != 1 {
		t.Fatal("no callback")
	}
	h.advance(time.Minute)
	wantFinal(t, h, req, ActProceed)
}

// TestSmallTableHighWater: a table of 8 entries with the default parts and
// high water (docs/protocol.md section 15) is one part of 8: it holds 8 open
// files and refuses a 9th (JUKEBOX); reclaiming starts when an insertion finds
// 90 % of 8, rounded down (7), or more: the 8th insertion drops a CLOSED entry
// kept for its version, if there is one.
func TestSmallTableHighWater(t *testing.T) {
	h := newHarness(t, Config{MaxEntries: 8})
	h.register(cX)
	h.openNow(cX, fid(1), Read)
	h.close(cX, fid(1), Read, false) // CLOSED, kept for its version
	for i := 2; i <= 7; i++ {
		h.openNow(cX, fid(i), Read)
	}
	if st := h.m.Stats(h.now); st.Entries != 7 || st.ReclaimDrops != 0 {
		t.Fatalf("7 entries, no reclaiming yet: %+v", st)
	}
	h.openNow(cX, fid(8), Read) // finds 7 >= 7: drops the closed one
	if st := h.m.Stats(h.now); st.Entries != 7 || st.ReclaimDrops != 1 {
		t.Fatalf("the 8th insertion reclaims the closed entry: %+v", st)
	}
	h.openNow(cX, fid(9), Read) // 8 open files
	if _, r := h.open(cX, fid(10), Read); r.Verdict != Jukebox {
		t.Fatalf("a 9th open file in a table of 8: %v, want jukebox", r.Verdict)
	}
}
