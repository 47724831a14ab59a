package tests

import (
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestMountNFSLockGrantAfterRelookup: a lock grant drops the kernel's pages
// of the file even after the file was looked up again while open (here by a
// second name, a hard link, which makes the mount answer LOOKUP with the
// same file). go-fuse keeps the node it already has for a file looked up
// again; the mount once recorded the new, discarded one for its
// invalidations, which the kernel then refused (ENOENT), so that a reader
// kept the pages it had cached before another mount's write under the lock:
// the SQLite counter through two nfs mode mounts lost transactions
// (TestMountNFSSQLite).
func TestMountNFSLockGrantAfterRelookup(t *testing.T) {
	t.Parallel()
	h := newNLMMountHost(t)
	e := newNLMMountEnv(t, h)
	a := newNLMMount(t, e, h, false, time.Hour)
	b := newNLMMount(t, e, h, false, time.Hour)
	if err := os.WriteFile(a.path("db"), []byte("old data"), 0o666); err != nil {
		t.Fatal(err)
	}
	fb := openRW(t, b.path("db"))
	buf := make([]byte, 8)
	if _, err := fb.ReadAt(buf, 0); err != nil || string(buf) != "old data" {
		t.Fatalf("B's first read: %q %v", buf, err)
	}
	// The same file looked up again through B while B has it open.
	if err := os.Link(a.path("db"), a.path("link")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(b.path("link")); err != nil {
		t.Fatal(err)
	}
	fa := openRW(t, a.path("db"))
	if err := setlk(fa, unix.F_WRLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := fa.WriteAt([]byte("new data"), 0); err != nil {
		t.Fatal(err)
	}
	if err := setlk(fa, unix.F_UNLCK, 0, 0); err != nil { // written back before the unlock
		t.Fatal(err)
	}
	if err := setlk(fb, unix.F_RDLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := fb.ReadAt(buf, 0); err != nil || string(buf) != "new data" {
		t.Fatalf("B's read under its lock granted after A's write: %q %v, want \"new data\"", buf, err)
	}
}
