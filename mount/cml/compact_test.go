package cml

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"

	"snfs/nfs3"
	"snfs/snfs1"
)

// TestCompactLazy: a reintegration of one record (a created file's open
// reintegrates per file) leaves the segment it wrote in place, no new
// segment made; a reopen finds the state those frames hold (nothing to
// send, the made objects' handles, the LSNs going on); once the segment
// written is half used, or after a reopen left two segments, the next
// reintegration compacts the log into one segment again.
func TestCompactLazy(t *testing.T) {
	dir := testDir(t)
	const segBytes = 16 << 10
	l, err := Open(dir, Options{SegmentBytes: segBytes})
	if err != nil {
		t.Fatal(err)
	}
	srv := &fakeServer{}
	root := snfs1.ObjRef{FH: nfs3.FH("root")}
	reint := func(l *Log, name string) uint64 {
		t.Helper()
		lsn, err := l.AppendLazy(createIn(root, name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Reintegrate(context.Background(), srv, nil); err != nil {
			t.Fatal(err)
		}
		return lsn
	}
	before := segments(t, dir)
	first := reint(l, "f0")
	if got := segments(t, dir); !slices.Equal(got, before) {
		t.Fatalf("one record's reintegration rewrote the log: segments %v, were %v", got, before)
	}
	var lsns []uint64
	for i := 1; i < 5; i++ {
		lsns = append(lsns, reint(l, fmt.Sprintf("f%d", i)))
	}
	if got := segments(t, dir); !slices.Equal(got, before) {
		t.Fatalf("five small reintegrations rewrote the log: segments %v, were %v", got, before)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	// Reopened: the acknowledged frames replay to an empty log that knows
	// the handles it was given and does not reuse an LSN.
	l = openLog(t, dir, Options{SegmentBytes: segBytes})
	if st := l.Stats(); st.Records != 0 {
		t.Fatalf("reopened: %d records to send, want 0", st.Records)
	}
	for _, lsn := range append([]uint64{first}, lsns...) {
		if fh, ok := l.Handle(lsn); !ok || string(fh) != fmt.Sprintf("H%d", lsn) {
			t.Fatalf("reopened: handle of %d = %q, %v", lsn, fh, ok)
		}
	}
	if n := len(segments(t, dir)); n != 2 {
		t.Fatalf("reopened: %d segments, want 2 (the old and the new one it writes to)", n)
	}
	next := reint(l, "g0")
	if next <= lsns[len(lsns)-1] {
		t.Fatalf("LSN %d after a reopen, not above %d", next, lsns[len(lsns)-1])
	}
	if n := len(segments(t, dir)); n != 1 {
		t.Fatalf("the reintegration after a reopen left %d segments, want 1 (compacted)", n)
	}

	// Filling the segment past half compacts it at the next reintegration.
	seg := segments(t, dir)[0]
	for i := 0; ; i++ {
		reint(l, fmt.Sprintf("long-name-to-fill-the-segment-%04d", i))
		if s := segments(t, dir); len(s) != 1 || s[0] != seg {
			break
		}
		if i > segBytes {
			t.Fatal("the segment was never compacted")
		}
	}
	if n := len(segments(t, dir)); n != 1 {
		t.Fatalf("%d segments after compaction, want 1", n)
	}
	st, err := os.Stat(segments(t, dir)[0])
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() > 2*segBytes {
		t.Fatalf("compacted segment of %d bytes", st.Size())
	}
}
