package tests

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"snfs/nfs3"
	"snfs/snfs1"
)

// Write-back permits (docs/protocol.md section 21): batches sent again
// (a lost reply, a crash in the middle of a batch, a second call while the
// first is out), provisional ids, and what a refused record must not do.

// setPendingLSN rewrites the only client's LSN record as a crash in the
// middle of a batch leaves it: last applied last, pending pending.
func setPendingLSN(t *testing.T, e *env, last, pending uint64) {
	t.Helper()
	db, err := bolt.Open(filepath.Join(e.stateDir, "consist.db"), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("cml"))
		var name []byte
		b.ForEach(func(k, _ []byte) error { name = append([]byte(nil), k...); return nil })
		if name == nil {
			return fmt.Errorf("no LSN record")
		}
		return b.Put(name, binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, last), pending))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
}

// TestSNFSPermitCrashMidBatchNameReused: a crash after a batch's RENAME
// a->b and its later CREATE a were both applied (last applied LSN not yet
// recorded). At the resend the RENAME's effect check must not be fooled by
// the new a (a's name exists again): applying the RENAME a second time
// would move the new, empty a over b and lose b's data.
func TestSNFSPermitCrashMidBatchNameReused(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D, a, p := permitHolderEnv(t, "permit-crash-reuse")
	res := reintegrated(t, a, p, 1, []snfs1.CMLRecord{createRec(1, snfs1.ObjRef{FH: D}, "a", 1)})
	if err := os.WriteFile(e.path("d/a"), []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := e.addr
	e.stop()
	// The crash: the batch 2..3 (RENAME a->b, CREATE a) applied, LSN 1
	// recorded, 3 pending.
	if err := os.Rename(e.path("d/a"), e.path("d/b")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.path("d/a"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	setPendingLSN(t, e, 1, 3)
	e.start(addr)
	p = getPermit(t, a, D)
	batch := []snfs1.CMLRecord{
		{LSN: 2, Op: snfs1.CMLRename, Dir: snfs1.ObjRef{FH: D}, Name: "a", ToDir: snfs1.ObjRef{FH: D}, ToName: "b"},
		createRec(3, snfs1.ObjRef{FH: D}, "a", 3),
	}
	res, err := a.Reintegrate(ctx, []snfs1.PermitRef{p}, batch)
	if err != nil || res.Failed() != nil || res.Applied != 3 || len(res.Results) != 2 {
		t.Fatalf("the batch resent after the crash: %v %+v", err, res)
	}
	if got, err := os.ReadFile(e.path("d/b")); err != nil || string(got) != "precious" {
		t.Fatalf("b after the resend: %q %v (the RENAME applied twice)", got, err)
	}
	if !bytes.Equal(res.Results[1].Obj, e.lookup(D, "a")) {
		t.Fatal("a: not answered with its handle")
	}
}

// TestSNFSPermitResentMkdirGrantsNothing: an MKDIR applied before and sent
// again (its first reply lost) is answered with the permit its client still
// holds on the new directory, and none once that permit is released: a
// resend must not grant a permit without the grant's promise breaks (another
// client would be refused the directory's permit, and its promise there
// would stay while the resender logs changes).
func TestSNFSPermitResentMkdirGrantsNothing(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D := permitEnv(t)
	a := dialSNFS(t, e, "permit-mkdir-a", newPermitHolder())
	b := dialSNFS(t, e, "permit-mkdir-b", newPermitHolder())
	p := getPermit(t, a, D)
	mode := uint32(0o755)
	mk := []snfs1.CMLRecord{{LSN: 1, Op: snfs1.CMLMkdir, Dir: snfs1.ObjRef{FH: D}, Name: "sub", Attr: nfs3.Sattr{Mode: &mode}, New: 1}}
	res, err := a.Reintegrate(ctx, []snfs1.PermitRef{p}, mk)
	if err != nil || res.Failed() != nil || res.Results[0].Permit == 0 {
		t.Fatalf("MKDIR: %v %+v", err, res)
	}
	sub := snfs1.PermitRef{Dir: res.Results[0].Obj, Permit: res.Results[0].Permit}
	res, err = a.Reintegrate(ctx, []snfs1.PermitRef{p}, mk)
	if err != nil || res.Failed() != nil || res.Results[0].Permit != sub.Permit {
		t.Fatalf("MKDIR resent while its permit is held: %v %+v", err, res)
	}
	if err := a.PermitRelease(ctx, []snfs1.PermitRef{sub}); err != nil {
		t.Fatal(err)
	}
	res, err = a.Reintegrate(ctx, []snfs1.PermitRef{p}, mk)
	if err != nil || res.Failed() != nil {
		t.Fatalf("MKDIR resent after its permit's release: %v %+v", err, res)
	}
	if res.Results[0].Permit != 0 {
		t.Fatalf("MKDIR resent after its permit's release granted permit %d", res.Results[0].Permit)
	}
	getPermit(t, b, sub.Dir)
}

// TestSNFSPermitConcurrentResend: a batch sent again (a new call, not a
// retransmission: the client reconnected) while the first is still waiting
// for another client's callbacks must not apply its records a second time:
// it is applied after the first, whose records it then finds applied. Run
// side by side, the second read the same last applied LSN and failed its
// CREATE with NFS3ERR_EXIST (a spurious conflict).
func TestSNFSPermitConcurrentResend(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D := permitEnv(t, "f")
	cacher := newDirBreaks()
	cacher.delay = 500 * time.Millisecond
	cacher.began = make(chan struct{}, 16)
	b := dialSNFS(t, e, "permit-conc-b", cacher)
	a := dialSNFS(t, e, "permit-conc-a", newPermitHolder())
	cacheForWrite(t, b, D, "f")
	p := getPermit(t, a, D)
	batch := []snfs1.CMLRecord{
		{LSN: 1, Op: snfs1.CMLUnlink, Dir: snfs1.ObjRef{FH: D}, Name: "f"},
		createRec(2, snfs1.ObjRef{FH: D}, "g", 1),
	}
	for len(cacher.began) > 0 { // callbacks before the batches (none expected)
		<-cacher.began
	}
	var wg sync.WaitGroup
	results := make([]*snfs1.ReintegrateRes, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == 1 {
				<-cacher.began // the first waits for B's callback
			}
			results[i], errs[i] = a.Reintegrate(ctx, []snfs1.PermitRef{p}, batch)
		}()
	}
	wg.Wait()
	for i := range 2 {
		if errs[i] != nil || results[i].Failed() != nil || results[i].Applied != 2 || len(results[i].Results) != 2 {
			t.Fatalf("batch %d: %v %+v", i, errs[i], results[i])
		}
	}
	if !bytes.Equal(results[1].Results[1].Obj, e.lookup(D, "g")) {
		t.Fatal("the second batch: g not answered with its handle")
	}
	if got := fmt.Sprint(plainNames(t, e, D)); got != "[g]" {
		t.Fatalf("the directory holds %s", got)
	}
}

// TestSNFSPermitNoPermitNoCallback: an UNLINK record of a directory the
// batch holds no permit for is refused SNFS_ERR_NOPERMIT before anything
// else: another client caching the file is not called back for a removal
// that never happens.
func TestSNFSPermitNoPermitNoCallback(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D := permitEnv(t, "f")
	cacher := newDirBreaks()
	b := dialSNFS(t, e, "permit-noperm-b", cacher)
	a := dialSNFS(t, e, "permit-noperm-a", newPermitHolder())
	cacheForWrite(t, b, D, "f")
	for len(cacher.ch) > 0 {
		<-cacher.ch
	}
	res, err := a.Reintegrate(ctx, []snfs1.PermitRef{{Dir: D, Permit: 12345}}, []snfs1.CMLRecord{
		{LSN: 1, Op: snfs1.CMLUnlink, Dir: snfs1.ObjRef{FH: D}, Name: "f"},
	})
	if err != nil || res.Failed() == nil || res.Failed().Status != snfs1.ErrNoPermit {
		t.Fatalf("%v %+v", err, res)
	}
	if n := len(cacher.ch); n != 0 {
		t.Fatalf("the caching session was called back %d times for a refused record", n)
	}
}

// TestSNFSPermitCrashMidBatchSetattrOnce: a crash after a batch's SETATTR
// (size 0) of a file and its later CREATE were applied; after the restart
// another client writes the file. The resend finds the CREATE applied, so
// the SETATTR before it was too: it must not truncate the file again over
// the later write.
func TestSNFSPermitCrashMidBatchSetattrOnce(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D, a, p := permitHolderEnv(t, "permit-crash-setattr")
	res := reintegrated(t, a, p, 1, []snfs1.CMLRecord{createRec(1, snfs1.ObjRef{FH: D}, "f", 1)})
	F := res.Results[0].Obj
	addr := e.addr
	e.stop()
	// The crash: the batch 2..3 (SETATTR f size 0, CREATE g) applied, LSN 1
	// recorded, 3 pending.
	if err := os.WriteFile(e.path("d/g"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	setPendingLSN(t, e, 1, 3)
	e.start(addr)
	// Another writer, after the restart and before the resend.
	if err := os.WriteFile(e.path("d/f"), []byte("later"), 0o644); err != nil {
		t.Fatal(err)
	}
	p = getPermit(t, a, D)
	zero := uint64(0)
	res, err := a.Reintegrate(ctx, []snfs1.PermitRef{p}, []snfs1.CMLRecord{
		{LSN: 2, Op: snfs1.CMLSetattr, Obj: snfs1.ObjRef{FH: F}, Attr: nfs3.Sattr{Size: &zero}},
		createRec(3, snfs1.ObjRef{FH: D}, "g", 3),
	})
	if err != nil || res.Failed() != nil || res.Applied != 3 {
		t.Fatalf("the batch resent after the crash: %v %+v", err, res)
	}
	if got, err := os.ReadFile(e.path("d/f")); err != nil || string(got) != "later" {
		t.Fatalf("f after the resend: %q %v (the SETATTR applied twice)", got, err)
	}
}

// TestSNFSPermitReleaseZeroIsNothing: PERMIT_RELEASE of id 0 (no permit
// is ever 0) leaves the caller's permit alone, as any id it does not hold.
func TestSNFSPermitReleaseZeroIsNothing(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D := permitEnv(t)
	a := dialSNFS(t, e, "permit-rel0-a", newPermitHolder())
	b := dialSNFS(t, e, "permit-rel0-b", newPermitHolder())
	p := getPermit(t, a, D)
	if err := a.PermitRelease(ctx, []snfs1.PermitRef{{Dir: D, Permit: 0}}); err != nil {
		t.Fatal(err)
	}
	res, err := a.Reintegrate(ctx, []snfs1.PermitRef{p}, []snfs1.CMLRecord{createRec(1, snfs1.ObjRef{FH: D}, "a", 1)})
	if err != nil || res.Failed() != nil {
		t.Fatalf("the permit after a release of id 0: %v %+v", err, res)
	}
	getPermit(t, b, e.root) // b's callback path verified
	if _, granted, err := b.GetPermit(ctx, D); err != nil || granted {
		t.Fatalf("another client's GET_PERMIT: granted %v, %v", granted, err)
	}
}

// TestSNFSPermitResendFollowsRename: a batch applied whose reply was lost
// (CREATE a as provisional 1, RENAME a->b) is sent again with a record
// appended that names the object by its provisional id: the id still names
// the object, now at b (the client never learned its handle).
func TestSNFSPermitResendFollowsRename(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D, a, p := permitHolderEnv(t, "permit-follow")
	batch := []snfs1.CMLRecord{
		createRec(1, snfs1.ObjRef{FH: D}, "a", 1),
		{LSN: 2, Op: snfs1.CMLRename, Dir: snfs1.ObjRef{FH: D}, Name: "a", ToDir: snfs1.ObjRef{FH: D}, ToName: "b"},
	}
	res := reintegrated(t, a, p, 2, batch)
	mode := uint32(0o600)
	batch = append(batch, snfs1.CMLRecord{LSN: 3, Op: snfs1.CMLSetattr, Obj: snfs1.ObjRef{Prov: 1}, Attr: nfs3.Sattr{Mode: &mode}})
	res, err := a.Reintegrate(ctx, []snfs1.PermitRef{p}, batch)
	if err != nil || res.Failed() != nil || res.Applied != 3 {
		t.Fatalf("the batch resent with a record more: %v %+v", err, res)
	}
	st, err := os.Stat(e.path("d/b"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("b: %v %v", st, err)
	}
}

// TestSNFSPermitSelfNamedProvisional: a record naming, as its directory,
// the provisional id it gives itself (applied before, so resolved by name)
// is refused, not followed forever.
func TestSNFSPermitSelfNamedProvisional(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	_, D, a, p := permitHolderEnv(t, "permit-selfprov")
	res, err := a.Reintegrate(ctx, []snfs1.PermitRef{p}, []snfs1.CMLRecord{createRec(1, snfs1.ObjRef{FH: D}, "a", 0)})
	if err != nil || res.Failed() != nil {
		t.Fatalf("%v %+v", err, res)
	}
	mode := uint32(0o600)
	res, err = a.Reintegrate(ctx, []snfs1.PermitRef{p}, []snfs1.CMLRecord{
		createRec(1, snfs1.ObjRef{Prov: 9}, "a", 9),
		{LSN: 2, Op: snfs1.CMLSetattr, Obj: snfs1.ObjRef{Prov: 9}, Attr: nfs3.Sattr{Mode: &mode}},
	})
	if err != nil || res.Failed() == nil || res.Failed().Status != nfs3.ErrBadHandle {
		t.Fatalf("%v %+v", err, res)
	}
}

// TestSNFSPermitResendNameReused: a batch applied whose reply was lost
// (CREATE a as provisional 1, RENAME a->b, CREATE a as provisional 3: an
// editor's save) is sent again: each provisional id is answered with the
// object its record made, 1 with b's. Answered by the name its record gave
// (a), 1 got the second a's handle, and the client took that file for the
// one now at b.
func TestSNFSPermitResendNameReused(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D, a, p := permitHolderEnv(t, "permit-namereuse")
	batch := []snfs1.CMLRecord{
		createRec(1, snfs1.ObjRef{FH: D}, "a", 1),
		{LSN: 2, Op: snfs1.CMLRename, Dir: snfs1.ObjRef{FH: D}, Name: "a", ToDir: snfs1.ObjRef{FH: D}, ToName: "b"},
		createRec(3, snfs1.ObjRef{FH: D}, "a", 3),
	}
	first, err := a.Reintegrate(ctx, []snfs1.PermitRef{p}, batch)
	if err != nil || first.Failed() != nil || first.Applied != 3 {
		t.Fatalf("%v %+v", err, first)
	}
	again, err := a.Reintegrate(ctx, []snfs1.PermitRef{p}, batch)
	if err != nil || again.Failed() != nil || again.Applied != 3 || len(again.Results) != 3 {
		t.Fatalf("the batch resent: %v %+v", err, again)
	}
	hb, ha := e.lookup(D, "b"), e.lookup(D, "a")
	for i, res := range []*snfs1.ReintegrateRes{first, again} {
		if !bytes.Equal(res.Results[0].Obj, hb) {
			t.Errorf("reply %d: provisional 1 answered with %x; its object, now b, is %x (a is %x)", i, res.Results[0].Obj, hb, ha)
		}
		if !bytes.Equal(res.Results[2].Obj, ha) {
			t.Errorf("reply %d: provisional 3 answered with %x; a is %x", i, res.Results[2].Obj, ha)
		}
	}
}

// TestSNFSPermitResendNameRemoved: sent again, a provisional id whose object
// lost its name in the batch (CREATE a as 1, RENAME a->b over the server's
// b, REMOVE b, CREATE b as 4) is answered with no handle: b is object 4's.
func TestSNFSPermitResendNameRemoved(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D := permitEnv(t, "b")
	a := dialSNFS(t, e, "permit-nameremoved", newPermitHolder())
	p := getPermit(t, a, D)
	batch := []snfs1.CMLRecord{
		createRec(1, snfs1.ObjRef{FH: D}, "a", 1),
		{LSN: 2, Op: snfs1.CMLRename, Dir: snfs1.ObjRef{FH: D}, Name: "a", ToDir: snfs1.ObjRef{FH: D}, ToName: "b"},
		{LSN: 3, Op: snfs1.CMLUnlink, Dir: snfs1.ObjRef{FH: D}, Name: "b"},
		createRec(4, snfs1.ObjRef{FH: D}, "b", 4),
	}
	for i := range 2 {
		res, err := a.Reintegrate(ctx, []snfs1.PermitRef{p}, batch)
		if err != nil || res.Failed() != nil || res.Applied != 4 || len(res.Results) != 4 {
			t.Fatalf("send %d: %v %+v", i, err, res)
		}
		if i == 1 && len(res.Results[0].Obj) != 0 {
			t.Fatalf("resent: provisional 1 (removed) answered with %x; b (provisional 4) is %x", res.Results[0].Obj, e.lookup(D, "b"))
		}
		if !bytes.Equal(res.Results[3].Obj, e.lookup(D, "b")) {
			t.Fatalf("send %d: provisional 4 answered with %x, b is %x", i, res.Results[3].Obj, e.lookup(D, "b"))
		}
	}
}

// TestSNFSPermitResendNameRemade: a batch applied whose reply was lost
// (CREATE a as provisional 1, CREATE c as 2) is sent again after a local
// process removed a and made it again, and moved c to c2. Provisional 1 is
// answered with no handle (its object is gone), never with the local
// process's a, which the client would take for its own file; provisional
// 2 with its object, wherever it is now. The same after a server restart:
// the made handles are kept with the last applied LSN.
func TestSNFSPermitResendNameRemade(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D, a, p := permitHolderEnv(t, "permit-nameremade")
	batch := []snfs1.CMLRecord{
		createRec(1, snfs1.ObjRef{FH: D}, "a", 1),
		createRec(2, snfs1.ObjRef{FH: D}, "c", 2),
	}
	first, err := a.Reintegrate(ctx, []snfs1.PermitRef{p}, batch)
	if err != nil || first.Failed() != nil || first.Applied != 2 || len(first.Results) != 2 {
		t.Fatalf("%v %+v", err, first)
	}
	if len(first.Results[0].Obj) == 0 || len(first.Results[1].Obj) == 0 {
		t.Fatalf("no handles: %+v", first)
	}
	// The reply is lost; meanwhile a local process makes a again and
	// moves c.
	if err := os.Remove(e.path("d/a")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.path("d/a"), []byte("another's"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(e.path("d/c"), e.path("d/c2")); err != nil {
		t.Fatal(err)
	}
	other := e.lookup(D, "a")
	check := func(when string, res *snfs1.ReintegrateRes) {
		t.Helper()
		if res.Failed() != nil || res.Applied != 2 || len(res.Results) != 2 {
			t.Fatalf("%s: %+v", when, res)
		}
		if got := res.Results[0].Obj; bytes.Equal(got, other) {
			t.Errorf("%s: provisional 1 answered with the local process's a (%x)", when, got)
		} else if len(got) != 0 {
			t.Errorf("%s: provisional 1 (removed) answered with %x", when, got)
		}
		if !bytes.Equal(res.Results[1].Obj, first.Results[1].Obj) {
			t.Errorf("%s: provisional 2 answered with %x, its object is %x", when, res.Results[1].Obj, first.Results[1].Obj)
		}
	}
	again, err := a.Reintegrate(ctx, []snfs1.PermitRef{p}, batch)
	if err != nil {
		t.Fatal(err)
	}
	check("resent", again)
	e.restart()
	p = getPermit(t, a, D)
	again, err = a.Reintegrate(ctx, []snfs1.PermitRef{p}, batch)
	if err != nil {
		t.Fatal(err)
	}
	check("resent after a restart", again)
}
