package state

import "testing"

// TestLeaseFollowsDirty: the file's lease is asked for while a client may
// hold dirty blocks of it (a caching writer, then a last writer not written
// back) and released once none may; a plain access (a local process, whose
// open broke the lease) has the dirty blocks written back first.
func TestLeaseFollowsDirty(t *testing.T) {
	h := newHarness(t, Config{})
	const a, local = ClientID(1), ClientID(50)
	h.register(a)
	f := fid(1)
	if r := h.openNow(a, f, Read); !r.CacheEnabled || h.leased[f] {
		t.Fatalf("a caching reader: %+v, leased %v; want caching, no lease", r, h.leased[f])
	}
	h.close(a, f, Read, false)
	if r := h.openNow(a, f, Write); !r.CacheEnabled || !h.leased[f] {
		t.Fatalf("a caching writer: %+v, leased %v; want caching and the lease", r, h.leased[f])
	}
	h.close(a, f, Write, true)
	if !h.leased[f] {
		t.Fatal("the lease was released with dirty blocks still in the client's cache")
	}
	// The local process's open broke the lease: a plain READ.
	req, v := h.access(local, f, AccessRead)
	if v != Wait {
		t.Fatalf("the local read: %v, want it to wait for the write-back", v)
	}
	calls := h.take()
	if len(calls) != 1 || calls[0].Mode != Writeback {
		t.Fatalf("callbacks %+v, want a WRITEBACK", calls)
	}
	h.answer(calls[0], OK)
	if a, ok := h.final[req]; !ok || a.Kind != ActProceed {
		t.Fatalf("the local read after the write-back: %+v", a)
	}
	if h.leased[f] {
		t.Fatal("the lease is still asked for with nothing dirty")
	}
	// A writer that is fenced holds nothing: no lease.
	h.advance(2 * h.m.cfg.PlainHold)
	if r := h.openNow(a, f, Write); !r.CacheEnabled || !h.leased[f] {
		t.Fatalf("a caching writer again: %+v, leased %v", r, h.leased[f])
	}
	if _, v := h.access(local, f, AccessWrite); v != Wait {
		t.Fatalf("the local write: %v, want wait", v)
	}
	calls = h.take()
	h.advance(h.m.cfg.CallbackTimeout + h.m.cfg.QueueTimeout + 1)
	if len(h.fences) == 0 || h.leased[f] {
		t.Fatalf("silent writer (callbacks %+v): fences %v, leased %v; want it fenced and no lease", calls, h.fences, h.leased[f])
	}
}
