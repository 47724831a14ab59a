package tests

import (
	"context"
	"testing"
	"time"

	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
)

// CML_CREATE_OPEN (docs/protocol.md section 21.3, "Opens"): a CREATE whose
// file the server also opens for writing for the caller.

// createOpenRec is createRec sent as CML_CREATE_OPEN.
func createOpenRec(lsn uint64, dir snfs1.ObjRef, name string, prov uint64) snfs1.CMLRecord {
	r := createRec(lsn, dir, name, prov)
	r.Open = true
	return r
}

// reintegrateOpen sends recs under p and returns the reply, failing the
// test unless every record was applied.
func reintegrateOpen(t *testing.T, s interface {
	Reintegrate(context.Context, []snfs1.PermitRef, []snfs1.CMLRecord) (*snfs1.ReintegrateRes, error)
}, p snfs1.PermitRef, recs ...snfs1.CMLRecord) *snfs1.ReintegrateRes {
	t.Helper()
	res, err := s.Reintegrate(ctx, []snfs1.PermitRef{p}, recs)
	if err != nil || res.Failed() != nil || len(res.Results) != len(recs) {
		t.Fatalf("REINTEGRATE: %v %+v", err, res)
	}
	return res
}

// TestSNFSPermitCreateOpenWriteSharing: the open a CML_CREATE_OPEN gives is
// an OPEN_WRITE like any: another client's write open of the file calls the
// creator back and is answered without caching (Table 1's concurrent write
// sharing), and the creator's CLOSE matches it.
func TestSNFSPermitCreateOpenWriteSharing(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D := permitEnv(t)
	h := &createdHolder{data: map[string][]byte{}}
	a := dialSNFS(t, e, "permit-co-share-a", h)
	h.mu.Lock()
	h.s = a
	h.mu.Unlock()
	b := dialSNFS(t, e, "permit-co-share-b", nil)
	p := getPermit(t, a, D)
	res := reintegrateOpen(t, a, p, createOpenRec(1, snfs1.ObjRef{FH: D}, "f", 1))
	if len(res.Opens) != 1 || res.Opens[0].LSN != 1 || res.Opens[0].Open.Status != nfs3.OK {
		t.Fatalf("the CML_CREATE_OPEN's open: %+v", res.Opens)
	}
	if res.Opens[0].ServerVerf != a.ServerVerifier() {
		t.Fatal("the open's server verifier is not the registration's")
	}
	if !res.Opens[0].Open.CacheEnabled {
		t.Fatal("the creator may not cache the file it alone has open")
	}
	fh := res.Results[0].Obj
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	bfh, bok, err := b.OpenName(cctx, D, "f", state.Write)
	if err != nil {
		t.Fatal(err)
	}
	if string(bfh) != string(fh) {
		t.Fatal("the other client opened another file")
	}
	if bok.CacheEnabled {
		t.Fatal("a second writer of a file the creator has open for writing may cache: write sharing not detected")
	}
	h.mu.Lock()
	calls := len(h.calls)
	h.mu.Unlock()
	if calls == 0 {
		t.Fatal("the creator was not called back before the second writer's open was answered")
	}
	if _, err := a.Close(cctx, fh, state.Write, false); err != nil {
		t.Fatalf("the creator's CLOSE of the open REINTEGRATE gave: %v", err)
	}
	if _, err := b.Close(cctx, fh, state.Write, false); err != nil {
		t.Fatal(err)
	}
}

// TestSNFSPermitCreateOpenResent: a batch sent again after its reply was
// lost (a new call) answers the open its first application granted, without
// counting it again: once the creator's one CLOSE is in, another client's
// write open sees no other writer and may cache.
func TestSNFSPermitCreateOpenResent(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D := permitEnv(t)
	a := dialSNFS(t, e, "permit-co-resend-a", newPermitHolder())
	b := dialSNFS(t, e, "permit-co-resend-b", nil)
	p := getPermit(t, a, D)
	rec := createOpenRec(1, snfs1.ObjRef{FH: D}, "f", 1)
	first := reintegrateOpen(t, a, p, rec)
	again := reintegrateOpen(t, a, p, rec)
	if len(again.Opens) != 1 || again.Opens[0].Open.Status != nfs3.OK {
		t.Fatalf("the resent CML_CREATE_OPEN's open: %+v; want the first one's granted again", again.Opens)
	}
	if string(again.Results[0].Obj) != string(first.Results[0].Obj) ||
		again.Opens[0].Open.CacheVersion != first.Opens[0].Open.CacheVersion {
		t.Fatalf("the resend answered %+v; the first call %+v", again.Opens[0], first.Opens[0])
	}
	fh := first.Results[0].Obj
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := a.Close(cctx, fh, state.Write, false); err != nil {
		t.Fatal(err)
	}
	_, bok, err := b.OpenName(cctx, D, "f", state.Write)
	if err != nil {
		t.Fatal(err)
	}
	if !bok.CacheEnabled {
		t.Fatal("after the creator's CLOSE another writer may not cache: the resend counted a second open")
	}
	if _, err := b.Close(cctx, fh, state.Write, false); err != nil {
		t.Fatal(err)
	}
}

// TestSNFSPermitCreateOpenResentPlain: a batch whose CML_CREATE_OPEN was
// granted and whose reply was lost, sent again with the record as a plain
// CML_CREATE (a later mount's resend of its log: no open to give), withdraws
// the open: the creator never CLOSEs it, and another client's write open
// sees no other writer.
func TestSNFSPermitCreateOpenResentPlain(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D := permitEnv(t)
	a := dialSNFS(t, e, "permit-co-plain-a", newPermitHolder())
	b := dialSNFS(t, e, "permit-co-plain-b", nil)
	p := getPermit(t, a, D)
	first := reintegrateOpen(t, a, p, createOpenRec(1, snfs1.ObjRef{FH: D}, "f", 1))
	if len(first.Opens) != 1 || first.Opens[0].Open.Status != nfs3.OK {
		t.Fatalf("the CML_CREATE_OPEN's open: %+v", first.Opens)
	}
	again := reintegrateOpen(t, a, p, createRec(1, snfs1.ObjRef{FH: D}, "f", 1))
	if len(again.Opens) != 0 {
		t.Fatalf("a plain CML_CREATE resent was answered opens %+v", again.Opens)
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	fh, bok, err := b.OpenName(cctx, D, "f", state.Write)
	if err != nil {
		t.Fatal(err)
	}
	if !bok.CacheEnabled {
		t.Fatal("another writer may not cache: the open the lost reply granted is still counted")
	}
	if _, err := b.Close(cctx, fh, state.Write, false); err != nil {
		t.Fatal(err)
	}
}
