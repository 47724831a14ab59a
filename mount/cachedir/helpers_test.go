package cachedir

import (
	"bytes"
	"errors"
	"os"
	"testing"
)

// testDir is a fresh directory on the local disk (not tmpfs).
func testDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "cachedir-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func openCache(t *testing.T, dir string, limit int64) *Cache {
	t.Helper()
	c, err := Open(dir, limit)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustFile(t *testing.T, c *Cache, h string) *File {
	t.Helper()
	f, err := c.File([]byte(h))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// readAll reads [off, off+n) and fails the test unless it is all cached.
func readAll(t *testing.T, f *File, off, n int64) []byte {
	t.Helper()
	p := make([]byte, n)
	got, err := f.ReadAt(p, off)
	if err != nil || int64(got) != n {
		t.Fatalf("ReadAt(%d, %d) = %d, %v", off, n, got, err)
	}
	return p
}

func missingOf(err error) *MissingError {
	var me *MissingError
	if errors.As(err, &me) {
		return me
	}
	return nil
}

func pattern(seed byte, n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = seed + byte(i*7)
	}
	return p
}

func equalBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("%s: differs at byte %d (len %d vs %d)", what, i, len(got), len(want))
	}
}
