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
	s, e, exp := newTestStore(t, map[string]string{"f": "x"})
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

// TestLookupHandleMatchesAttr: while a name is replaced by rename in a loop
// (an editor saving), every handle Lookup returns names the file whose
// attributes it returned with it, or a file already gone: never the file that
// replaced it (the handle cache would keep that handle under the old file's
// inode number and hand it out when the number is reused).
func TestLookupHandleMatchesAttr(t *testing.T) {
	s, e, exp := newTestStore(t, map[string]string{"f": "x"})
	f := filepath.Join(exp, "f")
	root, err := s.Resolve(e.Root)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Release()
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		tmp := filepath.Join(exp, ".f")
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if err := os.WriteFile(tmp, []byte("y"), 0o644); err != nil {
				done <- err
				return
			}
			if err := os.Rename(tmp, f); err != nil {
				done <- err
				return
			}
		}
	}()
	mismatched, resolved := 0, 0
	for i := 0; i < 20000; i++ {
		fh, st, err := s.Lookup(root, "f")
		if err != nil {
			continue // ENOENT cannot happen (rename replaces), but a failed lookup is not this test's
		}
		n, err := s.Resolve(fh)
		if errors.Is(err, ErrStale) {
			s.ForgetEntries(root)
			root.Refresh()
			continue
		}
		if err != nil {
			close(stop)
			t.Fatal(err)
		}
		resolved++
		if n.Stat.Ino != st.Ino {
			mismatched++
		}
		n.Release()
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if mismatched > 0 {
		t.Fatalf("%d of %d handles Lookup returned named another file than the attributes returned with them", mismatched, resolved)
	}
}
