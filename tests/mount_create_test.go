package tests

import (
	"os"
	"path/filepath"
	"testing"
)

// testCreateTruncExisting: open(O_CREAT|O_TRUNC) of a name another client
// created after this mount cached its absence (a negative entry, so the
// kernel sends CREATE rather than OPEN) truncates the existing file, as
// POSIX says: the file holds what this open wrote, not that followed by the
// other client's tail.
func testCreateTruncExisting(t *testing.T, mnt, export string) {
	p := filepath.Join(mnt, "x")
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("stat of x before it exists: %v", err)
	}
	if err := os.WriteFile(filepath.Join(export, "x"), []byte("another client's longer content"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("short")); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got := string(mustRead(t, p)); got != "short" {
		t.Errorf("read through the mount: %q; want %q", got, "short")
	}
	if got := string(mustRead(t, filepath.Join(export, "x"))); got != "short" {
		t.Errorf("the export's file: %q; want %q", got, "short")
	}
}

func TestMountCreateTruncExisting(t *testing.T) {
	t.Parallel()
	inBothModes(t, testCreateTruncExisting)
}
