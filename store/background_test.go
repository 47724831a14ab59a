package store

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// closed reports whether fd is no longer open.
func closed(fd int) bool {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	return errors.Is(err, unix.EBADF)
}

func waitClosed(t *testing.T, what string, fd int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !closed(fd); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: descriptor %d still open", what, fd)
		}
		time.Sleep(time.Millisecond)
	}
}

// cachedFD looks name up in dir and resolves it, so the store caches a descriptor
// of it, and releases it: its handle and that descriptor.
func cachedFD(t *testing.T, s *Store, dir *Node, name string) ([]byte, int) {
	t.Helper()
	n := resolveChild(t, s, dir, name)
	defer n.Release()
	return n.Handle, n.FD()
}

// TestRemovedObjectsClosedInBackground: on a file system that discards, removing a
// file with blocks or a directory leaves its descriptor to the background
// goroutine, which closes it soon after; the handle is stale at once; once the
// goroutine has stopped, a remover closes its own. Elsewhere the remover closes it
// before it returns.
func TestRemovedObjectsClosedInBackground(t *testing.T) {
	s, root, exp := newTestExport(t)
	root.Export.slowFree = true
	if err := os.WriteFile(filepath.Join(exp, "f"), make([]byte, 64<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(exp, "d"), 0o755)

	for _, c := range []struct {
		name   string
		remove func() error
	}{
		{"f", func() error { return s.Remove(root, "f") }},
		{"d", func() error { return s.Rmdir(root, "d") }},
	} {
		fh, fd := cachedFD(t, s, root, c.name)
		if err := c.remove(); err != nil {
			t.Fatalf("remove %s: %v", c.name, err)
		}
		if _, err := s.Resolve(fh); !errors.Is(err, ErrStale) {
			t.Fatalf("%s: handle after removal: %v, want stale", c.name, err)
		}
		waitClosed(t, c.name, fd)
	}

	// Once the background goroutine has stopped, a remover closes its own.
	s.bg.stop()
	if err := os.WriteFile(filepath.Join(exp, "g"), make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	_, fd := cachedFD(t, s, root, "g")
	if err := s.Remove(root, "g"); err != nil {
		t.Fatal(err)
	}
	if !closed(fd) {
		t.Fatal("remove after the background goroutine stopped left the descriptor open")
	}

	s2, root2, exp2 := newTestExport(t)
	root2.Export.slowFree = false
	if err := os.WriteFile(filepath.Join(exp2, "f"), make([]byte, 64<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	_, fd = cachedFD(t, s2, root2, "f")
	if err := s2.Remove(root2, "f"); err != nil {
		t.Fatal(err)
	}
	if !closed(fd) {
		t.Fatal("remove on a file system without discard left the descriptor open")
	}
}
