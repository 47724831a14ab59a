package store

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestResolveFor: one call parses and MAC-checks a handle once, tells the admission
// check which export the handle belongs to before anything is opened, and returns a
// node of that export; a refusal, a forged handle and a deleted object each stop it.
func TestResolveFor(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (open_by_handle_at)")
	}
	base, err := os.MkdirTemp("/var/tmp", "snfs-resolve-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	exp := filepath.Join(base, "export")
	if err := os.MkdirAll(exp, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(exp, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Open(filepath.Join(base, "state"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	e, err := s.AddExport(exp)
	if err != nil {
		t.Fatal(err)
	}
	root, err := s.Resolve(e.Root)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Release()
	fh, _, err := s.Lookup(root, "f")
	if err != nil {
		t.Fatal(err)
	}

	before := s.HandleChecks()
	var admitted *Export
	n, err := s.ResolveFor(fh, func(x *Export) error { admitted = x; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if got := s.HandleChecks() - before; got != 1 {
		t.Errorf("ResolveFor checked the handle %d times, want 1", got)
	}
	if admitted != e || n.Export != e {
		t.Errorf("admitted %v, node in %v, want export %v", admitted, n.Export, e)
	}
	n.Release()

	refused := errors.New("refused")
	before = s.HandleChecks()
	if _, err := s.ResolveFor(fh, func(*Export) error { return refused }); err != refused {
		t.Errorf("refused admission: %v, want the admission's own error", err)
	}
	if got := s.HandleChecks() - before; got != 1 {
		t.Errorf("a refused ResolveFor checked the handle %d times, want 1", got)
	}

	forged := append([]byte(nil), fh...)
	forged[len(forged)-1] ^= 1
	called := false
	if _, err := s.ResolveFor(forged, func(*Export) error { called = true; return nil }); !errors.Is(err, ErrBadHandle) {
		t.Errorf("forged handle: %v, want ErrBadHandle", err)
	}
	if called {
		t.Error("a forged handle reached the admission check")
	}

	if err := os.Remove(filepath.Join(exp, "f")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ResolveFor(fh, nil); !errors.Is(err, ErrStale) {
		t.Errorf("deleted object: %v, want ErrStale", err)
	}
}
