package lockmgr

import (
	"math"
	"slices"
	"testing"
	"time"
)

func TestRangeOf(t *testing.T) {
	for _, c := range []struct {
		off, len uint64
		want     Range
		wantLen  uint64
	}{
		{0, 0, Range{0, ToEnd}, 0},
		{10, 0, Range{10, ToEnd}, 0},
		{10, 5, Range{10, 14}, 5},
		{0, 1, Range{0, 0}, 1},
		{math.MaxUint64, 1, Range{ToEnd, ToEnd}, 0},
		{math.MaxUint64 - 9, 10, Range{math.MaxUint64 - 9, ToEnd}, 0},    // ends exactly at the last byte
		{math.MaxUint64 - 9, 11, Range{math.MaxUint64 - 9, ToEnd}, 0},    // would pass it: clamped
		{math.MaxUint64 - 9, 9, Range{math.MaxUint64 - 9, ToEnd - 1}, 9}, // stops one short
		{1, math.MaxUint64, Range{1, ToEnd}, 0},
		{0, math.MaxUint64, Range{0, ToEnd - 1}, math.MaxUint64},
	} {
		got := RangeOf(c.off, c.len)
		if got != c.want || got.Length() != c.wantLen || got.Offset() != c.off {
			t.Errorf("RangeOf(%d, %d) = %v len %d, want %v len %d", c.off, c.len, got, got.Length(), c.want, c.wantLen)
		}
	}
}

func TestSetRange(t *testing.T) {
	R, W := Read, Write
	sp := func(s, e uint64, t LockType) span { return span{Range{s, e}, t} }
	for _, c := range []struct {
		name string
		in   []span
		r    Range
		t    LockType
		want []span
	}{
		{"new", nil, rg(5, 9), R, []span{sp(5, 9, R)}},
		{"merge adjacent", []span{sp(0, 4, R)}, rg(5, 9), R, []span{sp(0, 9, R)}},
		{"merge both sides", []span{sp(0, 4, R), sp(10, 14, R)}, rg(5, 9), R, []span{sp(0, 14, R)}},
		{"no merge other type", []span{sp(0, 4, W)}, rg(5, 9), R, []span{sp(0, 4, W), sp(5, 9, R)}},
		{"merge overlapping", []span{sp(0, 6, R)}, rg(5, 9), R, []span{sp(0, 9, R)}},
		{"upgrade middle splits", []span{sp(0, 9, R)}, rg(3, 5), W, []span{sp(0, 2, R), sp(3, 5, W), sp(6, 9, R)}},
		{"downgrade all", []span{sp(0, 9, W)}, rg(0, 9), R, []span{sp(0, 9, R)}},
		{"upgrade covering several", []span{sp(0, 2, R), sp(4, 6, W), sp(8, 9, R)}, rg(1, 8), W, []span{sp(0, 0, R), sp(1, 8, W), sp(9, 9, R)}},
		{"unlock splits", []span{sp(0, 9, W)}, rg(3, 5), Unlocked, []span{sp(0, 2, W), sp(6, 9, W)}},
		{"unlock all", []span{sp(0, 2, W), sp(5, 7, R)}, Whole, Unlocked, nil},
		{"unlock nothing", []span{sp(0, 2, W)}, rg(5, 7), Unlocked, []span{sp(0, 2, W)}},
		{"to end", []span{sp(0, ToEnd, W)}, rg(10, ToEnd), Unlocked, []span{sp(0, 9, W)}},
		{"last byte", []span{sp(ToEnd, ToEnd, R)}, rg(ToEnd-1, ToEnd-1), R, []span{sp(ToEnd-1, ToEnd, R)}},
		{"same again", []span{sp(0, 9, R)}, rg(2, 3), R, []span{sp(0, 9, R)}},
	} {
		got := setRange(c.in, c.r, c.t)
		if !spansEqual(got, c.want) {
			t.Errorf("%s: setRange(%v, %v, %v) = %v, want %v", c.name, c.in, c.r, c.t, got, c.want)
		}
	}
}

func TestRaises(t *testing.T) {
	sp := func(s, e uint64, t LockType) span { return span{Range{s, e}, t} }
	for _, c := range []struct {
		in   []span
		r    Range
		t    LockType
		want bool
	}{
		{nil, rg(0, 9), Read, true},
		{[]span{sp(0, 9, Read)}, rg(0, 9), Read, false},
		{[]span{sp(0, 9, Read)}, rg(0, 9), Write, true},
		{[]span{sp(0, 9, Write)}, rg(2, 3), Read, false},
		{[]span{sp(0, 4, Write), sp(5, 9, Read)}, rg(0, 9), Read, false},
		{[]span{sp(0, 4, Write), sp(6, 9, Read)}, rg(0, 9), Read, true}, // a gap
		{[]span{sp(0, 4, Write)}, rg(0, 9), Read, true},
		{[]span{sp(0, ToEnd, Write)}, rg(7, ToEnd), Write, false},
		{[]span{sp(0, 9, Write)}, rg(0, 9), Unlocked, false},
	} {
		if got := raises(c.in, c.r, c.t); got != c.want {
			t.Errorf("raises(%v, %v, %v) = %v, want %v", c.in, c.r, c.t, got, c.want)
		}
	}
}

func TestPOSIXPerOwner(t *testing.T) {
	h := newHarness(t, Config{})
	const f = FileKey("f")
	mustLock := func(o Owner, ty LockType, r Range, want Verdict) Result {
		t.Helper()
		res := h.lock(LockArgs{File: f, Owner: o, Type: ty, Range: r})
		if res.Verdict != want {
			t.Fatalf("%v %v %v: %v, want %v", o, ty, r, res, want)
		}
		h.checkMirror()
		return res
	}
	mustLock(ownA, Read, rg(0, 9), Granted)
	mustLock(ownB, Read, rg(5, 14), Granted) // shared with A
	res := mustLock(ownC, Write, rg(12, 20), Denied)
	if res.Holder != (Lock{ownB, Read, rg(5, 14)}) {
		t.Fatalf("holder %v", res.Holder)
	}
	res = mustLock(ownC, Write, rg(0, 20), Denied) // the first conflict is A's, by start
	if res.Holder != (Lock{ownA, Read, rg(0, 9)}) {
		t.Fatalf("holder %v", res.Holder)
	}
	mustLock(ownA, Read, rg(10, 11), Granted) // merged with A's [0,9]
	if got := h.m.Holders(f); !slices.Equal(got, []Lock{{ownA, Read, rg(0, 11)}, {ownB, Read, rg(5, 14)}}) {
		t.Fatalf("holders %v", got)
	}
	mustLock(ownA, Write, rg(0, 3), Granted) // upgrade of a part nobody shares
	mustLock(ownA, Write, rg(0, 5), Denied)  // B shares 5
	if got := h.m.Test(h.now, f, ownC, Read, rg(0, 0)); got.Verdict != Denied || got.Holder != (Lock{ownA, Write, rg(0, 3)}) {
		t.Fatalf("test %v", got)
	}
	if got := h.m.Test(h.now, f, ownA, Write, rg(0, 3)); got.Verdict != Granted {
		t.Fatalf("own locks never conflict: %v", got)
	}
	if v := h.unlock(f, ownA, rg(2, 2)); v != Granted { // split
		t.Fatal(v)
	}
	want := []Lock{{ownA, Write, rg(0, 1)}, {ownA, Write, rg(3, 3)}, {ownA, Read, rg(4, 11)}, {ownB, Read, rg(5, 14)}}
	if got := h.m.Holders(f); !slices.Equal(got, want) {
		t.Fatalf("holders %v, want %v", got, want)
	}
	mustLock(ownC, Write, rg(2, 2), Granted) // the hole
	mustLock(ownA, Read, rg(0, 3), Denied)   // C holds 2
	mustLock(ownA, Read, rg(0, 1), Granted)  // downgrade
	h.unlock(f, ownA, Whole)
	h.unlock(f, ownB, Whole)
	h.unlock(f, ownC, Whole)
	if s := h.m.Stats(); s.Files != 0 || s.Records != 0 || h.m.Count(1) != 0 {
		t.Fatalf("left %+v", s)
	}
	h.checkMirror()
}

func TestFlockWholeFile(t *testing.T) {
	h := newHarness(t, Config{})
	fl1 := Owner{1, "flock:1"}
	fl2 := Owner{1, "flock:2"} // same client, another open file description
	if r := h.lock(LockArgs{File: "f", Owner: fl1, Type: Write, Range: Whole}); r.Verdict != Granted {
		t.Fatal(r)
	}
	if r := h.lock(LockArgs{File: "f", Owner: fl2, Type: Read, Range: Whole}); r.Verdict != Denied {
		t.Fatal(r)
	}
	if r := h.lock(LockArgs{File: "f", Owner: ownB, Type: Read, Range: rg(1<<62, 1<<62)}); r.Verdict != Denied {
		t.Fatal("a byte-range lock far out meets the flock", r)
	}
}

func TestBlockedGrantedInOrder(t *testing.T) {
	h := newHarness(t, Config{})
	const f = FileKey("f")
	h.lock(LockArgs{File: f, Owner: ownA, Type: Write, Range: rg(0, 99)})
	rb := h.lock(LockArgs{Req: 1, File: f, Owner: ownB, Type: Write, Range: rg(0, 9), Block: true})
	rc := h.lock(LockArgs{Req: 2, File: f, Owner: ownC, Type: Write, Range: rg(5, 14), Block: true})
	rd := h.lock(LockArgs{Req: 3, File: f, Owner: ownD, Type: Read, Range: rg(50, 59), Block: true})
	if rb.Verdict != Blocked || rc.Verdict != Blocked || rd.Verdict != Blocked || rb.Req != 1 {
		t.Fatal(rb, rc, rd)
	}
	// A retransmission keeps the first one's place.
	if r := h.lock(LockArgs{Req: 9, File: f, Owner: ownB, Type: Write, Range: rg(0, 9), Block: true}); r.Verdict != Blocked || r.Req != 1 {
		t.Fatal(r)
	}
	if n := len(h.m.Waiters(f)); n != 3 {
		t.Fatal(n)
	}
	// A unlocks [50,99]: D (behind B and C, but conflicting with neither) goes.
	h.unlock(f, ownA, rg(50, 99))
	if g := h.takeGranted(); len(g) != 1 || g[0].Req != 3 || g[0].Owner != ownD {
		t.Fatal(g)
	}
	h.unlock(f, ownA, Whole)
	g := h.takeGranted()
	if len(g) != 1 || g[0].Req != 1 {
		t.Fatalf("B first, C waits for it: %v", g)
	}
	h.do(h.m.GrantDone(h.now, 1, true))
	h.unlock(f, ownB, Whole)
	if g := h.takeGranted(); len(g) != 1 || g[0].Req != 2 || g[0].Range != rg(5, 14) || g[0].Type != Write {
		t.Fatal(g)
	}
	h.checkMirror()
}

func TestFairness(t *testing.T) {
	h := newHarness(t, Config{})
	const f = FileKey("f")
	h.lock(LockArgs{File: f, Owner: ownA, Type: Read, Range: rg(0, 9)})
	if r := h.lock(LockArgs{Req: 1, File: f, Owner: ownB, Type: Write, Range: rg(0, 9), Block: true}); r.Verdict != Blocked {
		t.Fatal(r)
	}
	// A reader arriving after the waiting writer waits behind it, even though
	// only a shared lock is held: Test says so too.
	want := Result{Verdict: Denied, Holder: Lock{ownB, Write, rg(0, 9)}}
	if r := h.m.Test(h.now, f, ownC, Read, rg(3, 3)); r != want {
		t.Fatal(r)
	}
	if r := h.lock(LockArgs{File: f, Owner: ownC, Type: Read, Range: rg(3, 3)}); r != want {
		t.Fatal(r)
	}
	// A, whose lock B waits for, may upgrade past B (else a deadlock).
	if r := h.lock(LockArgs{File: f, Owner: ownA, Type: Write, Range: rg(0, 9)}); r.Verdict != Granted {
		t.Fatal(r)
	}
	// and take more next to it.
	if r := h.lock(LockArgs{File: f, Owner: ownA, Type: Read, Range: rg(5, 19)}); r.Verdict != Granted {
		t.Fatal(r)
	}
	if r := h.lock(LockArgs{Req: 2, File: f, Owner: ownC, Type: Read, Range: rg(3, 3), Block: true}); r.Verdict != Blocked {
		t.Fatal(r)
	}
	h.unlock(f, ownA, Whole)
	if g := h.takeGranted(); len(g) != 1 || g[0].Req != 1 {
		t.Fatal(g)
	}
	h.checkMirror()
}

func TestDeadlock(t *testing.T) {
	h := newHarness(t, Config{})
	h.lock(LockArgs{File: "f1", Owner: ownA, Type: Write, Range: rg(0, 9)})
	h.lock(LockArgs{File: "f2", Owner: ownB, Type: Write, Range: rg(0, 9)})
	h.lock(LockArgs{File: "f3", Owner: ownC, Type: Write, Range: rg(0, 9)})
	if r := h.lock(LockArgs{Req: 1, File: "f2", Owner: ownA, Type: Write, Range: rg(5, 5), Block: true}); r.Verdict != Blocked {
		t.Fatal(r)
	}
	if r := h.lock(LockArgs{Req: 2, File: "f3", Owner: ownB, Type: Read, Range: rg(5, 5), Block: true}); r.Verdict != Blocked {
		t.Fatal(r)
	}
	// C -> A -> B -> C.
	if r := h.lock(LockArgs{Req: 3, File: "f1", Owner: ownC, Type: Read, Range: rg(0, 0), Block: true}); r.Verdict != Deadlock {
		t.Fatal(r)
	}
	// Not blocking: plainly denied.
	if r := h.lock(LockArgs{Req: 3, File: "f1", Owner: ownC, Type: Read, Range: rg(0, 0)}); r.Verdict != Denied {
		t.Fatal(r)
	}
	// D waiting on f1 closes no cycle.
	if r := h.lock(LockArgs{Req: 4, File: "f1", Owner: ownD, Type: Read, Range: rg(0, 0), Block: true}); r.Verdict != Blocked {
		t.Fatal(r)
	}
	// Through the fairness rule: E waits behind D's waiting request on f1;
	// D asking for a lock E holds would close D -> E -> D.
	ownE := Owner{5, "e"}
	h.lock(LockArgs{File: "f4", Owner: ownE, Type: Write, Range: rg(0, 9)})
	if r := h.lock(LockArgs{Req: 5, File: "f1", Owner: ownE, Type: Write, Range: rg(0, 0), Block: true}); r.Verdict != Blocked {
		t.Fatal(r)
	}
	if r := h.lock(LockArgs{Req: 6, File: "f4", Owner: ownD, Type: Read, Range: rg(0, 0), Block: true}); r.Verdict != Deadlock {
		t.Fatal(r)
	}
	if s := h.m.Stats(); s.Deadlocks != 2 {
		t.Fatal(s)
	}
}

func TestCancelAndBackOut(t *testing.T) {
	h := newHarness(t, Config{})
	const f = FileKey("f")
	h.lock(LockArgs{File: f, Owner: ownA, Type: Write, Range: rg(0, 9)})
	h.lock(LockArgs{Req: 1, File: f, Owner: ownB, Type: Write, Range: rg(0, 9), Block: true})
	h.lock(LockArgs{Req: 2, File: f, Owner: ownC, Type: Read, Range: rg(20, 29), Block: false})
	h.lock(LockArgs{Req: 3, File: f, Owner: ownC, Type: Read, Range: rg(5, 5), Block: true})
	// Cancel B's: C's, behind it, still waits for A.
	if ok, acts := h.m.Cancel(h.now, CancelArgs{f, ownB, Write, rg(0, 9)}); !ok || len(acts) != 0 {
		t.Fatal(ok, acts)
	}
	if ok, _ := h.m.Cancel(h.now, CancelArgs{f, ownB, Write, rg(0, 9)}); ok {
		t.Fatal("cancelled twice")
	}
	// C's waiting read is an upgrade of nothing; A unlocks; C is granted.
	h.unlock(f, ownA, Whole)
	g := h.takeGranted()
	if len(g) != 1 || g[0].Req != 3 {
		t.Fatal(g)
	}
	// The callback fails: the grant is backed out, C keeps its [20,29].
	h.do(h.m.GrantDone(h.now, 3, false))
	if got := h.m.Holders(f); !slices.Equal(got, []Lock{{ownC, Read, rg(20, 29)}}) {
		t.Fatal(got)
	}
	h.checkMirror()

	// An upgrade granted to a waiter and backed out leaves the read lock.
	h.lock(LockArgs{File: f, Owner: ownA, Type: Read, Range: rg(0, 9)})
	h.lock(LockArgs{File: f, Owner: ownB, Type: Read, Range: rg(0, 9)})
	h.lock(LockArgs{Req: 4, File: f, Owner: ownA, Type: Write, Range: rg(0, 9), Block: true})
	h.unlock(f, ownB, Whole)
	if g := h.takeGranted(); len(g) != 1 || g[0].Req != 4 {
		t.Fatal(g)
	}
	// A changes [0,4] before the callback fails: that part stays as A set it.
	h.unlock(f, ownA, rg(0, 4))
	acts := h.m.GrantDone(h.now, 4, false)
	h.do(acts)
	if got := h.m.Holders(f); !slices.Equal(got, []Lock{{ownA, Read, rg(5, 9)}, {ownC, Read, rg(20, 29)}}) {
		t.Fatal(got, acts)
	}
	// A cancel of a grant whose callback is out backs it out as well.
	h.lock(LockArgs{File: f, Owner: ownB, Type: Write, Range: rg(40, 49)})
	h.lock(LockArgs{Req: 5, File: f, Owner: ownA, Type: Write, Range: rg(40, 49), Block: true})
	h.unlock(f, ownB, Whole)
	if g := h.takeGranted(); len(g) != 1 {
		t.Fatal(g)
	}
	if ok, acts := h.m.Cancel(h.now, CancelArgs{f, ownA, Write, rg(40, 49)}); !ok {
		t.Fatal(acts)
	} else {
		h.do(acts)
	}
	if r := h.m.Test(h.now, f, ownB, Write, rg(40, 49)); r.Verdict != Granted {
		t.Fatal(r)
	}
	if acts := h.m.GrantDone(h.now, 5, true); acts != nil {
		t.Fatal("a late GrantDone of a cancelled request", acts)
	}
	h.checkMirror()
}

func TestBound(t *testing.T) {
	h := newHarness(t, Config{MaxPerClient: 4})
	const f = FileKey("f")
	o2 := Owner{1, "other"} // same client as ownA
	for i, c := range []struct {
		o    Owner
		ty   LockType
		r    Range
		blk  bool
		want Verdict
	}{
		{ownA, Write, rg(0, 9), false, Granted},  // 1
		{ownA, Read, rg(3, 4), false, Granted},   // 3: split
		{ownA, Write, rg(3, 4), false, Granted},  // 1: merged again
		{ownA, Read, rg(20, 20), false, Granted}, // 2
		{o2, Read, rg(30, 30), false, Granted},   // 3: counts for the client
		{o2, Write, rg(40, 40), false, Granted},  // 4
		{o2, Read, rg(50, 50), false, NoLocks},
		{o2, Read, rg(41, 41), false, NoLocks},  // a merge with another type does not
		{o2, Write, rg(41, 41), false, Granted}, // merges with [40,40]
		{ownB, Write, rg(0, 0), true, Blocked},  // another client
	} {
		if r := h.lock(LockArgs{File: f, Owner: c.o, Type: c.ty, Range: c.r, Block: c.blk}); r.Verdict != c.want {
			t.Fatalf("step %d: %v, want %v", i, r, c.want)
		}
	}
	if n := h.m.Count(1); n != 4 {
		t.Fatal(n)
	}
	if v := h.unlock(f, ownA, rg(5, 5)); v != NoLocks { // a split past the bound
		t.Fatal(v)
	}
	if v := h.unlock(f, ownA, rg(0, 9)); v != Granted {
		t.Fatal(v)
	}
	if r := h.lock(LockArgs{File: f, Owner: ownA, Type: Write, Range: rg(20, 20)}); r.Verdict != Granted {
		t.Fatal(r)
	}
	// Count 3; a waiter needs 2.
	if r := h.lock(LockArgs{Req: 7, File: "g", Owner: ownA, Type: Write, Range: rg(0, 0), Block: true}); r.Verdict != Granted {
		t.Fatal(r)
	}
	h.lock(LockArgs{File: "g", Owner: ownC, Type: Write, Range: rg(5, 5)})
	if r := h.lock(LockArgs{Req: 8, File: "g", Owner: ownA, Type: Write, Range: rg(5, 5), Block: true}); r.Verdict != NoLocks {
		t.Fatal(r)
	}
	if v := h.m.Share(h.now, ShareArgs{File: "g", Owner: ownA, Mode: DenyNone, Access: AccessRead}); v != NoLocks {
		t.Fatal(v)
	}
	h.do(h.m.ClientGone(h.now, 1))
	if n := h.m.Count(1); n != 0 {
		t.Fatal(n)
	}
	if v := h.m.Share(h.now, ShareArgs{File: "g", Owner: ownA, Mode: DenyNone, Access: AccessRead}); v != Granted {
		t.Fatal(v)
	}
	if n := h.m.Count(1); n != 1 {
		t.Fatal(n)
	}
}

func TestClientGone(t *testing.T) {
	h := newHarness(t, Config{})
	a2 := Owner{1, "a2"}
	h.lock(LockArgs{File: "f", Owner: ownA, Type: Write, Range: rg(0, 9)})
	h.lock(LockArgs{File: "g", Owner: a2, Type: Read, Range: Whole})
	h.lock(LockArgs{Req: 1, File: "f", Owner: ownB, Type: Read, Range: rg(0, 0), Block: true})
	h.lock(LockArgs{Req: 2, File: "g", Owner: ownB, Type: Write, Range: rg(0, 0), Block: true})
	h.lock(LockArgs{Req: 3, File: "h", Owner: ownB, Type: Write, Range: rg(0, 0)})
	h.lock(LockArgs{Req: 4, File: "h", Owner: ownA, Type: Write, Range: rg(0, 0), Block: true})
	h.m.Share(h.now, ShareArgs{File: "f", Owner: ownA, Mode: DenyBoth, Access: AccessBoth})
	h.do(h.m.ClientGone(h.now, 1))
	g := h.takeGranted()
	if len(g) != 2 || g[0].Req != 1 || g[1].Req != 2 {
		t.Fatal(g)
	}
	if h.closed["f"] != 1 || h.closed["g"] != 1 {
		t.Fatal("descriptions not released", h.closed)
	}
	if w := h.m.Waiters("h"); len(w) != 0 {
		t.Fatal(w)
	}
	if v := h.m.Share(h.now, ShareArgs{File: "f", Owner: ownB, Mode: DenyNone, Access: AccessBoth}); v != Granted {
		t.Fatal(v)
	}
	h.checkMirror()
}

func TestGrace(t *testing.T) {
	h := newHarness(t, Config{Grace: 10 * time.Second})
	const f = FileKey("f")
	if r := h.lock(LockArgs{File: f, Owner: ownA, Type: Write, Range: rg(0, 9)}); r.Verdict != Grace {
		t.Fatal(r)
	}
	if r := h.lock(LockArgs{File: f, Owner: ownA, Type: Write, Range: rg(0, 9), Reclaim: true}); r.Verdict != Granted {
		t.Fatal(r)
	}
	if r := h.lock(LockArgs{File: f, Owner: ownB, Type: Read, Range: rg(0, 0), Reclaim: true, Block: true}); r.Verdict != Denied {
		t.Fatal("a conflicting reclaim never waits", r)
	}
	if r := h.m.Test(h.now, f, ownB, Read, rg(0, 0)); r.Verdict != Grace {
		t.Fatal(r)
	}
	if v := h.m.Share(h.now, ShareArgs{File: f, Owner: ownB}); v != Grace {
		t.Fatal(v)
	}
	if v := h.m.Share(h.now, ShareArgs{File: f, Owner: ownB, Reclaim: true}); v != Granted {
		t.Fatal(v)
	}
	if v := h.unlock(f, ownA, rg(5, 9)); v != Granted {
		t.Fatal(v)
	}
	h.now = h.now.Add(10 * time.Second)
	if h.m.InGrace(h.now) {
		t.Fatal("grace past its end")
	}
	if r := h.lock(LockArgs{Req: 1, File: f, Owner: ownB, Type: Read, Range: rg(0, 0), Block: true}); r.Verdict != Blocked {
		t.Fatal(r)
	}
	// A grace period started again holds the waiter until it ends.
	h.do(h.m.StartGrace(h.now, time.Minute))
	h.unlock(f, ownA, Whole)
	if g := h.takeGranted(); len(g) != 0 {
		t.Fatal(g)
	}
	h.do(h.m.Tick(h.now.Add(time.Second)))
	if g := h.takeGranted(); len(g) != 0 {
		t.Fatal(g)
	}
	// Shortened to end now, it grants the held waiter in its own actions,
	// without waiting for the driver's next Tick.
	h.do(h.m.StartGrace(h.now, 0))
	if g := h.takeGranted(); len(g) != 1 || g[0].Req != 1 {
		t.Fatal(g)
	}
}

func TestShares(t *testing.T) {
	modes := []ShareMode{DenyNone, DenyRead, DenyWrite, DenyBoth}
	accs := []ShareAccess{AccessNone, AccessRead, AccessWrite, AccessBoth}
	for _, m1 := range modes {
		for _, a1 := range accs {
			for _, m2 := range modes {
				for _, a2 := range accs {
					h := newHarness(t, Config{})
					if v := h.m.Share(h.now, ShareArgs{File: "f", Owner: ownA, Mode: m1, Access: a1}); v != Granted {
						t.Fatal(v)
					}
					// The DOS rule spelled out: the second is refused if it
					// wants to read and the first denies reading, and so on.
					conflict := a2&AccessRead != 0 && (m1 == DenyRead || m1 == DenyBoth) ||
						a2&AccessWrite != 0 && (m1 == DenyWrite || m1 == DenyBoth) ||
						a1&AccessRead != 0 && (m2 == DenyRead || m2 == DenyBoth) ||
						a1&AccessWrite != 0 && (m2 == DenyWrite || m2 == DenyBoth)
					want := Granted
					if conflict {
						want = Denied
					}
					if v := h.m.Share(h.now, ShareArgs{File: "f", Owner: ownB, Mode: m2, Access: a2}); v != want {
						t.Fatalf("(%d,%d) then (%d,%d): %v, want %v", m1, a1, m2, a2, v, want)
					}
					// The same owner's new reservation replaces its own.
					h.m.Unshare(h.now, "f", ownB)
					if v := h.m.Share(h.now, ShareArgs{File: "f", Owner: ownA, Mode: m2, Access: a2}); v != Granted {
						t.Fatalf("replace: %v", v)
					}
					if n := h.m.Count(ownA.Client); n != 1 {
						t.Fatalf("replace counted: %d", n)
					}
				}
			}
		}
	}
	h := newHarness(t, Config{})
	h.m.Share(h.now, ShareArgs{File: "f", Owner: ownA, Mode: DenyWrite, Access: AccessRead})
	if v := h.m.Share(h.now, ShareArgs{File: "f", Owner: ownB, Mode: DenyNone, Access: AccessWrite}); v != Denied {
		t.Fatal(v)
	}
	h.m.Unshare(h.now, "f", ownA)
	if v := h.m.Share(h.now, ShareArgs{File: "f", Owner: ownB, Mode: DenyNone, Access: AccessWrite}); v != Granted {
		t.Fatal(v)
	}
	if v := h.m.Share(h.now, ShareArgs{File: "f", Owner: ownB, Mode: 4}); v != Denied {
		t.Fatal(v)
	}
}

func TestReqIDReuseAndInvalid(t *testing.T) {
	h := newHarness(t, Config{})
	h.lock(LockArgs{File: "f", Owner: ownA, Type: Write, Range: rg(0, 9)})
	h.lock(LockArgs{Req: 1, File: "f", Owner: ownB, Type: Write, Range: rg(0, 9), Block: true})
	if r := h.lock(LockArgs{Req: 1, File: "g", Owner: ownC, Type: Write, Range: rg(0, 9)}); r.Verdict != Denied {
		t.Fatal(r)
	}
	if r := h.lock(LockArgs{Req: 2, File: "g", Owner: ownC, Type: Unlocked, Range: rg(0, 9)}); r.Verdict != Denied {
		t.Fatal(r)
	}
	if r := h.lock(LockArgs{Req: 2, File: "g", Owner: ownC, Type: Read, Range: rg(9, 0)}); r.Verdict != Denied {
		t.Fatal(r)
	}
}
