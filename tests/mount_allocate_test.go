package tests

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"snfs/internal/fsx"
)

// fallocate(2) on a mount (docs/mount.md, "fallocate"): in snfs mode through
// SNFS ALLOCATE, so the space is reserved on the server; in nfs mode
// EOPNOTSUPP. Run through util-linux's fallocate(1), as a user would.

// runFallocate runs fallocate(1) with args and returns its exit status and
// its output.
func runFallocate(t *testing.T, args ...string) (int, string) {
	t.Helper()
	if _, err := exec.LookPath("fallocate"); err != nil {
		requireInCI(t, "fallocate(1) not installed (util-linux)")
	}
	out, err := command("fallocate", args...).CombinedOutput()
	if err != nil {
		ee, ok := err.(*exitError)
		if !ok {
			t.Fatalf("fallocate %s: %v", strings.Join(args, " "), err)
		}
		return ee.ExitCode(), string(out)
	}
	return 0, string(out)
}

// TestMountSNFSAllocate: `fallocate -l 10M` on an snfs mount reserves 10 MiB
// on the server's file system (the backing file's blocks), the size is 10
// MiB on the mount, on the server and on a second mount, and the range reads
// as zeros; -n reserves without changing the size; -p punches a hole that
// both mounts read as zeros; an allocation beyond the server's free space
// fails at the call with ENOSPC.
func TestMountSNFSAllocate(t *testing.T) {
	t.Parallel()
	e := newSmallEnv(t) // 32 MiB of ext4
	a := newSNFSMount(t, e, "A", "", time.Hour)
	b := newSNFSMount(t, e, "B", "", time.Hour)
	const mib = 1 << 20

	if code, out := runFallocate(t, "-l", "10M", a.path("f")); code != 0 {
		t.Fatalf("fallocate -l 10M: exit %d: %s", code, out)
	}
	st := statOf(t, e.path("f"))
	if st.Size != 10*mib || st.Blocks*512 < 10*mib {
		t.Fatalf("the server's file: size %d, %d bytes allocated; want 10 MiB of both", st.Size, st.Blocks*512)
	}
	if sa := statOf(t, a.path("f")); sa.Size != 10*mib || sa.Blocks*512 < 10*mib {
		t.Fatalf("A's stat: size %d, %d bytes allocated; want 10 MiB of both", sa.Size, sa.Blocks*512)
	}
	if got := mustRead(t, a.path("f")); len(got) != 10*mib || !bytes.Equal(got, make([]byte, 10*mib)) {
		t.Fatalf("A reads %d bytes, not 10 MiB of zeros", len(got))
	}
	if sb := statOf(t, b.path("f")); sb.Size != 10*mib {
		t.Fatalf("B sees size %d, want 10 MiB", sb.Size)
	}

	if code, out := runFallocate(t, "-n", "-o", "10M", "-l", "2M", a.path("f")); code != 0 {
		t.Fatalf("fallocate -n: exit %d: %s", code, out)
	}
	if st := statOf(t, e.path("f")); st.Size != 10*mib || st.Blocks*512 < 12*mib {
		t.Fatalf("after fallocate -n: the server's file has size %d, %d bytes allocated; want 10 MiB and 12 MiB", st.Size, st.Blocks*512)
	}
	if sa := statOf(t, a.path("f")); sa.Size != 10*mib {
		t.Fatalf("after fallocate -n: A sees size %d", sa.Size)
	}

	// Data, then a hole through it, on A; B reads the hole.
	data := randBytes(3, mib)
	if err := os.WriteFile(a.path("f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := runFallocate(t, "-p", "-o", "4096", "-l", "65536", a.path("f")); code != 0 {
		t.Fatalf("fallocate -p: exit %d: %s", code, out)
	}
	want := bytes.Clone(data)
	clear(want[4096 : 4096+65536])
	if got := mustRead(t, a.path("f")); !bytes.Equal(got, want) {
		t.Fatalf("A reads %d bytes after the hole, not its data with 64 KiB of zeros at 4096", len(got))
	}
	if got := mustRead(t, b.path("f")); !bytes.Equal(got, want) {
		t.Fatalf("B reads %d bytes after A's hole, not A's data with 64 KiB of zeros at 4096", len(got))
	}

	// Held open meanwhile: the mount caches its attributes while it is.
	held, err := os.Create(a.path("g"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	code, out := runFallocate(t, "-l", "64M", a.path("g"))
	if code != 1 || !strings.Contains(out, "No space left on device") {
		t.Fatalf("fallocate -l 64M on a 32 MiB server: exit %d: %q; want exit 1 and ENOSPC", code, out)
	}
	// What the failed call left on the server (ext4 keeps what it reserved
	// before ENOSPC, and the size over it) is what the mount shows.
	if sg, sa := statOf(t, e.path("g")), statOf(t, a.path("g")); sa.Size != sg.Size {
		t.Fatalf("after the failed fallocate: A sees size %d, the server has %d", sa.Size, sg.Size)
	}
}

// TestMountSNFSAllocateDirty: a file A caches with data not yet written back
// (and a local truncation pending): A's fallocate writes them back first, so
// the server's file is A's data extended by the allocation, the whole range
// reserved, and A reads the same, with the extension as zeros.
func TestMountSNFSAllocateDirty(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	a := newSNFSMount(t, e, "A", "", time.Hour)
	data := randBytes(5, 300000)
	f, err := os.OpenFile(a.path("f"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(200000); err != nil { // local: A has it open for writing
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if n := exportHas(t, e.path("f")); n != 0 {
		t.Fatalf("the export has %d bytes before the fallocate; want none (delayed write-back)", n)
	}
	if code, out := runFallocate(t, "-o", "100000", "-l", "400000", a.path("f")); code != 0 {
		t.Fatalf("fallocate: exit %d: %s", code, out)
	}
	want := append(bytes.Clone(data[:200000]), make([]byte, 300000)...)
	if got := mustRead(t, e.path("f")); !bytes.Equal(got, want) {
		t.Fatalf("the export has %d bytes, not A's 200000 and 300000 zeros", len(got))
	}
	if got := mustRead(t, a.path("f")); !bytes.Equal(got, want) {
		t.Fatalf("A reads %d bytes, not its 200000 and 300000 zeros", len(got))
	}
	// And the reservation holds: a truncation written back after the
	// allocation would have freed the blocks past its size.
	if err := a.v.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if st := statOf(t, e.path("f")); st.Size != 500000 || st.Blocks*512 < 500000 {
		t.Fatalf("the server's file: size %d, %d bytes allocated; want 500000 of both", st.Size, st.Blocks*512)
	}
}

// TestMountNFSAllocate: NFSv3 has no ALLOCATE: fallocate on an nfs-mode mount
// fails with EOPNOTSUPP, as on a Linux NFSv3 mount, and changes nothing.
func TestMountNFSAllocate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	m := newMount(t, e)
	if err := os.WriteFile(filepath.Join(m.dir, "f"), []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := runFallocate(t, "-l", "1M", filepath.Join(m.dir, "f"))
	if code != 1 || !strings.Contains(out, "Operation not supported") {
		t.Fatalf("fallocate on an nfs mount: exit %d: %q; want exit 1 and EOPNOTSUPP", code, out)
	}
	if n := exportSize(t, e.path("f")); n != 3 {
		t.Fatalf("the export has %d bytes", n)
	}
}

// fsxPunchWeights are fsx's default weights with hole punching and no
// ZERO_RANGE (which SNFS ALLOCATE does not carry: EOPNOTSUPP).
var fsxPunchWeights = fsx.Weights{Read: 25, Write: 25, MapRead: 10, MapWrite: 10, Truncate: 10, Fsync: 3, Punch: 8}

// TestMountFsxSNFSPunch: the random tester on an snfs-mode mount with holes
// punched (fallocate PUNCH_HOLE|KEEP_SIZE) among writes, mapped writes and
// truncations, while the file is cached dirty; each check compares the
// export directory, after an fsync, with the model.
func TestMountFsxSNFSPunch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	dir, _ := fsxMount(t, e, fsxSNFS, "A", 0)
	cfg := fsxConfig(filepath.Join(dir, "fsx.dat"), fsxOps(t)/2, fsxSeed(t, 9))
	cfg.Punch, cfg.Weights = true, fsxPunchWeights
	fsxCheck(t, fsxChildConfig{Cfg: cfg, Compare: []string{e.path("fsx.dat")}}, func() { t.Error("unexpected restart request") })
}

// TestMountFsxSNFSPunchTwoMounts: TestMountFsxSNFSTwoMounts with holes
// punched: the second mount, opening after each check's close, reads the
// holes the first punched in its cached file.
func TestMountFsxSNFSPunchTwoMounts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	a, _ := fsxMount(t, e, fsxSNFS, "A", 0)
	b, _ := fsxMount(t, e, fsxSNFS, "B", 0)
	ops := fsxOps(t) / 2
	cfg := fsxConfig(filepath.Join(a, "fsx.dat"), ops, fsxSeed(t, 10))
	cfg.Punch, cfg.Weights = true, fsxPunchWeights
	cfg.CheckPrep, cfg.CheckEvery = fsx.PrepClose, max(ops/100, 100)
	fsxCheck(t, fsxChildConfig{Cfg: cfg, Compare: []string{filepath.Join(b, "fsx.dat"), e.path("fsx.dat")}},
		func() { t.Error("unexpected restart request") })
}

// TestMountSNFSAllocateShared: a file open on two mounts at once (A writing,
// B reading: write-shared, nobody caches it): A's fallocate punches a hole
// and extends the file; both read the server's file, zeros in the hole and
// past the old end, at once.
func TestMountSNFSAllocateShared(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	a := newSNFSMount(t, e, "A", "", time.Hour)
	b := newSNFSMount(t, e, "B", "", time.Hour)
	data := randBytes(7, 200000)
	if err := os.WriteFile(a.path("f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	fa, err := os.OpenFile(a.path("f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	fb, err := os.Open(b.path("f"))
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	readAt := func(f *os.File, n int) []byte {
		t.Helper()
		buf := make([]byte, n+1)
		k, err := f.ReadAt(buf, 0)
		if err != nil && err != io.EOF {
			t.Fatal(err)
		}
		return buf[:k]
	}
	if got := readAt(fb, 200000); !bytes.Equal(got, data) {
		t.Fatalf("B reads %d bytes before, not A's", len(got))
	}
	if err := syscall.Fallocate(int(fa.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 8192, 16384); err != nil {
		t.Fatalf("punch: %v", err)
	}
	if err := syscall.Fallocate(int(fa.Fd()), 0, 150000, 100000); err != nil {
		t.Fatalf("extend: %v", err)
	}
	want := append(bytes.Clone(data), make([]byte, 50000)...)
	clear(want[8192 : 8192+16384])
	if got := readAt(fa, 250000); !bytes.Equal(got, want) {
		t.Fatalf("A reads %d bytes, not its data with a hole and 50000 zeros more", len(got))
	}
	if got := readAt(fb, 250000); !bytes.Equal(got, want) {
		t.Fatalf("B reads %d bytes, not A's data with a hole and 50000 zeros more", len(got))
	}
	if got := mustRead(t, e.path("f")); !bytes.Equal(got, want) {
		t.Fatalf("the export has %d bytes, not A's data with a hole and 50000 zeros more", len(got))
	}
}
