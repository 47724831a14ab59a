package tests

import (
	"bytes"
	"io"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"snfs/mount/cachemgr"
)

// Lock handoff between mounts: what SQLite asks of a file system when two
// machines share a database in rollback-journal mode (TestMountSNFSSQLite).
// Under a lock, a process must see exactly what the last holder left: every
// byte, the size (SQLite reads the page count from fstat and takes a file
// shorter than its header says for a corrupt one), and the journal beside it
// there or gone as the holder left it.

// lockWait takes a lock of typ of all of f, waiting for it.
func lockWait(t *testing.T, f *os.File, typ int16) {
	t.Helper()
	fl := unix.Flock_t{Type: typ}
	if err := unix.FcntlFlock(f.Fd(), unix.F_SETLKW, &fl); err != nil {
		t.Fatalf("F_SETLKW: %v", err)
	}
}

// unlockAll lets all of f's locks go.
func unlockAll(t *testing.T, f *os.File) {
	t.Helper()
	fl := unix.Flock_t{Type: unix.F_UNLCK}
	if err := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &fl); err != nil {
		t.Fatalf("unlock: %v", err)
	}
}

// pinnedPair makes a file of 8192 bytes through mount A and opens it for
// reading and writing through A (whole in A's cache: it passes through),
// then through B: A becomes the file's pinned holder (its kernel goes on
// writing the cache file; each access is refreshed from the server). A has
// written a page under its lock, so that its cache file changed.
func pinnedPair(t *testing.T) (fa, fb *os.File, e *env) {
	t.Helper()
	e = newEnv(t, "rw,no_root_squash")
	a := newSNFSMount(t, e, "A", "", time.Hour)
	b := newSNFSMount(t, e, "B", "", time.Hour)
	if err := os.WriteFile(a.path("f"), randBytes(1, 8192), 0o644); err != nil {
		t.Fatal(err)
	}
	fa = openRW(t, a.path("f"))
	if _, err := io.ReadAll(fa); err != nil {
		t.Fatal(err)
	}
	fb = openRW(t, b.path("f"))
	lockWait(t, fa, unix.F_WRLCK)
	if _, err := fa.WriteAt(randBytes(2, 4096), 0); err != nil {
		t.Fatal(err)
	}
	if err := fa.Sync(); err != nil {
		t.Fatal(err)
	}
	unlockAll(t, fa)
	if n := cachemgr.StatsOf(a.v).Pinned.Load(); n != 1 {
		t.Fatalf("A is the pinned holder of %d files, want 1 (the test is about that mode)", n)
	}
	return fa, fb, e
}

// writeLocked writes data at off through f under a write lock, fsynced.
func writeLocked(t *testing.T, f *os.File, data []byte, off int64) {
	t.Helper()
	lockWait(t, f, unix.F_WRLCK)
	if _, err := f.WriteAt(data, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	unlockAll(t, f)
}

// TestMountSNFSLockSizeHandoff: a file whose pinned holder is mount A (its
// kernel reads and writes the cache file itself) shows under A's lock the
// size B gave it under B's lock: fstat reported the cache file's older size,
// which SQLite takes for a corrupt database ("database disk image is
// malformed": the page count in its header beyond the end of the file).
func TestMountSNFSLockSizeHandoff(t *testing.T) {
	t.Parallel()
	fa, fb, _ := pinnedPair(t)
	more := randBytes(3, 4096)
	writeLocked(t, fb, more, 8192)
	lockWait(t, fa, unix.F_WRLCK)
	defer unlockAll(t, fa)
	st, err := fa.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != 12288 {
		t.Errorf("A's fstat under its lock after B extended the file: size %d, want 12288", st.Size())
	}
	got := make([]byte, 4096)
	if _, err := fa.ReadAt(got, 8192); err != nil || !bytes.Equal(got, more) {
		t.Errorf("A reads B's extension under its lock: %v, same bytes %v", err, bytes.Equal(got, more))
	}
}
