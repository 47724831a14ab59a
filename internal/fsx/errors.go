package fsx

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
)

// Error is how Run fails after it has started: a mismatch (Err is a *Mismatch),
// an I/O error from the file system under test, a failed external check, or the
// context ending. It carries what a replay needs.
type Error struct {
	Seed   uint64
	Op     Op     // the operation that failed (N is its number)
	Ops    int    // the run's length
	Log    []Op   // the last operations, Op last
	Replay string // test flags of TestFsxReplay that rerun this sequence up to Op (then its final check)
	Err    error
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "fsx: seed %d, op %d of %d (%s): %v", e.Seed, e.Op.N, e.Ops,
		strings.TrimSpace(e.Op.String()), e.Err)
	fmt.Fprintf(&b, "\nlast %d operations:", len(e.Log))
	for _, op := range e.Log {
		fmt.Fprintf(&b, "\n  %s", op)
	}
	fmt.Fprintf(&b, "\nreplay: go test -race -v -run TestFsxReplay snfs/internal/fsx %s [-fsx.dir=DIR]", e.Replay)
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Mismatch is a difference between the model and the file: in a read, in the
// file's size, or in a whole-file check.
type Mismatch struct {
	What     string // "read", "mapread", "size", "check", "external ..."
	Off      int64  // start of the compared range
	Expected int64  // bytes expected (size mismatch: the expected size)
	Actual   int64  // bytes got (size mismatch: the file's size)
	First    int64  // offset of the first differing (or missing) byte
	Last     int64  // offset of the last one
	Bad      int64  // how many bytes differ or are missing or extra
	// WindowOff is the offset of ExpectedWindow[0] and ActualWindow[0]: up to 32
	// bytes around First (ActualWindow is shorter when the read was).
	WindowOff                    int64
	ExpectedWindow, ActualWindow []byte
	// Origin is the operation that last set the expected byte at First (0: not
	// known, or set by none).
	Origin int
}

func (m *Mismatch) Error() string {
	var b strings.Builder
	if m.What == "size" {
		fmt.Fprintf(&b, "mismatch: file size %#x (%d), expected %#x (%d)", m.Actual, m.Actual, m.Expected, m.Expected)
		return b.String()
	}
	fmt.Fprintf(&b, "mismatch in %s %#x..%#x at offset %#x (%d): %d bytes differ, last at %#x",
		m.What, m.Off, m.Off+m.Expected, m.First, m.First, m.Bad, m.Last)
	if m.Actual != m.Expected {
		fmt.Fprintf(&b, "; got %#x bytes, expected %#x", m.Actual, m.Expected)
	}
	if m.Origin > 0 {
		fmt.Fprintf(&b, "; the expected byte was last set by op %d", m.Origin)
	}
	for i := 0; i < max(len(m.ExpectedWindow), len(m.ActualWindow)); i += 16 {
		fmt.Fprintf(&b, "\n  %#08x expected:%s\n             actual:%s", m.WindowOff+int64(i),
			hexRow(m.ExpectedWindow, i), hexRow(m.ActualWindow, i))
	}
	return b.String()
}

func hexRow(p []byte, from int) string {
	var b strings.Builder
	for i := from; i < from+16 && i < len(p); i++ {
		fmt.Fprintf(&b, " %02x", p[i])
	}
	return b.String()
}

// Compare compares bytes read from the file at off with the expected ones and
// returns nil when they are equal (same length, same bytes).
func Compare(what string, expected, actual []byte, off int64) *Mismatch {
	if bytes.Equal(expected, actual) {
		return nil
	}
	n := min(len(expected), len(actual))
	first, last, bad := -1, -1, 0
	for i := 0; i < n; i++ {
		if expected[i] != actual[i] {
			if first < 0 {
				first = i
			}
			last, bad = i, bad+1
		}
	}
	if len(expected) != len(actual) {
		if first < 0 {
			first = n
		}
		last = max(len(expected), len(actual)) - 1
		bad += max(len(expected), len(actual)) - n
	}
	if first < 0 {
		return nil
	}
	// The window: 32 bytes from a 16-aligned file offset about 8 bytes before.
	w := max(int((off+int64(first)-8)&^15-off), 0)
	m := &Mismatch{
		What: what, Off: off, Expected: int64(len(expected)), Actual: int64(len(actual)),
		First: off + int64(first), Last: off + int64(last), Bad: int64(bad), WindowOff: off + int64(w),
	}
	m.ExpectedWindow = append([]byte(nil), expected[min(w, len(expected)):min(w+32, len(expected))]...)
	m.ActualWindow = append([]byte(nil), actual[min(w, len(actual)):min(w+32, len(actual))]...)
	return m
}

// CompareFile returns an ExternalCheck that reads the whole file at path (the
// same file seen another way: through the server's export directory, a second
// mount) and compares it with the model.
func CompareFile(path string) func(ctx context.Context, s Snapshot) error {
	return func(ctx context.Context, s Snapshot) error {
		got, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("fsx: external check: %w", err)
		}
		if m := Compare("external "+path, s.Data, got, 0); m != nil {
			return m
		}
		return nil
	}
}
