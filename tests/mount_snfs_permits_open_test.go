package tests

import (
	"os"
	"testing"
	"time"
)

// TestMountSNFSPermitsOpenShared: the open a file made locally gets from
// its reintegration (CML_CREATE_OPEN, docs/mount.md "The open comes with
// the reintegration") is an open like any other for Table 1. The first
// write resolves the file with no OPEN; another mount's open of it then
// calls the creator back (the data it cached is written back first: the
// other mount reads it) and is concurrent write sharing: the creator stops
// caching, so what it writes next is read by the other mount at once
// (with an hour's write-back delay it would otherwise stay in its cache).
func TestMountSNFSPermitsOpenShared(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, reg := keptEnv(t, nil)
	if err := os.MkdirAll(e.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	a := newPermitsMount(t, e, "permits-open-a", "")
	if _, err := os.ReadDir(a.path("d")); err != nil {
		t.Fatal(err)
	}
	// The directory's permit first (one REINTEGRATE per created file).
	if err := os.WriteFile(a.path("d/first"), []byte("first"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(a.path("d/f"), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := os.Lstat(e.path("d/f")); !os.IsNotExist(err) {
		t.Fatalf("d/f on the server before its first write: %v (not made locally?)", err)
	}
	before := serverCallsByProc(t, reg)
	if _, err := f.WriteAt([]byte("AAAA"), 0); err != nil {
		t.Fatal(err)
	}
	after := serverCallsByProc(t, reg)
	if d := after["OPEN"] - before["OPEN"]; d != 0 {
		t.Errorf("the first write of a file made locally cost %v OPEN calls; want none (the reintegration opens it)", d)
	}
	if d := after["REINTEGRATE"] - before["REINTEGRATE"]; d != 1 {
		t.Errorf("the first write of a file made locally cost %v REINTEGRATE calls; want 1", d)
	}

	b := newSNFSMount(t, e, "permits-open-b", "", time.Hour)
	g, err := os.OpenFile(b.path("d/f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	buf := make([]byte, 8)
	if k, err := g.ReadAt(buf, 0); k < 4 || string(buf[:4]) != "AAAA" {
		t.Fatalf("the other mount reads %q (%v); want the creator's AAAA, written back by the callback its open made", buf[:k], err)
	}
	if _, err := f.WriteAt([]byte("BBBB"), 4); err != nil {
		t.Fatal(err)
	}
	if k, err := g.ReadAt(buf, 0); k != 8 || string(buf) != "AAAABBBB" {
		t.Fatalf("the other mount reads %q (%v) after the creator's second write; want AAAABBBB: write sharing not detected, the creator still caches", buf[:k], err)
	}
}
