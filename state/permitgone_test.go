package state

import "testing"

// TestPermitsRemoved: the removal of a directory ends the permit on it
// (Removed): the remover's own at once (or at the end of the batch under
// it that carries the removal), a pending one cancelled, another client's
// recalled without waiting; a client's count goes down, so that removed
// directories do not fill its bound. Before Removed, the permits of
// removed directories stayed until their client unregistered.
func TestPermitsRemoved(t *testing.T) {
	h := newPermitHarness(t, PermitConfig{MaxPerClient: 2})

	// The remover's own permit ends; a change waiting for its recall goes on.
	id := h.grant(1, fid(1))
	if h.change(10, 2, fid(1)) != Wait {
		t.Fatal("no wait")
	}
	h.absorb(h.p.Removed(h.now, 1, fid(1)))
	if h.p.Holds(1, fid(1), id) || h.p.Held(1) != 0 || !h.proceed[10] || len(h.fenced) != 0 {
		t.Fatalf("own permit after the removal: holds %v, held %d, proceed %v, fenced %v",
			h.p.Holds(1, fid(1), id), h.p.Held(1), h.proceed[10], h.fenced)
	}

	// The bound is not reached by directories made and removed.
	for k := range 5 {
		dir := fid(10 + k)
		if h.p.GrantNew(h.now, 1, dir, nil) == 0 {
			t.Fatalf("directory %d: no permit (bound reached by removed directories)", k)
		}
		h.absorb(h.p.Removed(h.now, 1, dir))
	}
	if st := h.p.Stats(); st.Permits != 0 {
		t.Fatalf("%d permits left after every directory was removed", st.Permits)
	}

	// Under a batch (the REINTEGRATE carrying the RMDIR), the end waits for it.
	id = h.grant(1, fid(2))
	if !h.p.BeginBatch(1, fid(2), id) {
		t.Fatal("batch not counted")
	}
	h.absorb(h.p.Removed(h.now, 1, fid(2)))
	if !h.p.Holds(1, fid(2), id) {
		t.Fatal("the permit ended during the batch that removed its directory")
	}
	h.absorb(h.p.EndBatch(h.now, 1, fid(2), id))
	if h.p.Holds(1, fid(2), id) || h.p.Held(1) != 0 {
		t.Fatal("the permit outlived the batch that removed its directory")
	}

	// A pending permit is cancelled.
	pid, fresh, ok := h.p.Acquire(h.now, 1, fid(3), nil)
	if !ok || !fresh {
		t.Fatal("not pending")
	}
	h.absorb(h.p.Removed(h.now, 1, fid(3)))
	if h.p.Granted(h.now, fid(3), pid) || h.p.Held(1) != 0 {
		t.Fatal("a pending permit on a removed directory was granted")
	}

	// Another client's permit is recalled, without waiting; it ends with
	// the recall's answer.
	id = h.grant(2, fid(4))
	calls := len(h.calls)
	h.absorb(h.p.Removed(h.now, 1, fid(4)))
	if len(h.calls) != calls+1 || h.calls[calls].Client != 2 || h.calls[calls].File != fid(4) {
		t.Fatalf("another client's permit on a removed directory not recalled: %+v", h.calls[calls:])
	}
	h.absorb(h.p.CallbackDone(h.now, h.calls[calls], OK))
	if h.p.Holds(2, fid(4), id) || h.p.Held(2) != 0 {
		t.Fatal("the recalled permit stayed")
	}

	if out := h.p.Removed(h.now, 1, fid(99)); len(out) != 0 {
		t.Fatalf("a directory without a permit: %+v", out)
	}
}
