package consist

import (
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"snfs/snfs1"
	"snfs/state"
	"snfs/sunrpc"
)

// permitReclaimRig makes registrations on real (piped) connections whose
// far ends are drained, for a driver's callbacks to go nowhere.
type permitReclaimRig struct {
	t   *testing.T
	srv *sunrpc.Server
	log *slog.Logger
}

func (r *permitReclaimRig) register(d *Driver, name string, v snfs1.Verifier) (snfs1.ClientID, state.ClientID) {
	a, b := net.Pipe()
	r.t.Cleanup(func() { a.Close(); b.Close() })
	go io.Copy(io.Discard, b)
	id, err := d.Register(r.srv.ServeConn(a), []byte(name), v)
	if err != nil {
		r.t.Fatal(err)
	}
	mid, err := d.Client(id)
	if err != nil {
		r.t.Fatal(err)
	}
	d.m.CallbackPathVerified(d.now(), mid, true) // as if its probe was answered
	return id, mid
}

func getPermitNow(t *testing.T, d *Driver, c state.ClientID, fh []byte) (uint64, bool) {
	t.Helper()
	type res struct {
		id uint64
		ok bool
	}
	ch := make(chan res, 1)
	d.GetPermit(c, fh, func(id uint64, granted bool, err error) {
		if err != nil {
			t.Error(err)
		}
		ch <- res{id, granted}
	})
	select {
	case r := <-ch:
		return r.id, r.ok
	case <-time.After(30 * time.Second):
		t.Fatal("GET_PERMIT not answered")
		return 0, false
	}
}

// TestPermitReclaimGrace (docs/protocol.md section 21.9): a client granted
// a permit is recorded so durably; after a restart, every directory call of
// anyone but the permit's reclaimer waits (ErrGrace) until that client is
// back, GET_PERMIT is refused meanwhile, the client's RECLAIM_PERMIT gives
// it the permit again with a new id (none to a client never granted one),
// and its own calls on the directory go through; once every client that
// may reclaim permits is back, the other directories are served while the
// grace period lasts, the reclaimed one only after it.
func TestPermitReclaimGrace(t *testing.T) {
	dir := diskDir(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	rig := &permitReclaimRig{t: t, srv: &sunrpc.Server{Logger: quiet}, log: quiet}
	d, err := New(Config{StateDir: dir, Grace: time.Hour, Clock: new(OffsetClock), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	dirD, dirE := []byte("directory-D"), []byte("directory-E")
	va, vb, vc := snfs1.Verifier{1}, snfs1.Verifier{2}, snfs1.Verifier{3}
	idA, midA := rig.register(d, "a", va)
	idB, _ := rig.register(d, "b", vb)
	rig.register(d, "c", vc)
	old, ok := getPermitNow(t, d, midA, dirD)
	if !ok {
		t.Fatal("GET_PERMIT refused")
	}
	if recs, _ := d.rec.all(); !recs["a"].permits || recs["b"].permits {
		t.Fatalf("records' permits flags: a %v, b %v; want true, false", recs["a"].permits, recs["b"].permits)
	}
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}

	// The restart (the permit is gone with the process).
	clock := new(OffsetClock)
	d, err = New(Config{StateDir: dir, Grace: time.Hour, Clock: clock, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	if !d.InGrace() || !d.InPermitGrace() {
		t.Fatalf("after the restart: grace %v, permit grace %v; want both", d.InGrace(), d.InPermitGrace())
	}
	const plain = state.ClientID(1 << 30) // a stock NFS client's table id
	if err := d.PermitGraceAdmit(plain, [][]byte{dirD}); err != ErrGrace {
		t.Fatalf("a plain client's read of the permit's directory before its reclaim: %v, want ErrGrace", err)
	}
	if err := d.PermitGraceAdmit(plain, [][]byte{dirE}); err != ErrGrace {
		t.Fatalf("a plain client's read of another directory before the reclaim: %v, want ErrGrace (any may be reclaimed)", err)
	}
	if got, _ := rig.register(d, "b", vb); got != idB {
		t.Fatalf("b registered again as %d, want %d", got, idB)
	}
	_, midB := rig.register(d, "b", vb)
	if ids, err := d.ReclaimPermits(idB, [][]byte{dirE}); err != nil || ids[0] != 0 {
		t.Fatalf("RECLAIM_PERMIT of a client never granted a permit: %v, %v; want [0]", ids, err)
	}
	if err := d.ReclaimDone(idB); err != nil {
		t.Fatal(err)
	}
	if _, ok := getPermitNow(t, d, midB, dirE); ok {
		t.Fatal("GET_PERMIT granted while a client may still reclaim permits")
	}
	if err := d.PermitGraceAdmit(midB, [][]byte{dirE}); err != ErrGrace {
		t.Fatalf("b's read while a may still reclaim: %v, want ErrGrace", err)
	}

	// a reclaims D's permit: a new id, held without a recall.
	if got, _ := rig.register(d, "a", va); got != idA {
		t.Fatalf("a registered again as %d, want %d", got, idA)
	}
	midA, _ = d.Client(idA)
	ids, err := d.ReclaimPermits(idA, [][]byte{dirD, nil})
	if err != nil || len(ids) != 2 || ids[0] == 0 || ids[0] == old || ids[1] != 0 {
		t.Fatalf("RECLAIM_PERMIT: %v, %v; want a new id for D (the old: %d), 0 for the handle left out", ids, err, old)
	}
	if !d.HoldsPermit(midA, dirD, ids[0]) {
		t.Fatal("the reclaimed permit is not held")
	}
	if again, _ := d.ReclaimPermits(idA, [][]byte{dirD}); again[0] != ids[0] {
		t.Fatalf("RECLAIM_PERMIT sent again: %v, want %d", again, ids[0])
	}
	if err := d.PermitGraceAdmit(midA, [][]byte{dirD}); err != nil {
		t.Fatalf("the reclaimer's own call on its directory: %v", err)
	}
	if err := d.PermitGraceAdmit(midA, [][]byte{dirE}); err != ErrGrace {
		t.Fatalf("the reclaimer's call on another directory before it is back: %v, want ErrGrace", err)
	}
	if err := d.ReclaimDone(idA); err != nil {
		t.Fatal(err)
	}
	if again, _ := d.ReclaimPermits(idA, [][]byte{dirD, dirE}); again[0] != ids[0] || again[1] != 0 {
		t.Fatalf("RECLAIM_PERMIT after RECLAIM_DONE: %v, want [%d 0] (only what it reclaimed before)", again, ids[0])
	}

	// c, without permits, is not back: the grace period lasts, but only
	// the reclaimed directory waits.
	if !d.InGrace() || d.InPermitGrace() {
		t.Fatalf("with every permit client back: grace %v, permit grace %v; want true, false", d.InGrace(), d.InPermitGrace())
	}
	if err := d.PermitGraceAdmit(plain, [][]byte{dirE}); err != nil {
		t.Fatalf("a plain client's read of a directory nobody holds: %v", err)
	}
	if err := d.PermitGraceAdmit(plain, [][]byte{dirE, dirD}); err != ErrGrace {
		t.Fatalf("a plain client's rename into the reclaimed directory in the grace period: %v, want ErrGrace", err)
	}
	clock.Advance(time.Hour)
	select {
	case <-d.GraceOver():
	case <-time.After(30 * time.Second):
		t.Fatal("the grace period did not end at its bound")
	}
	if err := d.PermitGraceAdmit(plain, [][]byte{dirD}); err != nil {
		t.Fatalf("after the grace period: %v", err)
	}
	if !d.PermitHeldByOther(plain, dirD) {
		t.Fatal("the reclaimed permit is gone after the grace period: a read would not recall it")
	}
	if rep := d.Grace(); rep.Permits != 1 {
		t.Fatalf("grace report: %d permits reclaimed, want 1", rep.Permits)
	}
}

// TestPermitReclaimNoPermitClients: with no client ever granted a permit,
// the grace period holds no directory call; a registration made anew (a
// new verifier) starts without the flag.
func TestPermitReclaimNoPermitClients(t *testing.T) {
	dir := diskDir(t)
	r, err := openRecords(dir)
	if err != nil {
		t.Fatal(err)
	}
	a, _, err := r.register("a", snfs1.Verifier{1})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.markPermits("a", a.id); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.register("a", snfs1.Verifier{2}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.register("b", snfs1.Verifier{1}); err != nil {
		t.Fatal(err)
	}
	if err := r.close(); err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	d, err := New(Config{StateDir: dir, Grace: time.Hour, Clock: new(OffsetClock), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	if !d.InGrace() || d.InPermitGrace() {
		t.Fatalf("grace %v, permit grace %v; want true, false", d.InGrace(), d.InPermitGrace())
	}
	if err := d.PermitGraceAdmit(1<<30, [][]byte{[]byte("some-dir")}); err != nil {
		t.Fatalf("a directory read in a grace period without permit clients: %v", err)
	}
}
