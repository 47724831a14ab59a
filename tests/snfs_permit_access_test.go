package tests

import (
	"bytes"
	"os"
	"testing"
	"time"

	"snfs/nfs3"
	"snfs/snfs1"
)

// TestSNFSPermitAccessRecalls: a plain client's ACCESS of a directory
// whose write-back permit another client holds, with a CREATE in it logged
// and not yet reintegrated, recalls the permit first, as a GETATTR does
// (docs/protocol.md section 21.4, "Reads recall too"): its answer carries
// the directory's attributes, which must include the holder's change (the
// entry its application was told exists).
func TestSNFSPermitAccessRecalls(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D := permitEnv(t)
	before, err := os.Stat(e.path("d"))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // the create's mtime is of another tick
	h := newPermitHolder()
	a := dialSNFS(t, e, "permit-access-a", h)
	p := getPermit(t, a, D)
	h.mu.Lock()
	h.s, h.permit = a, p
	h.log = []snfs1.CMLRecord{createRec(1, snfs1.ObjRef{FH: D}, "n", 1)}
	h.mu.Unlock()

	r, err := e.nfs.Access(ctx, D, nfs3.AccessRead|nfs3.AccessLookup)
	ok(t, "ACCESS of the holder's directory", r.Status, err)
	select {
	case fh := <-h.recalled:
		if !bytes.Equal(fh, D) {
			t.Fatalf("recall of %x, not the directory", fh)
		}
	default:
		t.Fatal("ACCESS answered without a recall of the directory's permit")
	}
	if _, err := os.Stat(e.path("d/n")); err != nil {
		t.Fatalf("the holder's file after the ACCESS: %v", err)
	}
	if r.Attr == nil || r.Attr.Mtime == (nfs3.Time{Sec: uint32(before.ModTime().Unix()), Nsec: uint32(before.ModTime().Nanosecond())}) {
		t.Fatalf("ACCESS's attributes %+v: the directory as before the holder's create", r.Attr)
	}
}
