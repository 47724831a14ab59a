package rotlog

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestBounded: thousands of records through a 4 KiB limit leave at most two
// files of at most 4 KiB each, the newest records in them, whole and in order;
// a reopened log goes on where it was.
func TestBounded(t *testing.T) {
	dir, err := os.MkdirTemp("/var/tmp", "rotlog-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	p := filepath.Join(dir, "x.log")
	const limit = 4096
	w, err := Open(p, limit)
	if err != nil {
		t.Fatal(err)
	}
	const n = 5000
	for k := 0; k < n; k++ {
		if _, err := fmt.Fprintf(w, "record %d\n", k); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	names, _ := filepath.Glob(p + "*")
	if len(names) != 2 {
		t.Fatalf("files %v; want the log and one older generation", names)
	}
	cur, _ := os.ReadFile(p)
	old, _ := os.ReadFile(p + ".1")
	if len(cur) > limit || len(old) > limit {
		t.Fatalf("sizes %d and %d; want at most %d each", len(cur), len(old), limit)
	}
	all := append(old, cur...)
	if !bytes.HasSuffix(all, []byte(fmt.Sprintf("record %d\n", n-1))) {
		t.Fatalf("the log does not end with the last record: %q", all[max(0, len(all)-40):])
	}
	lines := bytes.Split(bytes.TrimSuffix(all, []byte("\n")), []byte("\n"))
	first := 0
	fmt.Sscanf(string(lines[0]), "record %d", &first)
	for k, l := range lines {
		if want := fmt.Sprintf("record %d", first+k); string(l) != want {
			t.Fatalf("line %d: %q; want %q (records whole and in order)", k, l, want)
		}
	}
	// Reopened: appends, and rotates at the same bound.
	w, err = Open(p, limit)
	if err != nil {
		t.Fatal(err)
	}
	for k := 0; k < 1000; k++ {
		fmt.Fprintf(w, "again %d\n", k)
	}
	w.Close()
	if fi, _ := os.Stat(p); fi.Size() > limit {
		t.Fatalf("reopened log of %d bytes; want at most %d", fi.Size(), limit)
	}
}
