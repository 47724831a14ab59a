package state

import "testing"

// TestPinnedHolder: a writer that answers Pinned (its kernel writes into its
// cache itself) stays the dirty holder while it has the file open for
// writing, and every other client's request on the file, covered ones
// included, waits until it has answered a write-back asked after the request
// arrived; its own requests never wait; its last write close ends it.
func TestPinnedHolder(t *testing.T) {
	const a, b, c = 1, 2, 3
	f := fid(1)
	h := newHarness(t, Config{})
	h.register(a, b)
	if r := h.openNow(a, f, Write); !r.CacheEnabled {
		t.Fatal("A's write open: want caching")
	}
	req, r := h.open(b, f, Read)
	if r.Verdict != Wait {
		t.Fatalf("B's open: %v, want it to wait for A's callback", r.Verdict)
	}
	cbs := h.take()
	if len(cbs) != 1 || cbs[0].Client != a || cbs[0].Mode != WritebackInvalidate {
		t.Fatalf("callbacks %+v, want WRITEBACK_INVALIDATE to A", cbs)
	}
	h.answer(cbs[0], Pinned)
	if rep := h.reply(req); rep.CacheEnabled {
		t.Fatal("B's open: caching granted while A is pinned")
	}
	if fi := h.info(f); fi.State != WriteShared || !fi.Holders[0].Pinned || !fi.Holders[0].Dirty || fi.Holders[0].Caching {
		t.Fatalf("after Pinned: %+v, want WRITE_SHARED with A pinned, dirty, not caching", fi)
	}

	// B's covered READ waits for a write-back from A asked after it.
	for k := range 2 {
		rq, v := h.access(b, f, AccessRead)
		if v != Wait {
			t.Fatalf("B's READ %d: %v, want wait", k, v)
		}
		cbs = h.take()
		if len(cbs) != 1 || cbs[0].Client != a || cbs[0].Mode != Writeback {
			t.Fatalf("B's READ %d: callbacks %+v, want WRITEBACK to A", k, cbs)
		}
		if _, done := h.final[rq]; done {
			t.Fatalf("B's READ %d answered before A's write-back", k)
		}
		h.answer(cbs[0], Pinned)
		if act, ok := h.final[rq]; !ok || act.Kind != ActProceed {
			t.Fatalf("B's READ %d after A's write-back: %+v, %v; want proceed", k, act, ok)
		}
	}
	// A plain client's GETATTR and WRITE wait likewise.
	for _, k := range []AccessKind{AccessGetattr, AccessWrite} {
		rq, v := h.access(c, f, k)
		if v != Wait {
			t.Fatalf("plain %v: %v, want wait", k, v)
		}
		cbs = h.take()
		if len(cbs) != 1 || cbs[0].Client != a || cbs[0].Mode != Writeback {
			t.Fatalf("plain %v: callbacks %+v, want WRITEBACK to A", k, cbs)
		}
		h.answer(cbs[0], Pinned)
		if act, ok := h.final[rq]; !ok || act.Kind != ActProceed {
			t.Fatalf("plain %v after A's write-back: %+v, %v; want proceed", k, act, ok)
		}
	}
	// A's own requests, and the WRITEs answering its callback, never wait.
	for _, k := range []AccessKind{AccessWrite, AccessRead, AccessGetattr} {
		if _, v := h.access(a, f, k); v != Proceed {
			t.Fatalf("A's own %v: %v, want proceed", k, v)
		}
	}
	if len(h.calls) != 0 {
		t.Fatalf("callbacks %+v after A's own requests", h.calls)
	}
	// A's last write close (its data written back) ends the pinning.
	h.close(a, f, Write, false)
	if fi := h.info(f); len(fi.Holders) > 0 && fi.Holders[0].Client == a && (fi.Holders[0].Pinned || fi.Holders[0].Dirty) {
		t.Fatalf("after A's close: %+v", fi)
	}
	if _, v := h.access(b, f, AccessRead); v != Proceed || len(h.calls) != 0 {
		t.Fatalf("B's READ after A closed: %v, calls %+v; want proceed with no callback", v, h.calls)
	}
}

// TestPinnedWithoutWriteOpen: a Pinned answer from a client with no write
// open counts as OK (nothing keeps it writing into its cache).
func TestPinnedWithoutWriteOpen(t *testing.T) {
	const a, b = 1, 2
	f := fid(2)
	h := newHarness(t, Config{})
	h.register(a, b)
	h.openNow(a, f, Write)
	h.close(a, f, Write, true) // CLOSED_DIRTY
	_, r := h.open(b, f, Read)
	if r.Verdict != Wait {
		t.Fatalf("B's open: %v, want wait for A's write-back", r.Verdict)
	}
	cbs := h.take()
	if len(cbs) != 1 || cbs[0].Mode != Writeback {
		t.Fatalf("callbacks %+v", cbs)
	}
	h.answer(cbs[0], Pinned)
	if fi := h.info(f); fi.State != OneReader {
		t.Fatalf("after a Pinned answer with no write open: %+v, want ONE_READER (A clean)", fi)
	}
}

// TestPinnedHolderReclaimed: after a server restart, a caching writer that
// reclaims beside another client's reclaimed open was pinned before it (no
// other way to be a caching writer there), so it is pinned again at once,
// whichever report comes first: the other client's covered WRITE waits for
// its write-back instead of going ahead of what its kernel wrote and has not
// sent (docs/protocol.md 10.1). That first write-back also invalidates: a
// holder that was not pinned after all stops caching and answers CB_OK, and
// is then neither pinned nor caching; a pinned one answers CB_PINNED and is
// asked plain write-backs from then on.
func TestPinnedHolderReclaimed(t *testing.T) {
	const a, b = 1, 2
	for _, holderFirst := range []bool{true, false} {
		for _, answer := range []Outcome{Pinned, OK} {
			h := newHarness(t, Config{})
			h.register(a, b)
			f := fid(1)
			holder := ReclaimArgs{File: f, Handle: f[:], Client: a, Writers: 1, Caching: true, Dirty: true, Version: 5}
			other := ReclaimArgs{File: f, Handle: f[:], Client: b, Writers: 1, Version: 5}
			if holderFirst {
				h.m.Reclaim(h.now, holder)
				h.m.Reclaim(h.now, other)
			} else {
				h.m.Reclaim(h.now, other)
				h.m.Reclaim(h.now, holder)
			}
			holderOf := func() HolderInfo {
				for _, hd := range h.info(f).Holders {
					if hd.Client == a {
						return hd
					}
				}
				t.Fatalf("A not a holder: %+v", h.info(f))
				return HolderInfo{}
			}
			if hd := holderOf(); !hd.Pinned || hd.Caching || !hd.Dirty {
				t.Fatalf("holder first %v: A reclaimed as %+v, want pinned, dirty, not caching", holderFirst, hd)
			}
			rq, v := h.access(b, f, AccessWrite)
			if v != Wait {
				t.Fatalf("holder first %v: B's covered WRITE: %v, want it to wait for A's write-back", holderFirst, v)
			}
			cbs := h.take()
			if len(cbs) != 1 || cbs[0].Client != a || cbs[0].Mode != WritebackInvalidate {
				t.Fatalf("holder first %v: callbacks %+v, want WRITEBACK_INVALIDATE to A", holderFirst, cbs)
			}
			h.answer(cbs[0], answer)
			if act, ok := h.final[rq]; !ok || act.Kind != ActProceed {
				t.Fatalf("holder first %v: B's WRITE after A's write-back: %+v, %v", holderFirst, act, ok)
			}
			rq, v = h.access(b, f, AccessRead)
			if answer == OK {
				// Not pinned after all: it stopped caching, nothing waits.
				if hd := holderOf(); hd.Pinned || hd.Caching {
					t.Fatalf("holder first %v: A after CB_OK: %+v, want neither pinned nor caching", holderFirst, hd)
				}
				if v != Proceed {
					t.Fatalf("holder first %v: B's READ after A answered OK: %v, want proceed", holderFirst, v)
				}
				continue
			}
			cbs = h.take()
			if v != Wait || len(cbs) != 1 || cbs[0].Mode != Writeback {
				t.Fatalf("holder first %v: B's next READ: %v, callbacks %+v; want a plain WRITEBACK to the pinned A", holderFirst, v, cbs)
			}
			h.answer(cbs[0], Pinned)
			if act, ok := h.final[rq]; !ok || act.Kind != ActProceed {
				t.Fatalf("holder first %v: B's READ: %+v, %v", holderFirst, act, ok)
			}
		}
	}
}

// TestReclaimTwoCachingWriters: two clients that both report caching the
// file for writing contradict each other (a fencing the restart forgot):
// neither is pinned, whichever order they come in, since two pinned holders
// would each wait for the other's write-back.
func TestReclaimTwoCachingWriters(t *testing.T) {
	const a, b, c = 1, 2, 3
	h := newHarness(t, Config{})
	h.register(a, b, c)
	f := fid(1)
	h.m.Reclaim(h.now, ReclaimArgs{File: f, Handle: f[:], Client: c, Readers: 1, Version: 5})
	h.m.Reclaim(h.now, ReclaimArgs{File: f, Handle: f[:], Client: a, Writers: 1, Caching: true, Dirty: true, Version: 5})
	h.m.Reclaim(h.now, ReclaimArgs{File: f, Handle: f[:], Client: b, Writers: 1, Caching: true, Dirty: true, Version: 5})
	for _, hd := range h.info(f).Holders {
		if hd.Pinned {
			t.Fatalf("%+v: a holder pinned beside another caching writer", h.info(f))
		}
	}
}

// TestPinnedOKAfterDirtyClose is the machine's side of the FuzzStateMachine
// failure CI found (a0b9dbcbe649d380; its trace replayed by the seed
// testdata/fuzz/FuzzStateMachine/pinned_ok_after_dirty_close): a pinned holder A with
// two write opens is called back for a plain GETATTR; before it answers, the
// application's close of one open crosses the callback (CLOSE, dirty = TRUE:
// its kernel's writes not yet sent), and then A, its kernel's writers gone,
// answers CB_OK (docs/protocol.md 10.1). A CB_OK from a pinned holder covers
// everything: it is pinned no more and not dirty either. The machine kept it
// dirty (the crossing CLOSE's rule for a caching writer, section 5.1) while
// ending the pinning: a dirty holder of a file B has open, whose covered
// READs no longer waited for its write-backs.
func TestPinnedOKAfterDirtyClose(t *testing.T) {
	const a, b, c = 1, 2, 100
	f := fid(3)
	h := newHarness(t, Config{})
	h.register(a, b)
	h.openNow(a, f, Write)
	req, r := h.open(b, f, Read)
	if r.Verdict != Wait {
		t.Fatalf("B's open: %v, want wait", r.Verdict)
	}
	cbs := h.take()
	if len(cbs) != 1 || cbs[0].Client != a || cbs[0].Mode != WritebackInvalidate {
		t.Fatalf("callbacks %+v, want WRITEBACK_INVALIDATE to A", cbs)
	}
	h.answer(cbs[0], Pinned)
	h.reply(req)
	if rep := h.openNow(a, f, Write); rep.CacheEnabled {
		t.Fatal("A's second write open: caching granted on a WRITE_SHARED file")
	}
	rq, v := h.access(c, f, AccessGetattr)
	if v != Wait {
		t.Fatalf("plain GETATTR: %v, want wait for the pinned A", v)
	}
	cbs = h.take()
	if len(cbs) != 1 || cbs[0].Client != a || cbs[0].Mode != Writeback {
		t.Fatalf("callbacks %+v, want WRITEBACK to A", cbs)
	}
	h.close(a, f, Write, true) // crosses the callback
	h.answer(cbs[0], OK)
	if act, ok := h.final[rq]; !ok || act.Kind != ActProceed {
		t.Fatalf("plain GETATTR after A's answer: %+v, %v", act, ok)
	}
	fi := h.info(f)
	for _, hd := range fi.Holders {
		if hd.Client == a && (hd.Pinned || hd.Dirty || hd.Writers != 1) {
			t.Fatalf("A after CB_OK: %+v, want one write open, neither pinned nor dirty", fi)
		}
	}
	if h.leased[f] {
		t.Fatal("the file's lease still held: nobody may be dirty")
	}
}

// TestPinnedDirtyLastClose: a pinned holder whose last CLOSE for writing says
// dirty (what its kernel wrote is not all sent: the write-back at its close
// failed) stays pinned: the covered READ of B, which has the file open, waits
// for its write-back instead of reading the server's copy without its writes,
// and the answer ends the pinning and the dirty record. TREAT_AS_CLOSED from a
// pinned holder ends both too.
func TestPinnedDirtyLastClose(t *testing.T) {
	const a, b = 1, 2
	for _, answer := range []Outcome{OK, Pinned, TreatAsClosed} {
		f := fid(4)
		h := newHarness(t, Config{})
		h.register(a, b)
		h.openNow(a, f, Write)
		h.openNow(a, f, Read)
		req, _ := h.open(b, f, Read)
		cbs := h.take()
		if len(cbs) != 1 || cbs[0].Client != a || cbs[0].Mode != WritebackInvalidate {
			t.Fatalf("callbacks %+v, want WRITEBACK_INVALIDATE to A", cbs)
		}
		h.answer(cbs[0], Pinned)
		h.reply(req)
		h.close(a, f, Write, true)
		rq, v := h.access(b, f, AccessRead)
		if v != Wait {
			t.Fatalf("B's covered READ after A's dirty last write CLOSE: %v, want it to wait for A's write-back (%+v)", v, h.info(f))
		}
		cbs = h.take()
		if len(cbs) != 1 || cbs[0].Client != a || cbs[0].Mode != Writeback {
			t.Fatalf("callbacks %+v, want WRITEBACK to A", cbs)
		}
		if answer == TreatAsClosed {
			h.close(a, f, Read, false) // TREAT_AS_CLOSED comes with no open held
		}
		h.answer(cbs[0], answer)
		if act, ok := h.final[rq]; !ok || act.Kind != ActProceed {
			t.Fatalf("answer %v: B's READ after A's write-back: %+v, %v", answer, act, ok)
		}
		for _, hd := range h.info(f).Holders {
			if hd.Client == a && (hd.Pinned || hd.Dirty) {
				t.Fatalf("answer %v: A after its write-back: %+v, want neither pinned nor dirty", answer, h.info(f))
			}
		}
		if _, v := h.access(b, f, AccessRead); v != Proceed || len(h.calls) != 0 {
			t.Fatalf("answer %v: B's next READ: %v, calls %+v; want proceed with no callback", answer, v, h.calls)
		}
		if h.leased[f] {
			t.Fatalf("answer %v: the file's lease still held", answer)
		}
	}
}
