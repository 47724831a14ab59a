package nsm

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// stateDir is a fresh directory on disk (not tmpfs), removed after the test.
func stateDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "snfs-nsm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func fileIs(t *testing.T, path, want string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != want {
		t.Fatalf("%s holds %q, want %q", path, b, want)
	}
}

// TestNextState: the first start is state 3 (as a fresh rpc.statd's), each
// later start the next odd number, each kept in the file (and nothing else
// left in the directory).
func TestNextState(t *testing.T) {
	dir := stateDir(t)
	path := filepath.Join(dir, "state")
	if _, err := ReadState(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ReadState before any start: %v", err)
	}
	for _, want := range []int32{3, 5, 7, 9} {
		got, err := NextState(path)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("NextState = %d, want %d", got, want)
		}
		if r, err := ReadState(path); err != nil || r != want {
			t.Fatalf("ReadState = %d, %v; want %d", r, err, want)
		}
	}
	fileIs(t, path, "9\n")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != "state" {
		t.Fatalf("directory holds %v, want only the state file", ents)
	}
}

// TestNextStateConvention: an even number (the host marked down) becomes odd
// before the start's step of two, as rpc.statd does; the largest int32 wraps
// to 1; a temporary file left by a crash in the middle of a write is
// overwritten, and the number is read from the state file only.
func TestNextStateConvention(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int32
	}{
		{"4\n", 7},
		{"5\n", 7},
		{"1\n", 3},
		{"2147483645\n", 2147483647},
		{"2147483647\n", 1},
		{"2147483646\n", 1},
		{"9", 11}, // no newline: written by hand
	} {
		dir := stateDir(t)
		path := filepath.Join(dir, "state")
		if err := os.WriteFile(path, []byte(c.in), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path+".tmp", []byte("garbage from a crash"), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := NextState(path)
		if err != nil || got != c.want {
			t.Fatalf("%q: NextState = %d, %v; want %d", c.in, got, err, c.want)
		}
		if _, err := os.Stat(path + ".tmp"); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%q: temporary file left: %v", c.in, err)
		}
	}
}

// TestNextStateBadFile: a file that holds no state number is an error, and
// NextState leaves it as it is.
func TestNextStateBadFile(t *testing.T) {
	for _, in := range []string{"", "\n", "abc\n", "0\n", "-3\n", "2147483648\n", "3\n\n", " 3\n"} {
		path := filepath.Join(stateDir(t), "state")
		if err := os.WriteFile(path, []byte(in), 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := NextState(path); !errors.Is(err, ErrBadState) {
			t.Fatalf("%q: NextState = %d, %v; want ErrBadState", in, got, err)
		}
		fileIs(t, path, in)
	}
}

// TestNextStateNoDir: a state directory that does not exist is an error, not
// a state number.
func TestNextStateNoDir(t *testing.T) {
	path := filepath.Join(stateDir(t), "missing", "state")
	if got, err := NextState(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("NextState = %d, %v; want ErrNotExist", got, err)
	}
}
