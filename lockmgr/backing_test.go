package lockmgr

import (
	"slices"
	"testing"
	"time"
)

// A local process on the server holds a lock: the backing file refuses the
// grant, and the machine's state is as it was.
func TestBackingRefusedImmediate(t *testing.T) {
	h := newHarness(t, Config{})
	const f = FileKey("f")
	if !h.k.localLock(f, 100, Read, rg(5, 5)) {
		t.Fatal("local lock")
	}
	if r := h.lock(LockArgs{File: f, Owner: ownA, Type: Read, Range: rg(0, 9)}); r.Verdict != Granted {
		t.Fatal(r)
	}
	r := h.lock(LockArgs{File: f, Owner: ownA, Type: Write, Range: rg(0, 9)}) // upgrade
	if r != (Result{Verdict: Denied, Local: true}) {
		t.Fatal(r)
	}
	if got := h.m.Holders(f); !slices.Equal(got, []Lock{{ownA, Read, rg(0, 9)}}) {
		t.Fatal("the upgrade was not backed out", got)
	}
	h.checkMirror()
	// A downgrade needs no acquisition and cannot be refused.
	res, acts := h.m.Lock(h.now, LockArgs{Req: 50, File: f, Owner: ownA, Type: Read, Range: rg(2, 3)})
	if res.Verdict != Granted || len(acts) != 0 {
		t.Fatal(res, acts)
	}
	// The part the local process does not touch is granted.
	if r := h.lock(LockArgs{File: f, Owner: ownA, Type: Write, Range: rg(6, 9)}); r.Verdict != Granted {
		t.Fatal(r)
	}
	// and local processes meet the remote locks.
	if h.k.localLock(f, 101, Read, rg(9, 9)) {
		t.Fatal("a local process took a byte a remote owner holds for writing")
	}
	h.checkMirror()
}

func TestBackingRefusedBlocking(t *testing.T) {
	h := newHarness(t, Config{LocalRetry: time.Second})
	const f = FileKey("f")
	h.k.localLock(f, 100, Write, rg(0, 0))
	r := h.lock(LockArgs{Req: 1, File: f, Owner: ownA, Type: Write, Range: rg(0, 9), Block: true})
	if r.Verdict != Blocked || r.Req != 1 {
		t.Fatal(r)
	}
	// B's request behind A's waits for it (fairness), C's does not conflict.
	if r := h.lock(LockArgs{Req: 2, File: f, Owner: ownB, Type: Read, Range: rg(5, 5), Block: true}); r.Verdict != Blocked {
		t.Fatal(r)
	}
	if r := h.lock(LockArgs{Req: 3, File: f, Owner: ownC, Type: Read, Range: rg(20, 20), Block: true}); r.Verdict != Granted {
		t.Fatal(r)
	}
	h.do(h.m.Tick(h.now.Add(500 * time.Millisecond)))
	if g := h.takeGranted(); len(g) != 0 {
		t.Fatal("retried before LocalRetry", g)
	}
	// Still held locally at the retry: refused again, the order kept.
	h.now = h.now.Add(time.Second)
	h.do(h.m.Tick(h.now))
	if g := h.takeGranted(); len(g) != 0 {
		t.Fatal(g)
	}
	if w := h.m.Waiters(f); len(w) != 2 || w[0].Req != 1 || w[1].Req != 2 {
		t.Fatal(w)
	}
	h.k.localLock(f, 100, Unlocked, Whole)
	h.now = h.now.Add(time.Second)
	h.do(h.m.Tick(h.now))
	g := h.takeGranted()
	if len(g) != 1 || g[0].Req != 1 {
		t.Fatal(g)
	}
	h.do(h.m.GrantDone(h.now, 1, true))
	h.unlock(f, ownA, Whole)
	if g := h.takeGranted(); len(g) != 1 || g[0].Req != 2 {
		t.Fatal(g)
	}
	h.checkMirror()
}

// A waiter granted by an unlock, whose backing lock a local process refuses,
// goes back to its place in the queue: a later waiter it conflicts with stays
// behind it, one it does not conflict with goes.
func TestBackingRefusedWaiter(t *testing.T) {
	h := newHarness(t, Config{LocalRetry: time.Second})
	const f = FileKey("f")
	h.lock(LockArgs{File: f, Owner: ownA, Type: Write, Range: rg(0, 9)})
	h.lock(LockArgs{File: f, Owner: ownA, Type: Write, Range: rg(50, 59)})
	h.lock(LockArgs{Req: 1, File: f, Owner: ownB, Type: Write, Range: rg(0, 19), Block: true})
	h.lock(LockArgs{Req: 2, File: f, Owner: ownC, Type: Write, Range: rg(0, 0), Block: true})
	h.lock(LockArgs{Req: 3, File: f, Owner: ownD, Type: Write, Range: rg(50, 59), Block: true})
	if !h.k.localLock(f, 7, Read, rg(150, 150)) {
		t.Fatal("local lock")
	}
	h.unlock(f, ownA, rg(50, 99)) // D goes
	if g := h.takeGranted(); len(g) != 1 || g[0].Req != 3 {
		t.Fatal(g)
	}
	if !h.k.localLock(f, 8, Read, rg(15, 15)) { // a byte A does not hold
		t.Fatal("local lock")
	}
	h.unlock(f, ownA, Whole)
	if g := h.takeGranted(); len(g) != 0 {
		t.Fatal("B's grant refused by the backing file; C waits behind B", g)
	}
	if w := h.m.Waiters(f); len(w) != 2 || w[0].Req != 1 || w[1].Req != 2 {
		t.Fatal(w)
	}
	if s := h.m.Stats(); s.BackingRefused != 1 {
		t.Fatal(s)
	}
	if got := h.m.Holders(f); !slices.Equal(got, []Lock{{ownD, Write, rg(50, 59)}}) {
		t.Fatal(got)
	}
	h.checkMirror()
	h.k.localLock(f, 8, Unlocked, Whole)
	h.now = h.now.Add(time.Second)
	h.do(h.m.Tick(h.now))
	if g := h.takeGranted(); len(g) != 1 || g[0].Req != 1 {
		t.Fatal(g)
	}
	h.checkMirror()
}

// Until the backing file has taken a lock that also downgrades, the owner's
// previous lock still counts against others (its shadow): nothing is granted
// on the strength of a downgrade the backing file may yet refuse.
func TestShadowUntilBackingDone(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	m := New(Config{}, now)
	if r, acts := m.Lock(now, LockArgs{Req: 1, File: "f", Owner: ownA, Type: Write, Range: rg(0, 9)}); r.Verdict != Acquiring || len(acts) != 1 || !acts[0].Acquire {
		t.Fatal(r, acts)
	} else if r, _ := m.BackingDone(now, 1, true); r.Verdict != Granted {
		t.Fatal(r)
	}
	r, acts := m.Lock(now, LockArgs{Req: 2, File: "f", Owner: ownA, Type: Read, Range: rg(0, 19)})
	if r.Verdict != Acquiring || len(acts) != 1 || acts[0] != (Action{Kind: ActBacking, Req: 2, File: "f", Owner: ownA, Type: Read, Range: rg(0, 19), Acquire: true}) {
		t.Fatal(r, acts)
	}
	if got := m.Test(now, "f", ownB, Read, rg(5, 5)); got.Verdict != Denied || got.Holder != (Lock{ownA, Write, rg(0, 9)}) {
		t.Fatal("the shadow does not count", got)
	}
	if r, _ := m.Lock(now, LockArgs{Req: 3, File: "f", Owner: ownB, Type: Read, Range: rg(5, 5), Block: true}); r.Verdict != Blocked {
		t.Fatal(r)
	}
	// Refused: A holds its write lock again; B still waits.
	r, acts = m.BackingDone(now, 2, false)
	if r != (Result{Verdict: Denied, Local: true}) || len(acts) != 0 {
		t.Fatal(r, acts)
	}
	if got := m.Holders("f"); !slices.Equal(got, []Lock{{ownA, Write, rg(0, 9)}}) {
		t.Fatal(got)
	}
	// Again, taken this time: B is granted.
	m.Lock(now, LockArgs{Req: 4, File: "f", Owner: ownA, Type: Read, Range: rg(0, 19)})
	r, acts = m.BackingDone(now, 4, true)
	if r.Verdict != Granted || len(acts) != 1 || acts[0].Kind != ActBacking || !acts[0].Acquire || acts[0].Req != 3 {
		t.Fatal(r, acts)
	}
	if _, acts = m.BackingDone(now, 3, true); len(acts) != 1 || acts[0].Kind != ActGranted || acts[0].Req != 3 {
		t.Fatal(acts)
	}
}

// A cancel that arrives while a waiter's grant is being acquired (a driver
// that lets inputs in between) backs the grant out when BackingDone comes.
func TestCancelWhileAcquiring(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	for _, ok := range []bool{true, false} {
		m := New(Config{}, now)
		m.Lock(now, LockArgs{Req: 1, File: "f", Owner: ownA, Type: Read, Range: rg(0, 9)})
		m.BackingDone(now, 1, true)
		m.Lock(now, LockArgs{Req: 2, File: "f", Owner: ownB, Type: Write, Range: rg(5, 14), Block: true})
		_, acts := m.Unlock(now, "f", ownA, Whole)
		if len(acts) != 2 || !acts[1].Acquire || acts[1].Req != 2 {
			t.Fatal(acts)
		}
		if found, acts := m.Cancel(now, CancelArgs{"f", ownB, Write, rg(5, 14)}); !found || len(acts) != 0 {
			t.Fatal(found, acts)
		}
		r, acts := m.BackingDone(now, 2, ok)
		if r.Verdict != Denied {
			t.Fatal(r)
		}
		if ok && (len(acts) != 1 || acts[0] != (Action{Kind: ActBacking, File: "f", Owner: ownB, Type: Unlocked, Range: rg(5, 14), Last: true})) {
			t.Fatal("taken: released again", acts)
		}
		if !ok && len(acts) != 0 {
			t.Fatal(acts)
		}
		if h := m.Holders("f"); len(h) != 0 || len(m.Waiters("f")) != 0 || m.Stats().Files != 0 {
			t.Fatal(h, m.Stats())
		}
	}
}
