package tests

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"snfs/mount/cachemgr"
)

// Lock handoff between mounts: what SQLite asks of a file system when two
// machines share a database in rollback-journal mode (TestMountSNFSSQLite).
// Under a lock, a process must see exactly what the last holder left: every
// byte, the size (SQLite reads the page count from fstat and takes a file
// shorter than its header says for a corrupt one), and the journal beside it
// there or gone as the holder left it.

// lockWait takes a lock of typ of all of f, waiting for it.
func lockWait(t *testing.T, f *os.File, typ int16) {
	t.Helper()
	fl := unix.Flock_t{Type: typ}
	if err := unix.FcntlFlock(f.Fd(), unix.F_SETLKW, &fl); err != nil {
		t.Fatalf("F_SETLKW: %v", err)
	}
}

// unlockAll lets all of f's locks go.
func unlockAll(t *testing.T, f *os.File) {
	t.Helper()
	fl := unix.Flock_t{Type: unix.F_UNLCK}
	if err := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &fl); err != nil {
		t.Fatalf("unlock: %v", err)
	}
}

// pinnedPair makes a file of 8192 bytes through mount A and opens it for
// reading and writing through A (whole in A's cache: it passes through),
// then through B: A becomes the file's pinned holder (its kernel goes on
// writing the cache file; each access is refreshed from the server). A has
// written a page under its lock, so that its cache file changed.
func pinnedPair(t *testing.T) (fa, fb *os.File, e *env) {
	t.Helper()
	e = newEnv(t, "rw,no_root_squash")
	a := newSNFSMount(t, e, "A", "", time.Hour)
	b := newSNFSMount(t, e, "B", "", time.Hour)
	if err := os.WriteFile(a.path("f"), randBytes(1, 8192), 0o644); err != nil {
		t.Fatal(err)
	}
	fa = openRW(t, a.path("f"))
	if _, err := io.ReadAll(fa); err != nil {
		t.Fatal(err)
	}
	fb = openRW(t, b.path("f"))
	lockWait(t, fa, unix.F_WRLCK)
	if _, err := fa.WriteAt(randBytes(2, 4096), 0); err != nil {
		t.Fatal(err)
	}
	if err := fa.Sync(); err != nil {
		t.Fatal(err)
	}
	unlockAll(t, fa)
	if n := cachemgr.StatsOf(a.v).Pinned.Load(); n != 1 {
		t.Fatalf("A is the pinned holder of %d files, want 1 (the test is about that mode)", n)
	}
	return fa, fb, e
}

// writeLocked writes data at off through f under a write lock, fsynced.
func writeLocked(t *testing.T, f *os.File, data []byte, off int64) {
	t.Helper()
	lockWait(t, f, unix.F_WRLCK)
	if _, err := f.WriteAt(data, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	unlockAll(t, f)
}

// TestMountSNFSLockSizeHandoff: a file whose pinned holder is mount A (its
// kernel reads and writes the cache file itself) shows under A's lock the
// size B gave it under B's lock: fstat reported the cache file's older size,
// which SQLite takes for a corrupt database ("database disk image is
// malformed": the page count in its header beyond the end of the file).
func TestMountSNFSLockSizeHandoff(t *testing.T) {
	t.Parallel()
	fa, fb, _ := pinnedPair(t)
	more := randBytes(3, 4096)
	writeLocked(t, fb, more, 8192)
	lockWait(t, fa, unix.F_WRLCK)
	defer unlockAll(t, fa)
	st, err := fa.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != 12288 {
		t.Errorf("A's fstat under its lock after B extended the file: size %d, want 12288", st.Size())
	}
	got := make([]byte, 4096)
	if _, err := fa.ReadAt(got, 8192); err != nil || !bytes.Equal(got, more) {
		t.Errorf("A reads B's extension under its lock: %v, same bytes %v", err, bytes.Equal(got, more))
	}
}

// TestMountSNFSLockGapHandoff: B extends a file whose pinned holder is A by
// a page, and A, under its lock, writes the page after it without reading
// it (as SQLite writes a new page): B's page stays B's. The write left a
// hole of zeros in A's cache file, which A's fsync took for stores through
// a mapping and sent over B's page.
func TestMountSNFSLockGapHandoff(t *testing.T) {
	t.Parallel()
	fa, fb, e := pinnedPair(t)
	bPage, aPage := randBytes(3, 4096), randBytes(4, 4096)
	writeLocked(t, fb, bPage, 8192)
	writeLocked(t, fa, aPage, 12288)
	lockWait(t, fb, unix.F_RDLCK)
	defer unlockAll(t, fb)
	got := make([]byte, 8192)
	if n, err := fb.ReadAt(got, 8192); n != 8192 {
		t.Fatalf("B reads [8192, 16384) under its lock: %d bytes, %v", n, err)
	}
	if !bytes.Equal(got[:4096], bPage) {
		t.Errorf("B's page after A wrote the next one: %s", firstDiff(got[:4096], bPage, 8192))
	}
	if !bytes.Equal(got[4096:], aPage) {
		t.Errorf("A's page: %s", firstDiff(got[4096:], aPage, 12288))
	}
	if exp := mustRead(t, e.path("f")); len(exp) != 16384 || !bytes.Equal(exp[8192:12288], bPage) {
		t.Errorf("the export's file: %d bytes, B's page there %v", len(exp), len(exp) >= 12288 && bytes.Equal(exp[8192:12288], bPage))
	}
}

// handoffMount is one side of TestMountSNFSLockHandoff: a mount and its
// descriptor of the shared file.
type handoffMount struct {
	name string
	m    *snfsMount
	f    *os.File
}

// TestMountSNFSLockHandoff: two mounts of one export hold one file open for
// reading and writing (as two SQLite processes hold their database) and lock
// it in turn, in a seeded order. Each holder first checks that fstat and a
// read of the whole file show what the last holder left (size and every
// byte), and that a side file (SQLite's journal) is there with its bytes or
// gone, as left; with a write lock it then rewrites pages and bytes at
// random offsets, extends or cuts the file, makes, keeps or removes the side
// file, fsyncs (or leaves the write-back to the unlock) and unlocks. Now and
// then a mount closes and reopens its descriptor. SNFS_HANDOFF_SEED and
// SNFS_HANDOFF_ROUNDS replay a seed or run longer.
func TestMountSNFSLockHandoff(t *testing.T) {
	t.Parallel()
	seeds, rounds := []uint64{1, 2, 3, 4}, 150
	if v := os.Getenv("SNFS_HANDOFF_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SNFS_HANDOFF_SEED=%q: want a number", v)
		}
		seeds = []uint64{s}
	}
	if v := os.Getenv("SNFS_HANDOFF_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("SNFS_HANDOFF_ROUNDS=%q: want a positive number", v)
		}
		rounds = n
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			t.Parallel()
			lockHandoff(t, seed, rounds)
		})
	}
}

// lockHandoff is one seed's run of TestMountSNFSLockHandoff.
func lockHandoff(t *testing.T, seed uint64, rounds int) {
	r := rand.New(rand.NewPCG(seed, 11))
	e := newEnv(t, "rw,no_root_squash")
	model := randBytes(seed, 3*4096+100)
	var journal []byte // nil: no side file
	// Made through A, so that A's cache holds it whole and its opens pass
	// through; the seed decides which mount opens it first.
	ms := []*handoffMount{{name: "A"}, {name: "B"}}
	for _, h := range ms {
		h.m = newSNFSMount(t, e, h.name, "", time.Hour)
	}
	if err := os.WriteFile(ms[0].m.path("db"), model, 0o644); err != nil {
		t.Fatal(err)
	}
	open := func(h *handoffMount) {
		f, err := os.OpenFile(h.m.path("db"), os.O_RDWR, 0)
		if err != nil {
			t.Fatalf("%s: open: %v", h.name, err)
		}
		h.f = f
	}
	first := r.IntN(2)
	open(ms[first])
	if r.IntN(2) == 0 {
		// Read whole before the other opens: the first one's cache holds
		// the file whole, and its next open passes through.
		if _, err := io.ReadAll(ms[first].f); err != nil {
			t.Fatal(err)
		}
	}
	open(ms[1-first])
	defer func() {
		for _, h := range ms {
			h.f.Close()
		}
	}()
	var history []string // the rounds so far, for a failure's report
	note := func(format string, args ...any) {
		history = append(history, fmt.Sprintf(format, args...))
	}
	fail := func(round int, h *handoffMount, format string, args ...any) {
		t.Helper()
		from := max(0, len(history)-12)
		t.Fatalf("seed %d round %d, %s: %s\nthe last rounds:\n%s", seed, round, h.name, fmt.Sprintf(format, args...),
			strings.Join(history[from:], "\n"))
	}
	for round := range rounds {
		h := ms[r.IntN(2)]
		if r.IntN(40) == 0 {
			// A new descriptor: another OPEN, or a kept one taken over.
			h.f.Close()
			open(h)
			note("%d %s: reopen", round, h.name)
		}
		write := r.IntN(4) != 0
		typ := int16(unix.F_RDLCK)
		if write {
			typ = unix.F_WRLCK
		}
		lockWait(t, h.f, typ)
		// What the last holder left.
		st, err := h.f.Stat()
		if err != nil {
			fail(round, h, "fstat: %v", err)
		}
		if st.Size() != int64(len(model)) {
			fail(round, h, "fstat under the lock: size %d, want %d", st.Size(), len(model))
		}
		hdr := make([]byte, 100) // SQLite reads its header first
		if n, err := h.f.ReadAt(hdr, 0); n != min(100, len(model)) || !bytes.Equal(hdr[:n], model[:n]) {
			fail(round, h, "header read under the lock (%v): %s", err, firstDiff(hdr[:n], model[:min(100, len(model))], 0))
		}
		// All of it, or (as SQLite, which reads only the pages it needs)
		// one page: the other pages of this mount's copy stay as they were.
		lo, hi := 0, len(model)+4096
		if r.IntN(2) == 0 {
			lo = 4096 * r.IntN(len(model)/4096+1)
			hi = lo + 4096
		}
		got := make([]byte, hi-lo)
		n, err := h.f.ReadAt(got, int64(lo))
		if err != nil && err != io.EOF {
			fail(round, h, "read [%d, %d) under the lock: %v", lo, hi, err)
		}
		if want := model[min(lo, len(model)):min(hi, len(model))]; !bytes.Equal(got[:n], want) {
			fail(round, h, "read [%d, %d) under the lock: %s", lo, hi, firstDiff(got[:n], want, lo))
		}
		jp := h.m.path("db-journal")
		j, err := os.ReadFile(jp)
		switch {
		case journal == nil && !errors.Is(err, fs.ErrNotExist):
			fail(round, h, "the side file removed by the last holder: %d bytes, %v", len(j), err)
		case journal != nil && err != nil:
			fail(round, h, "the side file left by the last holder: %v", err)
		case journal != nil && !bytes.Equal(j, journal):
			fail(round, h, "the side file left by the last holder: %s", firstDiff(j, journal, 0))
		}
		if !write {
			unlockAll(t, h.f)
			note("%d %s: read lock, checked [%d, %d) of %d bytes", round, h.name, lo, hi, len(model))
			continue
		}
		did := []string{fmt.Sprintf("checked [%d, %d)", lo, hi)}
		// The side file: removed, rewritten, or made.
		switch k := r.IntN(4); {
		case journal != nil && k < 2:
			if err := os.Remove(jp); err != nil {
				fail(round, h, "remove the side file: %v", err)
			}
			journal = nil
			did = append(did, "side file removed")
		case k == 0 || k == 3:
			journal = randBytes(r.Uint64(), 512+r.IntN(20000))
			if err := writeSynced(jp, journal); err != nil {
				fail(round, h, "write the side file: %v", err)
			}
			did = append(did, fmt.Sprintf("side file written (%d bytes)", len(journal)))
		}
		for range 1 + r.IntN(4) {
			var off, n int
			if r.IntN(3) != 0 {
				// A page, as SQLite writes its database.
				off, n = 4096*r.IntN(len(model)/4096+2), 4096
			} else {
				off, n = r.IntN(len(model)+5000), 1+r.IntN(9000)
			}
			data := randBytes(r.Uint64(), n)
			if _, err := h.f.WriteAt(data, int64(off)); err != nil {
				fail(round, h, "write [%d, %d): %v", off, off+n, err)
			}
			if off+n > len(model) {
				model = append(model, make([]byte, off+n-len(model))...)
			}
			copy(model[off:], data)
			did = append(did, fmt.Sprintf("wrote [%d, %d)", off, off+n))
		}
		if r.IntN(8) == 0 {
			size := len(model)/2 + r.IntN(len(model)/2+10000)
			if err := h.f.Truncate(int64(size)); err != nil {
				fail(round, h, "truncate to %d: %v", size, err)
			}
			if size > len(model) {
				model = append(model, make([]byte, size-len(model))...)
			}
			model = model[:size]
			did = append(did, fmt.Sprintf("cut to %d", size))
		}
		if r.IntN(5) != 0 {
			if err := h.f.Sync(); err != nil {
				fail(round, h, "fsync: %v", err)
			}
			did = append(did, "fsync")
		}
		unlockAll(t, h.f)
		note("%d %s: %s; size %d", round, h.name, strings.Join(did, ", "), len(model))
	}
	for _, h := range ms {
		h.f.Close()
		st := cachemgr.StatsOf(h.m.v)
		t.Logf("%s: passthrough opens %d, pinned %d", h.name, st.PassthroughOpens.Load(), st.Pinned.Load())
	}
	if got := mustRead(t, e.path("db")); !bytes.Equal(got, model) {
		t.Fatalf("seed %d: the export's file: %s", seed, firstDiff(got, model, 0))
	}
}

// writeSynced writes data to a new file at path (or over one) and fsyncs it.
func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}
