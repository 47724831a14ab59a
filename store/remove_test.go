package store

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRemoveExport: once an export is removed its handles resolve to
// ErrStale and its flush to ErrStale; its root descriptors stay open while a
// call holds them and are closed when the last one lets go; the same path
// added again gives the same handles, which resolve again.
func TestRemoveExport(t *testing.T) {
	s, e, exp := newTestStore(t, nil)
	var want unix.Stat_t
	if err := unix.Stat(exp, &want); err != nil {
		t.Fatal(err)
	}
	// open: fd is still the export's directory (a closed number may have
	// been reused meanwhile, by the change notifier for one).
	open := func(fd int) bool {
		var st unix.Stat_t
		return unix.Fstat(fd, &st) == nil && st.Dev == want.Dev && st.Ino == want.Ino
	}

	if !e.hold() { // a call in flight using the root descriptors
		t.Fatal("hold on a served export failed")
	}
	s.RemoveExport(e)
	if _, err := s.Resolve(e.Root); !errors.Is(err, ErrStale) {
		t.Fatalf("resolve after removal: %v, want ErrStale", err)
	}
	if !open(e.rootFD) || !open(e.mountFD) {
		t.Fatal("the root descriptors were closed under a call holding them")
	}
	rootFD, mountFD := e.rootFD, e.mountFD
	e.drop()
	if open(rootFD) || open(mountFD) {
		t.Fatal("the root descriptors are still open after the last hold ended")
	}
	if e.hold() {
		t.Fatal("a hold on a removed export whose descriptors are closed succeeded")
	}
	if err := s.SyncExport(e); !errors.Is(err, ErrStale) {
		t.Fatalf("flush of a removed export: %v, want ErrStale", err)
	}
	s.RemoveExport(e) // again: nothing

	e2, err := s.AddExport(exp)
	if err != nil {
		t.Fatal(err)
	}
	if string(e2.Root) != string(e.Root) {
		t.Fatal("the export added again has another root handle")
	}
	n, err := s.Resolve(e.Root)
	if err != nil {
		t.Fatalf("the old root handle once the export is back: %v", err)
	}
	n.Release()
}
