package tests

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestMountSNFSRecoverWrittenBack: files a mount wrote back (one of them
// fsync'd) seconds before it was killed with SIGKILL are held by the server
// exactly; a file it deleted is gone, and so is one deleted on the server
// after its write-back. The remount on the same cache directory makes no
// conflict copy of any of them (a conflict copy means that somebody else
// changed the file while this client held unsent data), and the server
// keeps every byte.
func TestMountSNFSRecoverWrittenBack(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	s := newServeProc(t)
	serverProcFiles(t, s, "a", "b", "c", "synced", "gone", "gone2")
	a := startMount(t, s, "", "", "--writeback-delay", "500ms", "--close-delay", "0")
	want := map[string][]byte{}
	for k, n := range []string{"a", "b", "c"} {
		want[n] = randBytes(uint64(100+k), 20000+k*70000)
		writeDurable(t, a.path(n), want[n])
	}
	f, err := os.OpenFile(a.path("synced"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	want["synced"] = randBytes(110, 5000)
	if _, err := f.Write(want["synced"]); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	writeDurable(t, a.path("gone"), randBytes(111, 3000))
	writeDurable(t, a.path("gone2"), randBytes(112, 3000))
	deadline := time.Now().Add(30 * time.Second)
	for n, d := range want {
		for !bytes.Equal(mustRead(t, s.path(n)), d) {
			if time.Now().After(deadline) {
				t.Fatalf("%s was not written back within 30 s", n)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, n := range []string{"gone", "gone2"} {
		for st, err := os.Stat(s.path(n)); err != nil || st.Size() != 3000; st, err = os.Stat(s.path(n)) {
			if time.Now().After(deadline) {
				t.Fatalf("%s was not written back within 30 s", n)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if err := os.Remove(a.path("gone")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(s.path("gone2")); err != nil { // on the server: the mount is not told
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	a.kill9()
	b := startMount(t, s, a.dir, a.cacheDir)
	copies, _ := filepath.Glob(s.path("*.snfs-conflict-*"))
	if len(copies) != 0 {
		t.Errorf("conflict copies after the remount: %q; want none (nobody else changed the files)", copies)
	}
	if n := scrape(t, b.metrics, "snfs_client_conflicts_total"); n != 0 {
		t.Errorf("snfs_client_conflicts_total = %v; want 0", n)
	}
	for n, d := range want {
		if got := mustRead(t, s.path(n)); !bytes.Equal(got, d) {
			t.Errorf("%s: the server has %d bytes; want %d", n, len(got), len(d))
		}
		if got := mustRead(t, b.path(n)); !bytes.Equal(got, d) {
			t.Errorf("%s: the new mount reads %d bytes; want %d", n, len(got), len(d))
		}
	}
	for _, n := range []string{"gone", "gone2"} {
		if _, err := os.Stat(s.path(n)); err == nil {
			t.Errorf("%s exists again on the server", n)
		}
	}
}

// TestMountSNFSRecoverAfterOthersChange: a mount's write-backs that ended
// just before it was killed, after which another client (a plain NFSv3
// client) rewrote the files: f written back by fsync and closed, g written
// back for the other client's read (a callback). The remount must not take
// the other client's rewrite for a conflict with data the server had from
// this mount: each write-back's end reached the cache directory's index
// before the server was told the file was clean (the CLOSE, the callback's
// answer), so no copy is made, and the server keeps the other client's bytes.
func TestMountSNFSRecoverAfterOthersChange(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	s := newServeProc(t)
	a := startMount(t, s, "", "", "--close-delay", "0")
	ours := map[string][]byte{"f": randBytes(120, 40000), "g": randBytes(121, 50000)}
	f, err := os.OpenFile(a.path("f"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(ours["f"]); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	writeDurable(t, a.path("g"), ours["g"])
	if got := nfsReadAll(t, s, "g"); !bytes.Equal(got, ours["g"]) { // the callback writes g back
		t.Fatalf("g: the other client read %d bytes; want the mount's %d", len(got), len(ours["g"]))
	}
	theirs := map[string][]byte{"f": randBytes(122, 30000), "g": randBytes(123, 20000)}
	for n, d := range theirs {
		nfsRewrite(t, s, n, d)
	}
	a.kill9() // within the write-back loop's tick (a second)
	b := startMount(t, s, a.dir, a.cacheDir)
	if copies, _ := filepath.Glob(s.path("*.snfs-conflict-*")); len(copies) != 0 {
		t.Errorf("conflict copies after the remount: %q; want none (the mount's data had reached the server)", copies)
	}
	for n, d := range theirs {
		if got := mustRead(t, s.path(n)); !bytes.Equal(got, d) {
			t.Errorf("%s: the server has %d bytes; want the other client's %d", n, len(got), len(d))
		}
		if got := mustRead(t, b.path(n)); !bytes.Equal(got, d) {
			t.Errorf("%s: the new mount reads %d bytes; want the other client's %d", n, len(got), len(d))
		}
	}
}
