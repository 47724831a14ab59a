package state

import "testing"

// TestChangedOutside: a change made outside the protocol (a local process on
// the server machine) drops the version, calls back at once every client
// that may cache the file (INVALIDATE; WRITEBACK_INVALIDATE from the one that
// may be dirty), and a client with another callback out gets its
// invalidation when that one ends.
func TestChangedOutside(t *testing.T) {
	h := newHarness(t, Config{})
	const a, b, c = ClientID(1), ClientID(2), ClientID(3)
	h.register(a, b, c)
	f, g := fid(1), fid(2)

	// Nobody caches g: nothing to call back, but the version changes.
	r0 := h.openNow(a, g, Read)
	h.close(a, g, Read, false)
	if acts := h.m.Changed(h.now, g); len(acts) != 0 {
		t.Fatalf("a closed file's change: %+v, want no actions", acts)
	}
	if r := h.openNow(a, g, Read); r.Version == r0.Version || r.OldVersion != r.Version {
		t.Fatalf("open after the change: %+v (before %+v), want a fresh version twice", r, r0)
	}
	h.close(a, g, Read, false)

	// a and b read f, caching it.
	ra := h.openNow(a, f, Read)
	if rb := h.openNow(b, f, Read); !ra.CacheEnabled || !rb.CacheEnabled {
		t.Fatalf("readers not caching: %+v %+v", ra, rb)
	}
	h.absorb(h.m.Changed(h.now, f))
	calls := h.take()
	if len(calls) != 2 {
		t.Fatalf("callbacks %+v, want an INVALIDATE to each reader", calls)
	}
	for _, cb := range calls {
		if cb.Mode != Invalidate {
			t.Errorf("callback %+v, want INVALIDATE", cb)
		}
		h.answer(cb, OK)
	}
	for _, hi := range h.info(f).Holders {
		if hi.Caching {
			t.Errorf("%d still caching after its invalidation", hi.Client)
		}
	}
	if r := h.openNow(c, f, Read); r.Version == ra.Version || r.OldVersion != r.Version {
		t.Fatalf("open after the change: %+v (before %+v), want a fresh version twice", r, ra)
	}
	h.close(a, f, Read, false)
	h.close(b, f, Read, false)
	h.close(c, f, Read, false)

	// A caching writer: WRITEBACK_INVALIDATE.
	h.advance(3 * h.m.cfg.RecallBackoff)
	if r := h.openNow(a, f, Write); !r.CacheEnabled {
		t.Fatalf("writer not caching: %+v", r)
	}
	h.absorb(h.m.Changed(h.now, f))
	calls = h.take()
	if len(calls) != 1 || calls[0].Mode != WritebackInvalidate || calls[0].Client != a {
		t.Fatalf("callbacks %+v, want one WRITEBACK_INVALIDATE to the writer", calls)
	}
	h.answer(calls[0], OK)
	if fi := h.info(f); fi.Holders[0].Caching || fi.Holders[0].Dirty {
		t.Fatalf("writer after its callback: %+v", fi.Holders[0])
	}
	h.close(a, f, Write, false)

	// A callback already out (a GETATTR's write-back): the invalidation is
	// owed, and sent when it ends.
	h.advance(3 * h.m.cfg.RecallBackoff)
	if r := h.openNow(a, f, Write); !r.CacheEnabled {
		t.Fatalf("writer not caching: %+v", r)
	}
	if _, v := h.access(b, f, AccessGetattr); v != Wait {
		t.Fatalf("GETATTR with a dirty writer: %v, want wait", v)
	}
	calls = h.take()
	if len(calls) != 1 || calls[0].Mode != Writeback {
		t.Fatalf("callbacks %+v, want a WRITEBACK", calls)
	}
	h.absorb(h.m.Changed(h.now, f))
	if len(h.calls) != 0 {
		t.Fatalf("a second callback to the same client while one is out: %+v", h.calls)
	}
	h.answer(calls[0], OK)
	calls = h.take()
	if len(calls) != 1 || calls[0].Mode&Invalidate == 0 || calls[0].Client != a {
		t.Fatalf("after the write-back: callbacks %+v, want the owed invalidation", calls)
	}
	h.answer(calls[0], OK)
	if len(h.calls) != 0 {
		t.Fatalf("more callbacks: %+v", h.calls)
	}
	if fi := h.info(f); fi.Holders[0].Caching {
		t.Fatalf("writer still caching: %+v", fi.Holders[0])
	}
}

// TestChangedAll: lost change notifications count as a change of every file.
func TestChangedAll(t *testing.T) {
	h := newHarness(t, Config{})
	const a, b = ClientID(1), ClientID(2)
	h.register(a, b)
	f, g := fid(1), fid(2)
	rf := h.openNow(a, f, Read)
	rg := h.openNow(b, g, Write)
	h.absorb(h.m.ChangedAll(h.now))
	calls := h.take()
	if len(calls) != 2 {
		t.Fatalf("callbacks %+v, want one per caching client", calls)
	}
	for _, cb := range calls {
		want := Invalidate
		if cb.Client == b {
			want = WritebackInvalidate
		}
		if cb.Mode != want {
			t.Errorf("callback %+v, want %v", cb, want)
		}
		h.answer(cb, OK)
	}
	if r := h.openNow(b, f, Read); r.Version == rf.Version {
		t.Errorf("f kept its version %d", r.Version)
	}
	if r := h.openNow(a, g, Read); r.Version == rg.Version {
		t.Errorf("g kept its version %d", r.Version)
	}
}

// TestChangeAttributeAtOpen: without change notifications the driver gives
// each OPEN the file's change attribute: one that moved while nobody wrote
// the file through the server is a change outside the protocol (a fresh
// version, callbacks); one that moved while a client wrote it is not.
func TestChangeAttributeAtOpen(t *testing.T) {
	h := newHarness(t, Config{})
	const a, b = ClientID(1), ClientID(2)
	h.register(a, b)
	f := fid(1)
	open := func(c ClientID, mode Mode, change uint64) OpenReply {
		t.Helper()
		h.nextReq++
		r, acts := h.m.Open(h.now, h.nextReq, OpenArgs{File: f, Handle: f[:], Client: c, Mode: mode, Change: change})
		h.absorb(acts)
		if r.Verdict != Proceed {
			t.Fatalf("open: %v", r.Verdict)
		}
		return r.Reply
	}
	r1 := open(a, Read, 100)
	h.close(a, f, Read, false)
	if r := open(a, Read, 100); r.Version != r1.Version {
		t.Fatalf("unchanged file: version %d, want %d", r.Version, r1.Version)
	}
	// b reads it too, caching; then the attribute moves with nobody writing.
	open(b, Read, 100)
	r2 := open(a, Read, 200)
	if r2.Version == r1.Version {
		t.Fatalf("changed file: version %d kept", r2.Version)
	}
	calls := h.take()
	if len(calls) == 0 {
		t.Fatal("no invalidation of the clients caching the changed file")
	}
	for _, cb := range calls {
		if cb.Mode != Invalidate {
			t.Errorf("callback %+v, want INVALIDATE", cb)
		}
		h.answer(cb, OK)
	}
	h.close(a, f, Read, false)
	h.close(a, f, Read, false)
	h.close(b, f, Read, false)
	// A writer explains a moved attribute.
	h.advance(3 * h.m.cfg.RecallBackoff)
	w := open(a, Write, 200)
	h.nextReq++
	req := h.nextReq
	_, acts := h.m.Open(h.now, req, OpenArgs{File: f, Handle: f[:], Client: b, Mode: Read, Change: 300})
	h.absorb(acts)
	h.answerAll()
	if r := h.reply(req); r.Version != w.Version {
		t.Fatalf("open while a client writes: version %d, want the writer's %d", r.Version, w.Version)
	}
}

// TestChangedWhere: only the files whose handle the match accepts are
// changed (an exports reload removing their export): their caching clients
// are called back, the others keep their caches; UnsettledWhere counts such
// a file until its dirty client answered.
func TestChangedWhere(t *testing.T) {
	h := newHarness(t, Config{})
	const a, b = ClientID(1), ClientID(2)
	h.register(a, b)
	f, g := fid(1), fid(2)
	rf := h.openNow(a, f, Read)
	h.openNow(b, g, Write)
	isG := func(handle []byte) bool { return handle[15] == 2 }
	isF := func(handle []byte) bool { return handle[15] == 1 }
	if n := h.m.UnsettledWhere(h.now, isG); n != 1 {
		t.Fatalf("g with a caching writer: %d unsettled, want 1 (it may hold dirty blocks)", n)
	}
	if n := h.m.UnsettledWhere(h.now, isF); n != 0 {
		t.Fatalf("f with a caching reader: %d unsettled, want 0", n)
	}
	h.absorb(h.m.ChangedWhere(h.now, isG))
	calls := h.take()
	if len(calls) != 1 || calls[0].Client != b || calls[0].Mode != WritebackInvalidate {
		t.Fatalf("callbacks %+v, want one WRITEBACK_INVALIDATE to g's writer", calls)
	}
	if n := h.m.UnsettledWhere(h.now, isG); n != 1 {
		t.Fatalf("g with its callback out: %d unsettled, want 1", n)
	}
	h.answer(calls[0], OK)
	if n := h.m.UnsettledWhere(h.now, isG); n != 0 {
		t.Fatalf("g once written back: %d unsettled, want 0", n)
	}
	if r := h.openNow(b, f, Read); r.Version != rf.Version {
		t.Errorf("f's version changed %d -> %d: it did not match", rf.Version, r.Version)
	}
}
