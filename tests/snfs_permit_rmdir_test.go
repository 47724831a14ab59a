package tests

import (
	"bytes"
	"os"
	"testing"
	"time"

	"snfs/nfs3"
	"snfs/snfs1"
)

// TestSNFSPermitRmdirRecalls: a plain client's RMDIR of a directory whose
// write-back permit another client holds, with a CREATE in it logged and
// not yet reintegrated, recalls the permit first (docs/protocol.md section
// 21.6, "A removed directory's permit"): the holder's entry is there when
// the RMDIR runs, which fails NFS3ERR_NOTEMPTY, and the holder's file is
// kept, not refused into a conflict. A RENAME of another directory over it
// is held the same way (NOTEMPTY, or EXIST). Once empty and with its
// permit held again but nothing logged, the RMDIR recalls and succeeds.
func TestSNFSPermitRmdirRecalls(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D := permitEnv(t)
	if err := os.Mkdir(e.path("other"), 0o777); err != nil {
		t.Fatal(err)
	}
	h := newPermitHolder()
	h.delay = 100 * time.Millisecond
	a := dialSNFS(t, e, "permit-rmdir-a", h)
	p := getPermit(t, a, D)
	h.mu.Lock()
	h.s, h.permit = a, p
	h.log = []snfs1.CMLRecord{createRec(1, snfs1.ObjRef{FH: D}, "n", 1)}
	h.mu.Unlock()

	r, err := e.nfs.Rmdir(ctx, e.root, "d")
	want(t, "RMDIR of the holder's directory with a logged create", r.Status, err, nfs3.ErrNotEmpty)
	holderKept(t, e, h, D, "RMDIR")

	// A RENAME of another directory over d, d's permit held again with a
	// second create logged: recalled first, refused (d is not empty).
	p = getPermit(t, a, D)
	h.mu.Lock()
	h.permit = p
	h.log = []snfs1.CMLRecord{createRec(2, snfs1.ObjRef{FH: D}, "m", 2)}
	h.mu.Unlock()
	rr, err := e.nfs.Rename(ctx, e.root, "other", e.root, "d")
	if err != nil || rr.Status != nfs3.ErrNotEmpty && rr.Status != nfs3.ErrExist {
		t.Fatalf("RENAME over the holder's directory: %v %v, want NOTEMPTY or EXIST", rr.Status, err)
	}
	select {
	case <-h.recalled:
	default:
		t.Fatal("RENAME answered without a recall of the replaced directory's permit")
	}
	if _, err := os.Stat(e.path("d/m")); err != nil {
		t.Fatalf("the holder's second file after the RENAME: %v", err)
	}

	// Emptied, its permit held again with nothing logged: the RMDIR recalls
	// it and succeeds.
	for _, n := range []string{"n", "m"} {
		if err := os.Remove(e.path("d/" + n)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond) // the server's notifier: the local removes recall nothing held now
	p = getPermit(t, a, D)
	h.mu.Lock()
	h.permit, h.log = p, nil
	h.mu.Unlock()
	r, err = e.nfs.Rmdir(ctx, e.root, "d")
	ok(t, "RMDIR of the emptied directory", r.Status, err)
	select {
	case <-h.recalled:
	default:
		t.Fatal("the last RMDIR answered without a recall")
	}
}

// holderKept checks that the removal what names recalled the permit h holds
// on the directory D first: h reintegrated its logged create of d/n, which
// is there.
func holderKept(t *testing.T, e *env, h *permitHolder, D nfs3.FH, what string) {
	t.Helper()
	select {
	case fh := <-h.recalled:
		if !bytes.Equal(fh, D) {
			t.Fatalf("recall of %x, not the removed directory", fh)
		}
	default:
		t.Fatalf("%s answered without a recall of the removed directory's permit", what)
	}
	h.mu.Lock()
	results, rerr := h.results, h.err
	h.mu.Unlock()
	if rerr != nil || len(results) != 1 || results[0].Status != nfs3.OK {
		t.Fatalf("the holder's reintegration: %v %+v", rerr, results)
	}
	if _, err := os.Stat(e.path("d/n")); err != nil {
		t.Fatalf("the holder's file after the %s: %v", what, err)
	}
}

// TestSNFSPermitReintegratedRmdirRecalls: as TestSNFSPermitRmdirRecalls, but
// the RMDIR is a record of another permit holder's REINTEGRATE (its permit on
// the parent): the removed directory's permit is recalled before the record
// is applied, so the record fails NFS3ERR_NOTEMPTY and the holder's logged
// file is kept (it was removed with the directory, the holder's create then
// refused). With the directory emptied and nothing logged, the record
// recalls and removes it.
func TestSNFSPermitReintegratedRmdirRecalls(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D := permitEnv(t)
	h := newPermitHolder()
	h.delay = 100 * time.Millisecond
	a := dialSNFS(t, e, "permit-rrmdir-a", h)
	p := getPermit(t, a, D)
	h.mu.Lock()
	h.s, h.permit = a, p
	h.log = []snfs1.CMLRecord{createRec(1, snfs1.ObjRef{FH: D}, "n", 1)}
	h.mu.Unlock()

	b := dialSNFS(t, e, "permit-rrmdir-b", newPermitHolder())
	pr := getPermit(t, b, e.root)
	rmdir := func(lsn uint64) *snfs1.ReintegrateRes {
		t.Helper()
		res, err := b.Reintegrate(ctx, []snfs1.PermitRef{pr}, []snfs1.CMLRecord{{LSN: lsn, Op: snfs1.CMLRmdir, Dir: snfs1.ObjRef{FH: e.root}, Name: "d"}})
		if err != nil || len(res.Results) != 1 {
			t.Fatalf("REINTEGRATE of the RMDIR: %v %+v", err, res)
		}
		return res
	}
	res := rmdir(1)
	if st := res.Results[0].Status; st != nfs3.ErrNotEmpty {
		t.Fatalf("the reintegrated RMDIR of the holder's directory with a logged create: %v, want NOTEMPTY", st)
	}
	holderKept(t, e, h, D, "RMDIR record")

	if err := os.Remove(e.path("d/n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the server's notifier: the local remove recalls nothing held now
	p = getPermit(t, a, D)
	h.mu.Lock()
	h.permit, h.log = p, nil
	h.mu.Unlock()
	pr = getPermit(t, b, e.root) // the local remove may have recalled it
	if res := rmdir(2); res.Results[0].Status != nfs3.OK {
		t.Fatalf("the reintegrated RMDIR of the emptied directory: %v", res.Results[0].Status)
	}
	select {
	case <-h.recalled:
	default:
		t.Fatal("the last RMDIR record was applied without a recall")
	}
	if _, err := os.Stat(e.path("d")); !os.IsNotExist(err) {
		t.Fatalf("d after the RMDIR: %v", err)
	}
}
