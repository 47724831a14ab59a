package tests

import (
	"bytes"
	"fmt"
	"os"
	"testing"
	"time"

	"snfs/nfs3"
	"snfs/snfs1"
)

// The permit of a removed directory ends with it (docs/protocol.md section
// 21.6, "A removed directory's permit"): before, the server kept it until
// its client unregistered, and a long-lived client reached its bound of
// permits with directories made and removed.

// TestSNFSPermitRemovedByReintegrate: directories made under a permit
// (each MKDIR's reply gives a permit on the new directory) and removed by
// later records leave only the parent's permit held; the server's table
// holds nothing more.
func TestSNFSPermitRemovedByReintegrate(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D, a, p := permitHolderEnv(t, "permit-gone-reint")
	mode := uint32(0o755)
	lsn := uint64(0)
	var subs []snfs1.PermitRef
	for i := range 5 {
		lsn++
		name := fmt.Sprintf("sub%d", i)
		res := reintegrated(t, a, p, lsn, []snfs1.CMLRecord{{LSN: lsn, Op: snfs1.CMLMkdir, Dir: snfs1.ObjRef{FH: D}, Name: name, Attr: nfs3.Sattr{Mode: &mode}, New: uint64(i + 1)}})
		if res.Results[0].Permit == 0 {
			t.Fatal("MKDIR gave no permit on the new directory")
		}
		subs = append(subs, snfs1.PermitRef{Dir: res.Results[0].Obj, Permit: res.Results[0].Permit})
	}
	if st := e.srv.PermitStats(); st.Permits != 6 {
		t.Fatalf("%d permits held after 5 MKDIRs, want 6", st.Permits)
	}
	// Each RMDIR in a batch under both permits: the parent's (the change)
	// and the removed directory's (a batch may carry records under it,
	// made before the RMDIR).
	for i, sp := range subs {
		lsn++
		res, err := a.Reintegrate(ctx, []snfs1.PermitRef{p, sp}, []snfs1.CMLRecord{{LSN: lsn, Op: snfs1.CMLRmdir, Dir: snfs1.ObjRef{FH: D}, Name: fmt.Sprintf("sub%d", i)}})
		if err != nil || res.Failed() != nil || res.Applied != lsn {
			t.Fatalf("RMDIR sub%d: %v %+v", i, err, res)
		}
	}
	if st := e.srv.PermitStats(); st.Permits != 1 || st.Releases != 5 {
		t.Fatalf("after the RMDIRs: %+v, want the parent's permit only (5 released)", st)
	}
	// The parent's permit is still held and still works.
	lsn++
	reintegrated(t, a, p, lsn, []snfs1.CMLRecord{createRec(lsn, snfs1.ObjRef{FH: D}, "after", 100)})
}

// TestSNFSPermitRemovedByNFS: an NFSv3 RMDIR of a directory whose permit
// its caller holds (through the session's own connection) ends the
// permit; one through a stock client of a directory whose permit a
// session holds recalls it (its holder learns the directory is gone), and
// the permit ends with the answer.
func TestSNFSPermitRemovedByNFS(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D := permitEnv(t)
	for _, n := range []string{"mine", "theirs"} {
		if err := os.Mkdir(e.path("d/"+n), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	h := newPermitHolder()
	a := dialSNFS(t, e, "permit-gone-nfs", h)
	getPermit(t, a, e.lookup(D, "mine"))
	theirs := e.lookup(D, "theirs")
	getPermit(t, a, theirs)
	if st := e.srv.PermitStats(); st.Permits != 2 {
		t.Fatalf("%d permits", st.Permits)
	}

	res, err := a.NFS().Rmdir(ctx, D, "mine")
	ok(t, "RMDIR (the holder's)", res.Status, err)
	if st := e.srv.PermitStats(); st.Permits != 1 || st.Recalls != 0 {
		t.Fatalf("after the holder's own RMDIR: %+v", st)
	}

	res, err = e.nfs.Rmdir(ctx, D, "theirs")
	ok(t, "RMDIR (a stock client's)", res.Status, err)
	select {
	case fh := <-h.recalled:
		if !bytes.Equal(fh, theirs) {
			t.Fatalf("recall of %x, want the removed directory's", fh)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a stock client's RMDIR did not recall the removed directory's permit")
	}
	// The recall's answer ends it (the callback's answer is handled after
	// the handler returns: wait for the table to take it in).
	deadline := time.Now().Add(10 * time.Second)
	for e.srv.PermitStats().Permits != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the removed directory's permit is still held: %+v", e.srv.PermitStats())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSNFSPermitReplacedByRename: a RENAME over an empty directory removes
// it, and ends its permit as RMDIR does; a rename of a directory onto its
// own name keeps it.
func TestSNFSPermitReplacedByRename(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D := permitEnv(t)
	for _, n := range []string{"a", "b"} {
		if err := os.Mkdir(e.path("d/"+n), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	a := dialSNFS(t, e, "permit-gone-rename", newPermitHolder())
	getPermit(t, a, e.lookup(D, "a"))
	getPermit(t, a, e.lookup(D, "b"))
	nfs := a.NFS()
	res, err := nfs.Rename(ctx, D, "a", D, "a")
	ok(t, "RENAME onto itself", res.Status, err)
	if st := e.srv.PermitStats(); st.Permits != 2 {
		t.Fatalf("after a rename onto itself: %+v", st)
	}
	res, err = nfs.Rename(ctx, D, "a", D, "b")
	ok(t, "RENAME over b", res.Status, err)
	if st := e.srv.PermitStats(); st.Permits != 1 || st.Releases != 1 {
		t.Fatalf("after the rename over b: %+v, want a's permit only", st)
	}
}
