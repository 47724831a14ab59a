package tests

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"snfs/mount/cachemgr"
	"snfs/mount/fusefs"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// requirePassthrough skips where the kernel does not offer FUSE passthrough
// (before Linux 6.9): the mount then reads through the daemon, as tested
// elsewhere.
func requirePassthrough(t *testing.T, m *snfsMount) {
	t.Helper()
	if m.srv.KernelSettings().Flags64()&fuse.CAP_PASSTHROUGH == 0 {
		t.Skip("the kernel does not offer FUSE passthrough (Linux 6.9+)")
	}
}

// readsOf counts the reads that reached A's daemon and the passthrough opens.
func readsOf(m *snfsMount) (reads, pt uint64) {
	st := cachemgr.StatsOf(m.v)
	return st.Reads.Load(), st.PassthroughOpens.Load()
}

// TestMountSNFSPassthrough: a file held whole in the cache directory is
// opened with passthrough: its reads (read(2) and a mapping) reach no daemon
// read handler and return the file's bytes; a write through another open of
// the same mount is seen at once by the passthrough reader and reaches the
// server at fsync; a file not held whole is read through the daemon (no
// fetch of the whole file at open) and passes through at the next open.
func TestMountSNFSPassthrough(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	serverFiles(t, e, "f")
	a := newSNFSMount(t, e, "A", "", time.Hour)
	requirePassthrough(t, a)
	want := randBytes(41, 300000)
	if err := os.WriteFile(a.path("f"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	r0, p0 := readsOf(a)
	fr, err := os.Open(a.path("f"))
	if err != nil {
		t.Fatal(err)
	}
	defer fr.Close()
	got := make([]byte, len(want)+10)
	n, _ := fr.ReadAt(got, 0)
	if !bytes.Equal(got[:n], want) {
		t.Fatalf("passthrough read: %d bytes, want the %d written", n, len(want))
	}
	mapped, err := syscall.Mmap(int(fr.Fd()), 0, len(want), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mapped, want) {
		t.Errorf("the mapping of a passthrough open differs from the file")
	}
	syscall.Munmap(mapped)
	r1, p1 := readsOf(a)
	if p1 != p0+1 {
		t.Fatalf("passthrough opens %d -> %d; want one more", p0, p1)
	}
	if r1 != r0 {
		t.Fatalf("%d reads reached the daemon through a passthrough open; want none", r1-r0)
	}

	// A second open, for writing, while the reader passes through: direct
	// I/O through the daemon into the same cache file.
	fw, err := os.OpenFile(a.path("f"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	patch := []byte("written while a passthrough reader is open")
	if _, err := fw.WriteAt(patch, 1000); err != nil {
		t.Fatal(err)
	}
	copy(want[1000:], patch)
	n, _ = fr.ReadAt(got, 0)
	if !bytes.Equal(got[:n], want) {
		t.Fatalf("the passthrough reader does not see the write of another open")
	}
	if n := exportSize(t, e.path("f")); n != 0 {
		t.Fatalf("the export has %d bytes before fsync; want none (delayed write-back)", n)
	}
	if err := fw.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, e.path("f")); !bytes.Equal(got, want) {
		t.Fatalf("after fsync the export has %d bytes, not the mount's %d", len(got), len(want))
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fr.Close(); err != nil {
		t.Fatal(err)
	}

	// A file written on the server (not held by A's cache): the first open
	// reads through the daemon and fills the cache, the next passes through.
	other := randBytes(42, 200000)
	writeLocal(t, e.path("g"), other, 0o644, a.path("g"))
	r2, p2 := readsOf(a)
	if got := mustRead(t, a.path("g")); !bytes.Equal(got, other) {
		t.Fatalf("A reads %d bytes of g, want %d", len(got), len(other))
	}
	r3, p3 := readsOf(a)
	if p3 != p2 || r3 == r2 {
		t.Fatalf("first open of an uncached file: %d passthrough opens, %d daemon reads; want 0 and some", p3-p2, r3-r2)
	}
	// The kernel keeps g's pages; drop them, so that only passthrough can
	// avoid the daemon.
	dropCaches(t)
	if got := mustRead(t, a.path("g")); !bytes.Equal(got, other) {
		t.Fatalf("A reads %d bytes of g through passthrough, want %d", len(got), len(other))
	}
	r4, p4 := readsOf(a)
	if p4 != p3+1 || r4 != r3 {
		t.Fatalf("second open of g: %d passthrough opens, %d daemon reads; want 1 and 0", p4-p3, r4-r3)
	}
}

// TestMountSNFSPassthroughSharing: B opens a file for writing while A
// reads it through passthrough: A's callback does not punch holes in the
// file A's kernel reads (A's open reads the bytes as of the callback), and
// B's later writes are in the next read of that open (its reads are watched
// and refreshed from the server, pinned.go) and of later opens.
func TestMountSNFSPassthroughSharing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	serverFiles(t, e, "s")
	a := newSNFSMount(t, e, "A", "", time.Hour)
	b := newSNFSMount(t, e, "B", "", time.Hour)
	requirePassthrough(t, a)
	want := randBytes(43, 100000)
	if err := os.WriteFile(a.path("s"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	_, p0 := readsOf(a)
	fr, err := os.Open(a.path("s"))
	if err != nil {
		t.Fatal(err)
	}
	defer fr.Close()
	if _, p1 := readsOf(a); p1 != p0+1 {
		t.Fatalf("A's read open did not pass through")
	}
	fb, err := os.OpenFile(b.path("s"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	if got := mustRead(t, e.path("s")); !bytes.Equal(got, want) {
		t.Fatalf("B's open did not make A write back: the export has %d bytes", len(got))
	}
	got := make([]byte, len(want))
	if n, _ := fr.ReadAt(got, 0); n != len(want) || !bytes.Equal(got, want) {
		t.Fatalf("A's passthrough open reads %d bytes after the callback, not the file as of the callback", n)
	}
	// A write open on A now would have to pass through (Linux) and could not
	// send each write to the server: refused.
	if f, err := os.OpenFile(a.path("s"), os.O_WRONLY, 0); !errors.Is(err, syscall.EBUSY) {
		if f != nil {
			f.Close()
		}
		t.Fatalf("A's write open of a write-shared file it reads through passthrough: %v; want EBUSY", err)
	}
	patch := []byte("B's bytes")
	if _, err := fb.WriteAt(patch, 10); err != nil {
		t.Fatal(err)
	}
	copy(want[10:], patch)
	if n, _ := fr.ReadAt(got, 0); n != len(want) || !bytes.Equal(got, want) {
		t.Fatalf("A's passthrough open reads %d bytes after B's write, without B's", n)
	}
	// A new open on A is made after the callback: it sees B's bytes.
	if got := mustRead(t, a.path("s")); !bytes.Equal(got, want) {
		t.Fatalf("A's open after B's write reads %d bytes without B's", len(got))
	}
}

// dropCaches drops the kernel's clean page cache (root).
func dropCaches(t *testing.T) {
	t.Helper()
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0o200); err != nil {
		t.Fatalf("drop caches: %v", err)
	}
}

// startMountChild runs a mount of e's export in a child process
// (TestMountSNFSChild) on a fresh mount point and cache directory, and
// returns them and a function that kills the child with SIGKILL.
func startMountChild(t *testing.T, e *env) (dir, cacheDir string, kill func()) {
	t.Helper()
	requireFUSE(t)
	dir = diskTempDir(t, "snfs-mnt-")
	cacheDir = diskTempDir(t, "snfs-cache-")
	cmd := command(os.Args[0], "-test.run=^TestMountSNFSChild$", "-test.v")
	cmd.Env = append(os.Environ(), "SNFS_MOUNT_CHILD="+strings.Join([]string{e.addr, e.cfg.Exports[0].Path, dir, cacheDir}, "|"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	kill = func() {
		if killed {
			return
		}
		killed = true
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		if err := fusefs.Unmount(dir, nil, 5*time.Second); err != nil {
			t.Logf("unmount of the dead mount: %v", err)
		}
	}
	t.Cleanup(kill)
	awaitMountReady(t, out)
	return dir, cacheDir, kill
}

// writeThroughPassthrough writes data at off of name under dir through an
// open that passes through (a read open of the whole cached file is held,
// so the write open joins it) and closes both.
func writeThroughPassthrough(t *testing.T, dir, name string, off int64, data []byte, fsync bool) {
	t.Helper()
	fr, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	defer fr.Close()
	fw, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fw.WriteAt(data, off); err != nil {
		t.Fatal(err)
	}
	if fsync {
		if err := fw.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if _, err := fr.ReadAt(got, off); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the passthrough reader does not see the write (%v)", err)
	}
}

// TestMountSNFSPassthroughWrite: data written through a passthrough open
// (the size grows too) is reported by stat, reaches the server after fsync,
// and after close and unmount.
func TestMountSNFSPassthroughWrite(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	serverFiles(t, e, "w")
	a := newSNFSMount(t, e, "A", "", time.Hour)
	requirePassthrough(t, a)
	want := randBytes(51, 50000)
	if err := os.WriteFile(a.path("w"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	_, p0 := readsOf(a)
	tail := randBytes(52, 30000)
	writeThroughPassthrough(t, a.dir, "w", int64(len(want)-10000), tail, true)
	want = append(want[:len(want)-10000], tail...)
	if _, p1 := readsOf(a); p1 != p0+2 {
		t.Fatalf("passthrough opens %d -> %d; want both opens to pass through", p0, p1)
	}
	if st, err := os.Stat(a.path("w")); err != nil || st.Size() != int64(len(want)) {
		t.Fatalf("stat after a passthrough write: %v, %v; want size %d", st, err, len(want))
	}
	if got := mustRead(t, e.path("w")); !bytes.Equal(got, want) {
		t.Fatalf("after fsync the export has %d bytes, not the %d written through passthrough", len(got), len(want))
	}
	more := randBytes(53, 7000)
	stamp := exportStamp(t, e.path("w"))
	writeThroughPassthrough(t, a.dir, "w", 100, more, false)
	copy(want[100:], more)
	if exportStamp(t, e.path("w")) != stamp {
		t.Fatalf("the export has the write before any write-back (delayed write-back expected)")
	}
	a.unmount(t)
	if got := mustRead(t, e.path("w")); !bytes.Equal(got, want) {
		t.Fatalf("after unmount the export has %d bytes, not the mount's", len(got))
	}
}

// TestMountSNFSPassthroughCrash: a mount process writes through a
// passthrough open, closes it and is killed (SIGKILL) before any write-back;
// a new mount with the same cache directory writes the data back.
func TestMountSNFSPassthroughCrash(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	serverFiles(t, e, "precious")
	dir, cacheDir, kill := startMountChild(t, e)
	base := randBytes(61, 200000)
	if err := os.WriteFile(filepath.Join(dir, "precious"), base, 0o644); err != nil {
		t.Fatal(err)
	}
	patch := randBytes(62, 5000)
	writeThroughPassthrough(t, dir, "precious", 12345, patch, false)
	want := append([]byte(nil), base...)
	copy(want[12345:], patch)
	if n := exportSize(t, e.path("precious")); n != 0 {
		t.Fatalf("the export has %d bytes before the crash; want none (delayed write-back)", n)
	}
	kill()
	m := newSNFSMountAt(t, e, "crash", dir, cacheDir, time.Hour)
	if got := mustRead(t, e.path("precious")); !bytes.Equal(got, want) {
		t.Fatalf("after the restart the export has %d bytes, not the %d written before the crash", len(got), len(want))
	}
	if got := mustRead(t, m.path("precious")); !bytes.Equal(got, want) {
		t.Fatalf("the restarted mount reads %d bytes", len(got))
	}
}

// TestMountSNFSPassthroughRandom: random writes (write(2) and shared
// mappings), truncations and fsyncs through write opens that join a held
// passthrough reader, checked against a model through the reader, stat and
// the server (after fsync and after unmount).
func TestMountSNFSPassthroughRandom(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	serverFiles(t, e, "r")
	a := newSNFSMount(t, e, "A", "", time.Hour)
	requirePassthrough(t, a)
	model := randBytes(71, 100000)
	if err := os.WriteFile(a.path("r"), model, 0o644); err != nil {
		t.Fatal(err)
	}
	fr, err := os.Open(a.path("r"))
	if err != nil {
		t.Fatal(err)
	}
	defer fr.Close()
	_, p0 := readsOf(a)
	rnd := rand.New(rand.NewPCG(72, 7))
	check := func(step int, what string) {
		t.Helper()
		got := make([]byte, len(model)+4096)
		n, _ := fr.ReadAt(got, 0)
		if !bytes.Equal(got[:n], model) {
			t.Fatalf("step %d (%s): the passthrough reader reads %d bytes, model %d, different", step, what, n, len(model))
		}
		if st, err := os.Stat(a.path("r")); err != nil || st.Size() != int64(len(model)) {
			t.Fatalf("step %d (%s): stat size %v (%v), model %d", step, what, st.Size(), err, len(model))
		}
	}
	for step := 0; step < 300; step++ {
		fw, err := os.OpenFile(a.path("r"), os.O_RDWR, 0)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		what := ""
		switch op := rnd.IntN(10); {
		case op < 5:
			what = "write"
			off := rnd.IntN(len(model) + 5000)
			data := randBytes(uint64(step)+1000, 1+rnd.IntN(20000))
			if _, err := fw.WriteAt(data, int64(off)); err != nil {
				t.Fatal(err)
			}
			if end := off + len(data); end > len(model) {
				model = append(model, make([]byte, end-len(model))...)
			}
			copy(model[off:], data)
		case op < 7 && len(model) > 0:
			what = "mmap write"
			m, err := syscall.Mmap(int(fw.Fd()), 0, len(model), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
			if err != nil {
				t.Fatal(err)
			}
			off := rnd.IntN(len(model))
			data := randBytes(uint64(step)+2000, 1+rnd.IntN(min(8000, len(model)-off)))
			copy(m[off:], data)
			copy(model[off:], data)
			syscall.Munmap(m)
		case op < 9:
			what = "truncate"
			size := rnd.IntN(len(model) + 20000)
			if err := fw.Truncate(int64(size)); err != nil {
				t.Fatal(err)
			}
			if size > len(model) {
				model = append(model, make([]byte, size-len(model))...)
			}
			model = model[:size]
		default:
			what = "fsync"
			if err := fw.Sync(); err != nil {
				t.Fatal(err)
			}
			if got := mustRead(t, e.path("r")); !bytes.Equal(got, model) {
				t.Fatalf("step %d: after fsync the export has %d bytes, model %d, different", step, len(got), len(model))
			}
		}
		if err := fw.Close(); err != nil {
			t.Fatal(err)
		}
		check(step, what)
	}
	if _, p1 := readsOf(a); p1 < p0+300 {
		t.Fatalf("%d of 300 write opens passed through", p1-p0)
	}
	fr.Close()
	a.unmount(t)
	if got := mustRead(t, e.path("r")); !bytes.Equal(got, model) {
		t.Fatalf("after unmount the export has %d bytes, model %d, different", len(got), len(model))
	}
}

// TestMountFsxSNFSPassthrough: TestMountFsxSNFS with a read open of the
// (empty, so whole) cached file held by the test, passing through: every
// open the random tester makes must join it, so all its reads, writes,
// mapped reads and writes go from the kernel to the cache file; its checks
// (after fsync) compare the export directory with the model.
func TestMountFsxSNFSPassthrough(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	serverFiles(t, e, "fsx.dat")
	m := newSNFSMount(t, e, "A", "", time.Hour)
	requirePassthrough(t, m)
	p := m.path("fsx.dat")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fr, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer fr.Close()
	_, p0 := readsOf(m)
	if p0 == 0 {
		t.Fatal("the held read open did not pass through")
	}
	c := fsxChildConfig{Cfg: fsxConfig(p, fsxOps(t), fsxSeed(t, 8)), Compare: []string{e.path("fsx.dat")}}
	fsxCheck(t, c, func() { t.Error("unexpected restart request") })
	if _, p1 := readsOf(m); p1 == p0 {
		t.Fatal("the random tester's opens did not pass through")
	}
}

// TestMountSNFSPassthroughWriterShared: A writes through a passthrough open
// that joined a passthrough reader when B opens the file: A's callback
// writes A's bytes back first (B reads them) and makes A the pinned holder,
// so what A writes after is in B's next read too, before and after A's fsync
// and close.
func TestMountSNFSPassthroughWriterShared(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	// ws made on the server first: the test is about sharing a file's data with a passthrough writer, not about
	// names. A file a mount creates under a write-back permit (the default)
	// is in its log until reintegrated, and another client's lookup does
	// not recall the permit (docs/protocol.md section 21.4;
	// TestMountSNFSSequentialSharing is about that).
	if err := os.WriteFile(e.path("ws"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	a := newSNFSMount(t, e, "A", "", time.Hour)
	b := newSNFSMount(t, e, "B", "", time.Hour)
	requirePassthrough(t, a)
	want := randBytes(81, 60000)
	if err := os.WriteFile(a.path("ws"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	fr, err := os.Open(a.path("ws"))
	if err != nil {
		t.Fatal(err)
	}
	defer fr.Close()
	fw, err := os.OpenFile(a.path("ws"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fw.Close()
	p1 := randBytes(82, 3000)
	if _, err := fw.WriteAt(p1, 500); err != nil {
		t.Fatal(err)
	}
	copy(want[500:], p1)
	fb, err := os.Open(b.path("ws"))
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	readB := func(what string) {
		t.Helper()
		got := make([]byte, len(want)+100)
		n, _ := fb.ReadAt(got, 0)
		if !bytes.Equal(got[:n], want) {
			t.Fatalf("%s: B reads %d bytes, want %d of A's", what, n, len(want))
		}
	}
	readB("after B's open")
	p2 := randBytes(83, 2000)
	if _, err := fw.WriteAt(p2, 40000); err != nil {
		t.Fatal(err)
	}
	copy(want[40000:], p2)
	readB("after A's write")
	if err := fw.Sync(); err != nil {
		t.Fatal(err)
	}
	readB("after A's fsync")
	p3 := randBytes(84, 1000)
	if _, err := fw.WriteAt(p3, 59500); err != nil { // and grows the file
		t.Fatal(err)
	}
	want = append(want[:59500], p3...)
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	readB("after A's close")
}

// TestMountSNFSPassthroughPinned: A creates a file and writes it through a
// passthrough open (its writes reach no daemon). B opens the file: A becomes
// its pinned holder, and from then on every byte A writes is in B's next
// read, and every byte B writes (through the server) in A's next read
// through the same passthrough open; at the end the server holds the model.
func TestMountSNFSPassthroughPinned(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	serverFiles(t, e, "pin")
	a := newSNFSMount(t, e, "A", "", time.Hour)
	b := newSNFSMount(t, e, "B", "", time.Hour)
	requirePassthrough(t, a)
	_, pt0 := readsOf(a)
	fa, err := os.OpenFile(a.path("pin"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	if _, pt := readsOf(a); pt == pt0 {
		t.Skip("the write open did not pass through (no pre-content fanotify here): TestMountSNFSWriteSharing covers this mount")
	}
	model := randBytes(90, 100000)
	if _, err := fa.WriteAt(model, 0); err != nil {
		t.Fatal(err)
	}
	fb, err := os.OpenFile(b.path("pin"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	if n := cachemgr.StatsOf(a.v).Pinned.Load(); n != 1 {
		t.Fatalf("A's pinned count after B's open: %d, want 1", n)
	}
	check := func(who string, f *os.File, step int) {
		t.Helper()
		got := make([]byte, len(model)+5000)
		n, err := f.ReadAt(got, 0)
		if err != nil && n != len(model) {
			t.Fatalf("step %d: %s's read: %d bytes, %v", step, who, n, err)
		}
		if !bytes.Equal(got[:n], model) {
			i := 0
			for i < n && i < len(model) && got[i] == model[i] {
				i++
			}
			t.Fatalf("step %d: %s reads %d bytes, want %d; first difference at %d", step, who, n, len(model), i)
		}
	}
	check("B", fb, 0)
	put := func(f *os.File, seed uint64, off, n int) {
		t.Helper()
		chunk := randBytes(seed, n)
		if _, err := f.WriteAt(chunk, int64(off)); err != nil {
			t.Fatal(err)
		}
		if end := off + n; end > len(model) {
			model = append(model, make([]byte, end-len(model))...)
		}
		copy(model[off:], chunk)
	}
	for step := 1; step <= 30; step++ {
		off := step * 7919 % (len(model) + 3000)
		put(fa, uint64(100+step), off, 1+step*389%9000)
		check("B", fb, step)
		if step%3 == 0 {
			// B writes into a page A wrote in too: A's page is refreshed
			// before A's next access, and A's later write to it keeps B's.
			put(fb, uint64(200+step), off+100, 50)
			check("A", fa, step)
		}
	}
	// Size changes on either side.
	cut := func(f *os.File, size int) {
		t.Helper()
		if err := f.Truncate(int64(size)); err != nil {
			t.Fatal(err)
		}
		model = model[:size]
	}
	cut(fa, len(model)-5000)
	check("B", fb, 31)
	check("A", fa, 31)
	cut(fb, len(model)-7000)
	check("A", fa, 32)
	put(fb, 300, len(model)+2000, 3000) // B extends it, with a hole
	check("A", fa, 33)
	put(fa, 301, len(model)-1000, 4000) // A extends it
	check("B", fb, 34)
	// A writes through a shared mapping (no event): its fsync sends the
	// pages, and only those (B's bytes elsewhere stay).
	put(fb, 302, 1000, 100)
	check("A", fa, 35)
	m, err := syscall.Mmap(int(fa.Fd()), 0, len(model), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	mapped := randBytes(303, 5000)
	copy(m[50000:], mapped)
	copy(model[50000:], mapped)
	if err := syscall.Munmap(m); err != nil {
		t.Fatal(err)
	}
	if err := fa.Sync(); err != nil {
		t.Fatal(err)
	}
	check("B", fb, 36)
	if err := fa.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fb.Close(); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, e.path("pin")); !bytes.Equal(got, model) {
		t.Fatalf("the server holds %d bytes, not the model's %d", len(got), len(model))
	}
}
