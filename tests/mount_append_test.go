package tests

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"snfs/mount/cachemgr"
	"snfs/mount/vfs"

	"golang.org/x/sys/unix"
)

// O_APPEND through two mounts of one export (issue 22, item 1). Without the
// FUSE write-back cache the kernel sends an append at the size it has cached,
// which is stale once the other mount has appended: the mount places appends
// itself (mount/vfs/append.go). nfs mode: sequential appends keep every byte
// (close-to-open, as the Linux NFS client); snfs mode: concurrent appends
// too, each whole (the server's APPEND for a write-shared file).

// appendOnce opens p O_APPEND (creating it), writes s in one write and closes.
func appendOnce(t *testing.T, p, s string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		f.Close()
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// appendLine is writer w's k-th line: its length varies with (w, k), so that
// a line written over another shows as a torn line, not as a duplicate.
func appendLine(w byte, k int) string {
	pad := int((uint64(w)*7919 + uint64(k)*104729) % 97)
	return fmt.Sprintf("%c%05d-%s\n", w, k, strings.Repeat(string(rune('a'+k%26)), pad))
}

// checkAppended checks that data holds, for each writer in counts, exactly
// its lines 0..counts[w]-1, each whole, in order among its own.
func checkAppended(t *testing.T, what string, data []byte, counts map[byte]int) {
	t.Helper()
	next := map[byte]int{}
	lines := strings.SplitAfter(string(data), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	bad := 0
	for i, l := range lines {
		w := byte(0)
		if len(l) > 0 {
			w = l[0]
		}
		want := ""
		if _, ok := counts[w]; ok {
			want = appendLine(w, next[w])
		}
		if l != want {
			if bad++; bad <= 5 {
				t.Errorf("%s: line %d is %.40q, want %.40q", what, i, l, want)
			}
			continue
		}
		next[w]++
	}
	for w, n := range counts {
		if next[w] != n {
			t.Errorf("%s: %d whole lines of writer %c in order, want %d (%d lines, %d bytes in all)",
				what, next[w], w, n, len(lines), len(data))
		}
	}
}

// testAppendSequential: the sequence (B has read the file, so its
// kernel caches the old size), then appends alternating between the two
// mounts in a seeded order, each mount reading the file now and then: every
// byte stays, in order.
func testAppendSequential(t *testing.T, a, b, export string) {
	pa, pb := filepath.Join(a, "w"), filepath.Join(b, "w")
	if err := os.WriteFile(pa, []byte("base\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := string(mustRead(t, pb)); got != "base\n" {
		t.Fatalf("B reads %q", got)
	}
	appendOnce(t, pa, "A1\n")
	appendOnce(t, pb, "B1\n")
	for _, p := range []string{pa, pb} {
		if got := string(mustRead(t, p)); got != "base\nA1\nB1\n" {
			t.Fatalf("%s reads %q after A and B appended, want %q", p, got, "base\nA1\nB1\n")
		}
	}
	want := []byte("base\nA1\nB1\n")
	rng := rand.New(rand.NewPCG(22, 1))
	for k := 0; k < 60; k++ {
		p, other := pa, pb
		if rng.IntN(2) == 1 {
			p, other = pb, pa
		}
		s := appendLine(byte('a'+rng.IntN(2)), k)
		appendOnce(t, p, s)
		want = append(want, s...)
		if rng.IntN(3) == 0 {
			if got := mustRead(t, other); !bytes.Equal(got, want) {
				t.Fatalf("append %d: the other mount reads %d bytes, want %d", k, len(got), len(want))
			}
		}
	}
	for _, p := range []string{pa, pb} {
		if got := mustRead(t, p); !bytes.Equal(got, want) {
			t.Fatalf("%s: %d bytes after the appends, want %d:\n%q", p, len(got), len(want), got)
		}
	}
	if export != "" {
		if got := mustRead(t, export); !bytes.Equal(got, want) {
			t.Fatalf("the export holds %d bytes, want %d", len(got), len(want))
		}
	}
	// A file made by an O_APPEND open (the kernel's CREATE), then appended
	// to from the other mount, whose kernel saw it empty.
	na, nb := filepath.Join(a, "new"), filepath.Join(b, "new")
	appendOnce(t, na, "made\n")
	if got := string(mustRead(t, nb)); got != "made\n" {
		t.Fatalf("B reads %q", got)
	}
	appendOnce(t, na, "A\n")
	appendOnce(t, nb, "B\n")
	if got := string(mustRead(t, na)); got != "made\nA\nB\n" {
		t.Fatalf("A reads %q, want %q", got, "made\nA\nB\n")
	}
}

// TestMountAppendTwoMounts: sequential appends from two nfs-mode mounts.
func TestMountAppendTwoMounts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	a, b := newMount(t, e), newMount(t, e)
	testAppendSequential(t, a.dir, b.dir, e.path("w"))
}

// TestMountSNFSAppendTwoMounts: the same with two snfs-mode mounts: each
// append's open calls the other mount back (its dirty appends are written
// back first), or, when the other keeps the file open, both write through.
func TestMountSNFSAppendTwoMounts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	a := newSNFSMount(t, e, "A", "", time.Hour)
	b := newSNFSMount(t, e, "B", "", time.Hour)
	testAppendSequential(t, a.dir, b.dir, "")
	// B keeps an O_APPEND descriptor open (the file is write-shared while A
	// opens it too): appends through it still land after A's.
	fb, err := os.OpenFile(b.path("w"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	before := mustRead(t, a.path("w"))
	appendOnce(t, a.path("w"), "A2\n")
	if _, err := fb.WriteString("B2\n"); err != nil {
		t.Fatal(err)
	}
	if err := fb.Close(); err != nil {
		t.Fatal(err)
	}
	want := string(before) + "A2\nB2\n"
	if got := string(mustRead(t, a.path("w"))); got != want {
		t.Fatalf("A reads %q at the end, want %q", got[max(0, len(got)-20):], want[len(want)-20:])
	}
}

// TestMountAppendAfterLearnedSize: nfs mode. B holds an O_APPEND descriptor;
// A appends and closes; B opens the file (close-to-open: the open learns the
// new size from the server) and closes it without reading. B's next append
// through its old descriptor lands at that size, not at the size B's kernel
// still has.
func TestMountAppendAfterLearnedSize(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	a, b := newMount(t, e), newMount(t, e)
	pa, pb := filepath.Join(a.dir, "log"), filepath.Join(b.dir, "log")
	appendOnce(t, pa, "first\n")
	fb, err := os.OpenFile(pb, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	if _, err := fb.WriteString("B0\n"); err != nil {
		t.Fatal(err)
	}
	if err := fb.Sync(); err != nil {
		t.Fatal(err)
	}
	appendOnce(t, pa, "second line from A\n")
	f, err := os.Open(pb)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := fb.WriteString("B1\n"); err != nil {
		t.Fatal(err)
	}
	if err := fb.Close(); err != nil {
		t.Fatal(err)
	}
	want := "first\nB0\nsecond line from A\nB1\n"
	for _, p := range []string{pa, e.path("log")} {
		if got := string(mustRead(t, p)); got != want {
			t.Fatalf("%s reads %q, want %q", p, got, want)
		}
	}
}

// testAppendConcurrent: writers append lines at the same time, writer w
// through the mount at dirs[w]; perOpen: each line is an open, a write and a
// close, else each writer keeps one descriptor, all opened (one after the
// other) before the first append. Every line must stay whole.
func testAppendConcurrent(t *testing.T, dirs []string, lines int, perOpen bool, export string) {
	name := fmt.Sprintf("c%v", perOpen)
	if err := os.WriteFile(filepath.Join(dirs[0], name), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fds := make([]*os.File, len(dirs))
	if !perOpen {
		for k, d := range dirs {
			f, err := os.OpenFile(filepath.Join(d, name), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			fds[k] = f
		}
	}
	counts := map[byte]int{}
	var wg sync.WaitGroup
	errs := make(chan error, len(dirs))
	for k, d := range dirs {
		w := byte('A' + k)
		counts[w] = lines
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- appendLines(filepath.Join(d, name), fds[k], w, lines, perOpen)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range dirs {
		checkAppended(t, d, mustRead(t, filepath.Join(d, name)), counts)
	}
	if export != "" {
		checkAppended(t, "export", mustRead(t, filepath.Join(export, name)), counts)
	}
}

// appendLines appends writer w's lines to p: through f, or (f nil) through a
// descriptor opened for each line (perOpen) or for all of them.
func appendLines(p string, f *os.File, w byte, lines int, perOpen bool) error {
	for k := 0; k < lines; k++ {
		if f == nil {
			var err error
			if f, err = os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0); err != nil {
				return err
			}
		}
		if _, err := f.WriteString(appendLine(w, k)); err != nil {
			f.Close()
			return fmt.Errorf("writer %c, line %d: %w", w, k, err)
		}
		if perOpen || k == lines-1 {
			if err := f.Close(); err != nil {
				return fmt.Errorf("writer %c, close after line %d: %w", w, k, err)
			}
			f = nil
		}
	}
	return nil
}

// TestMountSNFSAppendConcurrent: two snfs-mode mounts, two writers on each,
// each keeping one O_APPEND descriptor (all opened before the first append),
// append 200 lines each at once: atomic appends across clients, as on a
// local disk (every line kept, each whole), on the mounts and on the server.
func TestMountSNFSAppendConcurrent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	a := newSNFSMount(t, e, "A", "", time.Hour)
	b := newSNFSMount(t, e, "B", "", time.Hour)
	testAppendConcurrent(t, []string{a.dir, b.dir, a.dir, b.dir}, 200, false, "")
	for _, m := range []*snfsMount{a, b} {
		if err := m.v.Sync(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	counts := map[byte]int{'A': 200, 'B': 200, 'C': 200, 'D': 200}
	checkAppended(t, "export", mustRead(t, e.path("cfalse")), counts)
}

// TestMountSNFSAppendOpenPerLine: the same with an open, one write and a
// close per line (`echo line >> f` from two machines): the file goes from
// cached to write-shared and back under the appends, so OPEN answers and
// callbacks cross all the time. Needs the fix of issue 22 item 3 (a callback
// served before the answer of an OPEN that came ahead of it: that OPEN must
// not cache), without which a mount appended into its cache while another
// appended through the server.
func TestMountSNFSAppendOpenPerLine(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	a := newSNFSMount(t, e, "A", "", time.Hour)
	b := newSNFSMount(t, e, "B", "", time.Hour)
	testAppendConcurrent(t, []string{a.dir, b.dir, a.dir, b.dir}, 60, true, "")
}

// TestMountAppendConcurrentOneMount: nfs mode, four writers on one mount:
// one client's appends never overwrite each other.
func TestMountAppendConcurrentOneMount(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	a := newMount(t, e)
	testAppendConcurrent(t, []string{a.dir, a.dir, a.dir, a.dir}, 200, false, e.dir)
}

// TestMountAppendFlagCleared: O_APPEND cleared with fcntl(F_SETFL) makes the
// descriptor's writes go where the kernel puts them again (its offset), and
// set again, to the end.
func TestMountAppendFlagCleared(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	a := newMount(t, e)
	p := filepath.Join(a.dir, "f")
	if err := os.WriteFile(p, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	if _, err := unix.Write(fd, []byte("end")); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Pwrite(fd, []byte("AB"), 2); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, unix.O_APPEND); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Pwrite(fd, []byte("!"), 0); err != nil { // O_APPEND: at the end, whatever the offset
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := string(mustRead(t, e.path("f"))), "01AB456789end!"; got != want {
		t.Fatalf("the file holds %q, want %q", got, want)
	}
}

// TestMountSNFSAppendWithWriter: on one snfs-mode mount, a file cached here
// is open O_APPEND (through the mount) when another process opens it for
// writing: that open does not pass through (its writes would move the cache
// file's end behind the mount's back), so an append after its write lands
// after it. A read open passes through as before once the appender is gone.
func TestMountSNFSAppendWithWriter(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	a := newSNFSMount(t, e, "A", "", time.Hour)
	p := a.path("f")
	if err := os.WriteFile(p, []byte("start\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The kernel sends the RELEASE of WriteFile's open after its close
	// returned: an open of the file that passed through and is still
	// there when q opens is one q joins (append.go), as w then does.
	waitReleased(t, a.v, p)
	q, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if _, err := q.WriteString("q1\n"); err != nil {
		t.Fatal(err)
	}
	before := cachemgr.StatsOf(a.v).PassthroughOpens.Load()
	w, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.WriteAt([]byte("w-extends\n"), 9); err != nil {
		t.Fatal(err)
	}
	if _, err := q.WriteString("q2\n"); err != nil {
		t.Fatal(err)
	}
	if n := cachemgr.StatsOf(a.v).PassthroughOpens.Load() - before; n != 0 {
		t.Errorf("%d opens passed through while an O_APPEND open was there", n)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	want := "start\nq1\nw-extends\nq2\n"
	if got := string(mustRead(t, p)); got != want {
		t.Fatalf("the file reads %q, want %q", got, want)
	}
}

// waitReleased waits until the mount whose FS is v has no open of the file
// at path (the kernel's RELEASE of a closed descriptor is sent after the
// close returns).
func waitReleased(t *testing.T, v *vfs.FS, path string) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		v.Mu.Lock()
		var of []*vfs.Inode
		for _, i := range v.Inodes {
			if i.Ino().Ino == st.Ino {
				of = append(of, i)
			}
		}
		v.Mu.Unlock()
		open := false
		for _, i := range of {
			i.Mu.Lock()
			open = open || i.Opens > 0
			i.Mu.Unlock()
		}
		if !open {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still open on the mount 10 s after its close", path)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
