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

// TestLocalAccessNoHold: a local process's access waits for the same
// callbacks as a plain one but leaves no hold: a writer opening the file
// right after it is granted caching (a plain NFSv3 reader's hold would make
// the file write-shared for PlainHold).
func TestLocalAccessNoHold(t *testing.T) {
	h := newHarness(t, Config{})
	const a, local = ClientID(1), ClientID(50)
	h.register(a)
	f := fid(1)
	h.openNow(a, f, Write)
	h.close(a, f, Write, true)
	h.nextReq++
	req := h.nextReq
	v, acts := h.m.PlainAccess(h.now, req, AccessArgs{File: f, Handle: f[:], Client: local, Kind: AccessRead, Local: true})
	h.absorb(acts)
	if v != Wait {
		t.Fatalf("local read of a dirty file: %v, want wait", v)
	}
	h.answerAll()
	if a, ok := h.final[req]; !ok || a.Kind != ActProceed {
		t.Fatalf("local read: %+v", a)
	}
	if fi := h.info(f); len(fi.Holders) != 0 {
		t.Fatalf("holders after the local read: %+v, want none", fi.Holders)
	}
	h.advance(2 * h.m.cfg.RecallBackoff)
	if r := h.openNow(a, f, Write); !r.CacheEnabled || !h.leased[f] {
		t.Fatalf("writer after the local read: %+v, leased %v; want caching and the lease", r, h.leased[f])
	}
}

// TestLocalReadOpenWriter: a local process's read of a file a client has
// open for writing, caching, has the client write back (CB_WRITEBACK) and
// leaves it caching, dirty, and the lease wanted.
func TestLocalReadOpenWriter(t *testing.T) {
	h := newHarness(t, Config{})
	const a, local = ClientID(1), ClientID(50)
	h.register(a)
	f := fid(1)
	if r := h.openNow(a, f, Write); !r.CacheEnabled {
		t.Fatalf("writer: %+v", r)
	}
	h.nextReq++
	req := h.nextReq
	v, acts := h.m.PlainAccess(h.now, req, AccessArgs{File: f, Handle: f[:], Client: local, Kind: AccessRead, Local: true})
	h.absorb(acts)
	if v != Wait {
		t.Fatalf("local read: %v, want wait", v)
	}
	calls := h.take()
	if len(calls) != 1 || calls[0].Mode != Writeback {
		t.Fatalf("callbacks %+v, want one WRITEBACK", calls)
	}
	h.answer(calls[0], OK)
	if a, ok := h.final[req]; !ok || a.Kind != ActProceed {
		t.Fatalf("local read: %+v", a)
	}
	fi := h.info(f)
	if len(fi.Holders) != 1 || !fi.Holders[0].Caching || !fi.Holders[0].Dirty || !h.leased[f] || fi.State != OneWriter {
		t.Fatalf("after the local read: %+v, leased %v; want the writer caching, dirty, leased", fi, h.leased[f])
	}
}

// TestReclaimLease: a file reclaimed dirty after a restart wants its lease
// (SyncLease), and a clean one does not.
func TestReclaimLease(t *testing.T) {
	h := newHarness(t, Config{})
	const a = ClientID(1)
	f, g := fid(1), fid(2)
	h.m.Reclaim(h.now, ReclaimArgs{File: f, Handle: f[:], Client: a, Writers: 1, Caching: true, Dirty: true, Version: 7})
	h.m.Reclaim(h.now, ReclaimArgs{File: g, Handle: g[:], Client: a, Readers: 1, Caching: true, Version: 8})
	h.absorb(h.m.SyncLease(f))
	h.absorb(h.m.SyncLease(g))
	if !h.leased[f] || h.leased[g] {
		t.Fatalf("leased: dirty %v, clean %v; want the dirty file's only", h.leased[f], h.leased[g])
	}
	if acts := h.m.SyncLease(f); len(acts) != 0 {
		t.Fatalf("SyncLease again: %+v, want nothing", acts)
	}
}
