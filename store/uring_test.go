package store

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

func newTestRing(t *testing.T) *ring {
	t.Helper()
	r, err := newRing(8)
	if err != nil {
		t.Skipf("no io_uring here (%v): flushes are plain fsync calls", err)
	}
	return r
}

// TestRingFsync: a flush through the ring is the system call's: it succeeds on a
// file, fails with the call's errno on a descriptor it cannot flush, and many at
// once (more than the ring holds) each get their own result.
func TestRingFsync(t *testing.T) {
	r := newTestRing(t)
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("data"); err != nil {
		t.Fatal(err)
	}
	if err := r.fsync(int(f.Fd()), false); err != nil {
		t.Fatalf("fsync: %v", err)
	}
	if err := r.fsync(int(f.Fd()), true); err != nil {
		t.Fatalf("fdatasync: %v", err)
	}
	if err := r.fsync(-1, false); !errors.Is(err, unix.EBADF) {
		t.Fatalf("fsync of -1: %v, want EBADF", err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 50)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fd := int(f.Fd())
			if i%2 == 1 {
				fd = -1
			}
			errs[i] = r.fsync(fd, i%4 == 0)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if want := i%2 == 1; (err != nil) != want || (want && !errors.Is(err, unix.EBADF)) {
			t.Fatalf("flush %d: %v", i, err)
		}
	}
	r.close()
	if err := r.fsync(int(f.Fd()), false); err != errNotFlushed {
		t.Fatalf("fsync after close: %v, want errNotFlushed", err)
	}
}
