package tests

import (
	"bytes"
	"os"
	"syscall"
	"testing"
	"time"

	"snfs/consist"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
)

// CML_STORE (docs/protocol.md section 21.3, "Data (CML_STORE)"): a file's
// whole content and times applied with the batch that makes the file,
// idempotent by LSN, applied again after a crash, refused without a permit.

func storeRec(lsn uint64, obj snfs1.ObjRef, data []byte, at, mt nfs3.Time) snfs1.CMLRecord {
	return snfs1.CMLRecord{LSN: lsn, Op: snfs1.CMLStore, Obj: obj, Data: data, Atime: at, Mtime: mt}
}

// statTimes are fi's access and modification times.
func statTimes(t *testing.T, p string) (time.Time, time.Time) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return time.Unix(st.Atim.Sec, st.Atim.Nsec), time.Unix(st.Mtim.Sec, st.Mtim.Nsec)
}

// TestSNFSPermitStore: a CREATE and a STORE of the file it made, in one
// batch: the file has the data and the times on the server, the STORE's
// result its attributes after them; a later batch's STORE of the real
// handle with less data cuts the file to it; a STORE of a directory is
// refused, and so is one under no permit.
func TestSNFSPermitStore(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D, a, p := permitHolderEnv(t, "permit-store")
	data := bytes.Repeat([]byte("0123456789abcdef"), snfs1.StoreMax/16)
	at, mt := nfs3.Time{Sec: 1500000000, Nsec: 5}, nfs3.Time{Sec: 1400000000, Nsec: 7000}
	res := reintegrated(t, a, p, 2, []snfs1.CMLRecord{
		createRec(1, snfs1.ObjRef{FH: D}, "f", 1),
		storeRec(2, snfs1.ObjRef{Prov: 1}, data, at, mt),
	})
	F := res.Results[0].Obj
	// The times first: the read below sets the access time.
	gotA, gotM := statTimes(t, e.path("d/f"))
	if !gotA.Equal(time.Unix(int64(at.Sec), int64(at.Nsec))) || !gotM.Equal(time.Unix(int64(mt.Sec), int64(mt.Nsec))) {
		t.Errorf("d/f's times: %v, %v; want %v, %v", gotA, gotM, at, mt)
	}
	if got, err := os.ReadFile(e.path("d/f")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("d/f on the server: %d bytes, %v; want %d", len(got), err, len(data))
	}
	if r := res.Results[1].Attr; r == nil || r.Size != uint64(len(data)) || r.Mtime != mt || r.Atime != at {
		t.Errorf("the STORE's attributes: %+v; want size %d and the times stored", r, len(data))
	}
	// A later batch names the file by its handle: less data cuts it.
	reintegrated(t, a, p, 3, []snfs1.CMLRecord{storeRec(3, snfs1.ObjRef{FH: F}, []byte("short"), at, mt)})
	if got, err := os.ReadFile(e.path("d/f")); err != nil || string(got) != "short" {
		t.Fatalf("d/f after a shorter STORE: %q, %v", got, err)
	}
	// A directory is not a regular file.
	res, err := a.Reintegrate(ctx, []snfs1.PermitRef{p}, []snfs1.CMLRecord{storeRec(4, snfs1.ObjRef{FH: D}, []byte("x"), at, mt)})
	if err != nil || res.Failed() == nil || res.Failed().Status == nfs3.OK {
		t.Errorf("a STORE of a directory: %v %+v; want refused", err, res)
	}
	// No permit named: refused, the file untouched.
	res, err = a.Reintegrate(ctx, nil, []snfs1.CMLRecord{storeRec(5, snfs1.ObjRef{FH: F}, []byte("no permit"), at, mt)})
	if err != nil || res.Failed() == nil || res.Failed().Status != snfs1.ErrNoPermit {
		t.Errorf("a STORE under no permit: %v %+v; want SNFS_ERR_NOPERMIT", err, res)
	}
	if got, err := os.ReadFile(e.path("d/f")); err != nil || string(got) != "short" {
		t.Errorf("d/f after a refused STORE: %q, %v", got, err)
	}
}

// TestSNFSPermitStoreResend: a batch with a STORE sent again after its
// reply was lost (a new call: the duplicate request cache does not answer
// it) is answered from the last applied LSN: the file is not written again
// (a later change of it stays), and the CREATE is answered with its object.
func TestSNFSPermitStoreResend(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D, a, p := permitHolderEnv(t, "permit-store-resend")
	at, mt := nfs3.Time{Sec: 1300000000}, nfs3.Time{Sec: 1300000001}
	batch := []snfs1.CMLRecord{
		createRec(1, snfs1.ObjRef{FH: D}, "f", 1),
		storeRec(2, snfs1.ObjRef{Prov: 1}, []byte("first"), at, mt),
	}
	res := reintegrated(t, a, p, 2, batch)
	F := res.Results[0].Obj
	if err := os.WriteFile(e.path("d/f"), []byte("changed since"), 0o644); err != nil {
		t.Fatal(err)
	}
	res = reintegrated(t, a, p, 2, batch)
	if !bytes.Equal(res.Results[0].Obj, F) || len(res.Results) != 2 || res.Results[1].Status != nfs3.OK {
		t.Errorf("the resend's results: %+v; want the CREATE's object and the STORE answered", res.Results)
	}
	if got, err := os.ReadFile(e.path("d/f")); err != nil || string(got) != "changed since" {
		t.Errorf("d/f after the resend: %q, %v; want the later change (the STORE applied twice)", got, err)
	}
}

// TestSNFSPermitCrashMidBatchStoreAgain: a crash after a batch's records
// were applied (its CREATE g is there) and before the batch was recorded:
// the STORE in it may have lost its data with the crash (its names were
// kept, its data not flushed yet). The resend applies the STORE again (an
// overwrite of the whole file is harmless twice) instead of answering it as
// applied: the file has the data.
func TestSNFSPermitCrashMidBatchStoreAgain(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D, a, p := permitHolderEnv(t, "permit-crash-store")
	res := reintegrated(t, a, p, 1, []snfs1.CMLRecord{createRec(1, snfs1.ObjRef{FH: D}, "f", 1)})
	F := res.Results[0].Obj
	addr := e.addr
	e.stop()
	// The crash: the batch 2..3 (STORE f, CREATE g) applied as far as the
	// names go, f's data lost; LSN 1 recorded, 3 pending.
	if err := os.WriteFile(e.path("d/g"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	setPendingLSN(t, e, 1, 3)
	e.start(addr)
	p = getPermit(t, a, D)
	mt := nfs3.Time{Sec: 1234567890}
	res, err := a.Reintegrate(ctx, []snfs1.PermitRef{p}, []snfs1.CMLRecord{
		storeRec(2, snfs1.ObjRef{FH: F}, []byte("the data"), mt, mt),
		createRec(3, snfs1.ObjRef{FH: D}, "g", 3),
	})
	if err != nil || res.Failed() != nil || res.Applied != 3 {
		t.Fatalf("the batch resent after the crash: %v %+v", err, res)
	}
	if got, err := os.ReadFile(e.path("d/f")); err != nil || string(got) != "the data" {
		t.Errorf("f after the resend: %q, %v; want the STORE's data", got, err)
	}
}

// TestSNFSPermitCrashStoreCallsBack: a STORE of a file its batch made,
// resent after a crash that may have interrupted that batch, calls back the
// clients that opened the file meanwhile before it overwrites it (the file's
// name may have been on disk since before the crash). Before, such a STORE
// was applied as if nobody else could have the file.
func TestSNFSPermitCrashStoreCallsBack(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D, a, p := permitHolderEnv(t, "permit-crash-store-cb")
	reintegrated(t, a, p, 1, []snfs1.CMLRecord{createRec(1, snfs1.ObjRef{FH: D}, "first", 1)})
	key := func(name string) uint64 { return consist.PreKey(state.FileIDOf(D), name) }
	addr := e.addr
	e.stop()
	// The crash: the batch 2..3 (CREATE f, STORE f) applied as far as the
	// name goes; LSN 1 recorded, 3 pending, f absent before the batch.
	if err := os.WriteFile(e.path("d/f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	setPendingLSNPre(t, e, 1, 3, map[uint64]nfs3.FH{key("f"): nil})
	e.start(addr)
	// Another client opens f for writing, with caching, before the resend.
	cacher := newDirBreaks()
	c := dialSNFS(t, e, "permit-crash-store-cacher", cacher)
	cacheForWrite(t, c, D, "f")
	for len(cacher.ch) > 0 {
		<-cacher.ch
	}
	p = getPermit(t, a, D)
	for len(cacher.ch) > 0 { // the permit's grant breaks c's promise of d, if any
		<-cacher.ch
	}
	mt := nfs3.Time{Sec: 1234567890}
	res, err := a.Reintegrate(ctx, []snfs1.PermitRef{p}, []snfs1.CMLRecord{
		createRec(2, snfs1.ObjRef{FH: D}, "f", 2),
		storeRec(3, snfs1.ObjRef{Prov: 2}, []byte("the data"), mt, mt),
	})
	if err != nil || res.Failed() != nil || res.Applied != 3 {
		t.Fatalf("the batch resent after the crash: %v %+v", err, res)
	}
	if len(cacher.ch) == 0 {
		t.Error("the STORE resent after the crash overwrote f without calling back the client that had it open for writing")
	}
	if got, err := os.ReadFile(e.path("d/f")); err != nil || string(got) != "the data" {
		t.Errorf("f after the resend: %q, %v; want the STORE's data", got, err)
	}
}
