package state

import "testing"

// TestPermitsReclaim: a permit reclaimed after a restart is held at once
// (nothing broken, no bound: MaxPerClient 1 is passed), with an id of this
// start's; reclaimed again by its holder it keeps its id; another client's
// reclaim or GET_PERMIT of it is refused; and it is recalled by another
// client's change as any permit, which waits for the holder's answer.
func TestPermitsReclaim(t *testing.T) {
	h := newPermitHarness(t, PermitConfig{MaxPerClient: 1, IDBase: 1 << 40})
	d1, d2 := fid(1), fid(2)
	id1 := h.p.Reclaim(h.now, 1, d1, d1[:])
	id2 := h.p.Reclaim(h.now, 1, d2, d2[:])
	if id1 <= 1<<40 || id2 <= 1<<40 || id1 == id2 {
		t.Fatalf("reclaimed ids %d, %d", id1, id2)
	}
	if !h.p.Holds(1, d1, id1) || !h.p.Holds(1, d2, id2) || h.p.Held(1) != 2 {
		t.Fatalf("reclaimed permits not held: %d held", h.p.Held(1))
	}
	if again := h.p.Reclaim(h.now, 1, d1, d1[:]); again != id1 {
		t.Fatalf("reclaimed again: id %d, want %d", again, id1)
	}
	if id := h.p.Reclaim(h.now, 2, d1, d1[:]); id != 0 {
		t.Fatalf("another client reclaimed a held permit: id %d", id)
	}
	if _, _, ok := h.p.Acquire(h.now, 2, d1, d1[:]); ok {
		t.Fatal("another client's GET_PERMIT of a reclaimed permit granted")
	}
	if v := h.change(10, 2, d1); v != Wait || len(h.calls) != 1 || h.calls[0].Client != 1 {
		t.Fatalf("another client's change of a reclaimed directory: %v, recalls %+v", v, h.calls)
	}
	h.absorb(h.p.CallbackDone(h.now, h.calls[0], OK))
	if !h.proceed[10] || h.p.Holds(1, d1, id1) {
		t.Fatalf("after the holder's answer: proceeded %v, still held %v", h.proceed[10], h.p.Holds(1, d1, id1))
	}
	// A pending permit of the holder's own is not reclaimed over.
	d3 := fid(3)
	h2 := newPermitHarness(t, PermitConfig{})
	if _, fresh, ok := h2.p.Acquire(h2.now, 1, d3, d3[:]); !ok || !fresh {
		t.Fatal("GET_PERMIT refused")
	}
	if id := h2.p.Reclaim(h2.now, 1, d3, d3[:]); id != 0 {
		t.Fatalf("a pending permit reclaimed: id %d", id)
	}
}
