package store

import (
	"os"
	"path/filepath"
	"testing"
)

// newTestStore is the store tests' setup: a store (its state under a
// fresh directory on a disk file system, removed at the test's end) serving
// one export, made with files (name to content) in it. It skips the test
// when not root (open_by_handle_at needs it).
func newTestStore(t *testing.T, files map[string]string) (s *Store, e *Export, exp string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (open_by_handle_at)")
	}
	base, err := os.MkdirTemp("/var/tmp", "snfs-store-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	exp = filepath.Join(base, "export")
	if err := os.MkdirAll(exp, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(exp, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if s, err = Open(filepath.Join(base, "state")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if e, err = s.AddExport(exp); err != nil {
		t.Fatal(err)
	}
	return s, e, exp
}
