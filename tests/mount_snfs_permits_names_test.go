package tests

import (
	"errors"
	"io/fs"
	"os"
	"testing"

	"snfs/mount/cachemgr"
	"snfs/nfs3"
)

// TestMountSNFSPermitsKeptNamesRecalled: under a directory's write-back
// permit the kernel keeps the names the mount gives it (cachemgr
// permitnames.go); when another client's change recalls the permit, they are
// dropped before the recall is answered. A file made locally and one renamed
// by a plain NFSv3 client (whose REMOVE and RENAME wait for the recall) are
// gone from the holder's view the moment those calls return, and the new
// name is there. Without the drop the kernel kept the old names for the
// lease's rest: stat found a removed file.
func TestMountSNFSPermitsKeptNamesRecalled(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	if err := os.MkdirAll(e.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	a := newPermitsMount(t, e, "permits-kept-names", "")
	if _, err := os.ReadDir(a.path("d")); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"x", "y"} {
		if err := os.WriteFile(a.path("d/"+n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := cachemgr.StatsOf(a.v).LocalChanges.Load(); got != 2 {
		t.Fatalf("%d changes made locally; want 2 (the creates, under d's permit)", got)
	}
	// The kernel now has both names (and keeps them: the stats below come
	// from its dentries).
	for _, n := range []string{"x", "y"} {
		if _, err := os.Stat(a.path("d/" + n)); err != nil {
			t.Fatal(err)
		}
	}
	D := e.lookup(e.root, "d")
	if r, err := e.nfs.Remove(ctx, D, "x"); err != nil || r.Status != nfs3.OK {
		t.Fatalf("plain REMOVE d/x: %v %v", r, err)
	}
	if r, err := e.nfs.Rename(ctx, D, "y", D, "z"); err != nil || r.Status != nfs3.OK {
		t.Fatalf("plain RENAME d/y d/z: %v %v", r, err)
	}
	for _, n := range []string{"x", "y"} {
		if _, err := os.Stat(a.path("d/" + n)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("A's stat of d/%s after another client removed it: %v; want ENOENT", n, err)
		}
	}
	if got, err := os.ReadFile(a.path("d/z")); err != nil || string(got) != "y" {
		t.Errorf("A reads d/z: %q, %v", got, err)
	}
}
