package tests

import (
	"bytes"
	"fmt"
	"os"
	"testing"
	"time"

	"snfs/mount/cachemgr"
	"snfs/snfs1"
	"snfs/state/clientfile"
)

// TestMountSNFSPermitsDataReadBack: small files made under a permit with
// --permit-data=on and reintegrated by the directory's fsync (their data in
// CML_STORE records) are read back by the mount with no call: the
// reintegration opened them for this mount (CML_CREATE_OPEN) and their
// bytes are its cached data (mount/cachemgr/permitreadback.go). Another
// mount's open of one, and a process's read of the server's file, read the right bytes; a write on this mount after
// the read-back (kept in its cache: an hour's write-back delay) is read by
// the other mount at its next open (its OPEN calls this mount back).
func TestMountSNFSPermitsDataReadBack(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, reg := leasedEnv(t)
	if err := os.MkdirAll(e.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	m := newPermitDataMountClose(t, e, "permits-data-readback", "", clientfile.UntilRecalled)
	if !cachemgr.SetLogPolicy(m.v, time.Hour, 1<<20) {
		t.Fatal("no modification log")
	}
	if _, err := os.ReadDir(m.path("d")); err != nil {
		t.Fatal(err)
	}
	// Up to 62 KiB a file, 1.2 MiB in all: the STOREs of the last files go
	// in a later batch of the reintegration than their CREATEs.
	const n = 40
	want := map[string][]byte{}
	for k := range n {
		name := fmt.Sprintf("d/f%02d", k)
		data := bytes.Repeat([]byte(fmt.Sprintf("file %d;", k)), 1+k*200)
		want[name] = data
		if err := os.WriteFile(m.path(name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	syncDir(t, m.path("d"))
	before := serverCallsByProc(t, reg)
	for name, data := range want {
		if got, err := os.ReadFile(m.path(name)); err != nil || !bytes.Equal(got, data) {
			t.Errorf("the mount reads %s: %d bytes, %v; want %d", name, len(got), err, len(data))
		}
	}
	for p, v := range callsSince(t, reg, before) {
		t.Errorf("reading back %d files reintegrated with their data cost %v %s calls; want none", n, v, p)
	}
	// The server's files hold the data (a local process's read of one
	// calls the mount back first: it holds the file open for writing).
	for name, data := range want {
		if got, err := os.ReadFile(e.path(name)); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("the server's %s after the read-back: %d bytes, %v; want %d", name, len(got), err, len(data))
		}
	}
	b := newSNFSMount(t, e, "permits-data-readback-b", "", time.Hour)
	if got, err := os.ReadFile(b.path("d/f00")); err != nil || !bytes.Equal(got, want["d/f00"]) {
		t.Errorf("another mount reads d/f00: %q, %v", got, err)
	}
	// A write on the mount after the read-back stays in its cache; the
	// other mount's open calls it back and reads it.
	if err := os.WriteFile(m.path("d/f01"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(b.path("d/f01")); err != nil || string(got) != "changed" {
		t.Errorf("another mount reads d/f01 after the mount wrote it: %q, %v; want %q", got, err, "changed")
	}
	if got, err := os.ReadFile(m.path("d/f01")); err != nil || string(got) != "changed" {
		t.Errorf("the mount reads d/f01 after the other mount: %q, %v", got, err)
	}
}

// TestMountSNFSPermitsDataReadBackKilled: a mount killed with SIGKILL after
// the reintegration that stored its small files and kept their data cached
// (and after reading them back from the cache) loses nothing: the server
// has every byte, and a remount with the same cache directory reads them.
func TestMountSNFSPermitsDataReadBackKilled(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	s := newServeProc(t)
	permitsPre(t, s.path)
	flags := []string{"--permits=on", "--permit-data=on", "--disconnected=never"}
	a := startMount(t, s, "", "", flags...)
	if _, err := os.ReadDir(a.path("d")); err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{
		"small":   []byte("small"),
		"empty":   {},
		"middle":  storeFile(1, 30000),
		"largest": storeFile(2, snfs1.StoreMax),
	}
	for n, w := range want {
		if err := os.WriteFile(a.path("d/"+n), w, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	syncDir(t, a.path("d"))
	checkFiles(t, "the mount after the reintegration", func(n string) ([]byte, error) { return os.ReadFile(a.path(n)) }, want)
	a.kill9()
	checkFiles(t, "the server after the kill", func(n string) ([]byte, error) { return os.ReadFile(s.path(n)) }, want)
	b := startMount(t, s, a.dir, a.cacheDir, flags...)
	checkFiles(t, "the remount", func(n string) ([]byte, error) { return os.ReadFile(b.path(n)) }, want)
}
