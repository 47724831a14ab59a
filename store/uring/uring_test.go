package uring_test

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"snfs/store/uring"
)

func newTestRing(t *testing.T) *uring.Ring {
	t.Helper()
	r, err := uring.New(8)
	if err != nil {
		t.Skipf("no io_uring here (%v): flushes are plain fsync calls", err)
	}
	return r
}

// TestRingFsync: a flush through the ring is the system call's: it succeeds on a
// file, fails with the call's errno on a descriptor it cannot flush, and many at
// once (more than the ring holds) each get their own result. After Close, flushes
// report ErrNotFlushed, for the caller to make them directly.
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
	if err := r.Fsync(int(f.Fd()), false); err != nil {
		t.Fatalf("fsync: %v", err)
	}
	if err := r.Fsync(int(f.Fd()), true); err != nil {
		t.Fatalf("fdatasync: %v", err)
	}
	if err := r.Fsync(-1, false); !errors.Is(err, unix.EBADF) {
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
			errs[i] = r.Fsync(fd, i%4 == 0)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if want := i%2 == 1; (err != nil) != want || (want && !errors.Is(err, unix.EBADF)) {
			t.Fatalf("flush %d: %v", i, err)
		}
	}
	r.Close()
	if err := r.Fsync(int(f.Fd()), false); err != uring.ErrNotFlushed {
		t.Fatalf("fsync after close: %v, want ErrNotFlushed", err)
	}
}

// TestRingCloseWaits: Close returns only after the flushes in flight have their
// results, so none is left waiting on a ring that is gone.
func TestRingCloseWaits(t *testing.T) {
	r := newTestRing(t)
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.Fsync(int(f.Fd()), false)
		}()
	}
	r.Close()
	wg.Wait() // every Fsync returned: none hangs on the closed ring
	for i, err := range errs {
		if err != nil && err != uring.ErrNotFlushed {
			t.Fatalf("flush %d across Close: %v", i, err)
		}
	}
}
