package tests

import (
	"errors"
	"io/fs"
	"os"
	"testing"

	"snfs/mount/cachemgr"
	"snfs/nfs3"
	"snfs/server"
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

// TestMountSNFSPermitsKeptNameMovedOut: a name the kernel keeps under a
// permit, renamed by this mount into a cached directory whose names it does
// not keep (no permit: the server's bound of one per client), is not kept
// there: the kernel moves the name with its lifetime, so the mount drops
// every kept name after such a rename. A plain client's removal of the moved
// file (which breaks the promise, needing no name of the kernel's dropped)
// is then seen at once.
func TestMountSNFSPermitsKeptNameMovedOut(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnvWith(t, "rw,no_root_squash", func(c *server.Config) { c.Permits.MaxPerClient = 1 })
	for _, d := range []string{"d", "e"} {
		if err := os.MkdirAll(e.path(d), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(e.path("d/x"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := newPermitsMount(t, e, "permits-kept-moved", "")
	for _, d := range []string{"d", "e"} {
		if _, err := os.ReadDir(a.path(d)); err != nil {
			t.Fatal(err)
		}
	}
	// A local change takes d's permit (the one this client may hold); then
	// x's name is kept.
	if err := os.WriteFile(a.path("d/y"), []byte("y"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := cachemgr.StatsOf(a.v).LocalChanges.Load(); got != 1 {
		t.Fatalf("%d changes made locally; want 1 (under d's permit)", got)
	}
	if _, err := os.Stat(a.path("d/x")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(a.path("d/x"), a.path("e/x")); err != nil {
		t.Fatal(err)
	}
	if got := cachemgr.StatsOf(a.v).LocalChanges.Load(); got != 1 {
		t.Fatalf("%d changes made locally; want 1 (the rename into e, without its permit, through the server)", got)
	}
	if _, err := os.Stat(a.path("e/x")); err != nil {
		t.Fatal(err)
	}
	E := e.lookup(e.root, "e")
	if r, err := e.nfs.Remove(ctx, E, "x"); err != nil || r.Status != nfs3.OK {
		t.Fatalf("plain REMOVE e/x: %v %v", r, err)
	}
	if _, err := os.Stat(a.path("e/x")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("A's stat of e/x after another client removed it: %v; want ENOENT", err)
	}
}
