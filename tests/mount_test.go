package tests

import (
	"bytes"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"snfs/mount/vfs"
	"snfs/server"
	"snfs/store"
)

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// noHidden fails t if dir holds a hidden .snfs name (an unlinked file that
// was open) once the files closed before have been released: FUSE sends
// RELEASE after close(2) has returned, so it waits for them, bounded.
func noHidden(t *testing.T, dir string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var hidden []string
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".snfs") {
				hidden = append(hidden, e.Name())
			}
		}
		if len(hidden) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("hidden files %q left behind", hidden)
			return
		}
	}
}

// TestMountWriteReadBack writes files of several sizes (across the dirty limit
// and the transfer size) and reads them back through the mount and directly
// from the export: close wrote everything.
func TestMountWriteReadBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	m := newMount(t, e)
	for k, n := range []int{0, 1, 4095, 4097, 1 << 20, 3<<20 + 17, 20<<20 + 5} {
		name := "f" + string(rune('a'+k))
		want := randBytes(uint64(n), n)
		if err := os.WriteFile(filepath.Join(m.dir, name), want, 0o644); err != nil {
			t.Fatal(err)
		}
		if got := mustRead(t, e.path(name)); !bytes.Equal(got, want) {
			t.Fatalf("%d bytes: the export has %d bytes, different", n, len(got))
		}
		if got := mustRead(t, filepath.Join(m.dir, name)); !bytes.Equal(got, want) {
			t.Fatalf("%d bytes: read back %d bytes, different", n, len(got))
		}
	}
	// Overwrite the middle of an open file and read it before closing: the
	// unwritten bytes are laid over the server's.
	f, err := os.OpenFile(filepath.Join(m.dir, "fe"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	patch := bytes.Repeat([]byte("x"), 10000)
	if _, err := f.WriteAt(patch, 5000); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 20000)
	if _, err := f.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	want := randBytes(1<<20, 1<<20)[:20000]
	copy(want[5000:], patch)
	if !bytes.Equal(got, want) {
		t.Fatal("read before close does not show the write")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, e.path("fe"))[:20000]; !bytes.Equal(got, want) {
		t.Fatal("the export does not have the write after close")
	}
}

// TestMountRenameOverOpen: a file open here and renamed over stays readable
// (hidden under a .snfs name until its last close).
func TestMountRenameOverOpen(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	testMountRenameOverOpen(t, newMount(t, e).dir, e.dir)
}

// testMountRenameOverOpen is TestMountRenameOverOpen on mount point mnt of export directory export
// (also run against nfs-ganesha: TestMountGanesha/Cases).
func testMountRenameOverOpen(t *testing.T, mnt, export string) {
	a, b := filepath.Join(mnt, "a"), filepath.Join(mnt, "b")
	os.WriteFile(a, []byte("old contents"), 0o644)
	os.WriteFile(b, []byte("new"), 0o644)
	f, err := os.Open(a)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(b, a); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 100)
	n, err := f.ReadAt(got, 0)
	if string(got[:n]) != "old contents" {
		t.Fatalf("open file after rename over it: %q, %v", got[:n], err)
	}
	if s := string(mustRead(t, a)); s != "new" {
		t.Fatalf("the name now reads %q", s)
	}
	f.Close()
	noHidden(t, mnt)
	noHidden(t, export)
}

// TestMountUnlinkOpen: an unlinked open file stays readable and writable;
// nothing is left after the last close.
func TestMountUnlinkOpen(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	testMountUnlinkOpen(t, newMount(t, e).dir, e.dir)
}

// testMountUnlinkOpen is TestMountUnlinkOpen on mount point mnt of export directory export
// (also run against nfs-ganesha: TestMountGanesha/Cases).
func testMountUnlinkOpen(t *testing.T, mnt, export string) {
	p := filepath.Join(mnt, "victim")
	want := randBytes(3, 300000)
	os.WriteFile(p, want, 0o644)
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("stat after unlink: %v", err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil || st.Nlink != 0 {
		t.Errorf("fstat after unlink: nlink %d, %v", st.Nlink, err)
	}
	got := make([]byte, len(want))
	if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read after unlink: %v", err)
	}
	if _, err := f.WriteAt([]byte("more"), int64(len(want))); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	noHidden(t, mnt)
	noHidden(t, export)
}

// TestMountTruncateExtend: shrinking drops data (unwritten data too),
// extending reads zeros; the export agrees.
func TestMountTruncateExtend(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	testMountTruncateExtend(t, newMount(t, e).dir, e.dir)
}

// testMountTruncateExtend is TestMountTruncateExtend on mount point mnt of export directory export
// (also run against nfs-ganesha: TestMountGanesha/Cases).
func testMountTruncateExtend(t *testing.T, mnt, export string) {
	p := filepath.Join(mnt, "t")
	data := randBytes(5, 10000)
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(data)
	if err := f.Truncate(100); err != nil { // with the data still unwritten
		t.Fatal(err)
	}
	if err := f.Truncate(5000); err != nil {
		t.Fatal(err)
	}
	f.Close()
	want := append(append([]byte(nil), data[:100]...), make([]byte, 4900)...)
	if got := mustRead(t, p); !bytes.Equal(got, want) {
		t.Fatalf("mount: %d bytes, want %d (first 100 kept, then zeros)", len(got), len(want))
	}
	if got := mustRead(t, filepath.Join(export, "t")); !bytes.Equal(got, want) {
		t.Fatalf("export: %d bytes, want %d", len(got), len(want))
	}
	if err := os.Truncate(p, 0); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(p); fi.Size() != 0 {
		t.Fatalf("size after truncate to 0: %d", fi.Size())
	}
}

// TestMountSparse: a file written at 0 and far beyond reads zeros in the hole
// and has the size of its end, through the mount and on the export.
func TestMountSparse(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	testMountSparse(t, newMount(t, e).dir, e.dir)
}

// testMountSparse is TestMountSparse on mount point mnt of export directory export
// (also run against nfs-ganesha: TestMountGanesha/Cases).
func testMountSparse(t *testing.T, mnt, export string) {
	p := filepath.Join(mnt, "sparse")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	const far = 64 << 20
	f.WriteAt([]byte("head"), 0)
	f.WriteAt([]byte("tail"), far)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{p, filepath.Join(export, "sparse")} {
		fi, err := os.Stat(q)
		if err != nil || fi.Size() != far+4 {
			t.Fatalf("%s: size %v, %v", q, fi.Size(), err)
		}
		g, _ := os.Open(q)
		buf := make([]byte, 8)
		g.ReadAt(buf, 1<<20)
		if !bytes.Equal(buf, make([]byte, 8)) {
			t.Errorf("%s: hole reads %q", q, buf)
		}
		g.ReadAt(buf[:4], far)
		if string(buf[:4]) != "tail" {
			t.Errorf("%s: tail reads %q", q, buf[:4])
		}
		g.Close()
	}
	var st syscall.Stat_t
	syscall.Stat(filepath.Join(export, "sparse"), &st)
	if st.Blocks*512 > 1<<20 {
		t.Errorf("the export's file uses %d bytes: the hole was written", st.Blocks*512)
	}
}

// TestMountLinksSymlinks: hard links share data and count, symlinks resolve.
func TestMountLinksSymlinks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	testMountLinksSymlinks(t, newMount(t, e).dir, e.dir)
}

// testMountLinksSymlinks is TestMountLinksSymlinks on mount point mnt of export directory export
// (also run against nfs-ganesha: TestMountGanesha/Cases).
func testMountLinksSymlinks(t *testing.T, mnt, export string) {
	a, b := filepath.Join(mnt, "a"), filepath.Join(mnt, "b")
	os.WriteFile(a, []byte("one"), 0o644)
	if err := os.Link(a, b); err != nil {
		t.Fatal(err)
	}
	var sa, sb syscall.Stat_t
	syscall.Stat(a, &sa)
	syscall.Stat(b, &sb)
	if sa.Ino != sb.Ino || sa.Nlink != 2 || sb.Nlink != 2 {
		t.Fatalf("links: ino %d/%d nlink %d/%d", sa.Ino, sb.Ino, sa.Nlink, sb.Nlink)
	}
	os.WriteFile(b, []byte("two"), 0o644)
	if s := string(mustRead(t, a)); s != "two" {
		t.Fatalf("write through one link, read through the other: %q", s)
	}
	os.Remove(a)
	syscall.Stat(b, &sb)
	if sb.Nlink != 1 {
		t.Fatalf("nlink after removing one link: %d", sb.Nlink)
	}
	l := filepath.Join(mnt, "l")
	if err := os.Symlink("b", l); err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(l); err != nil || target != "b" {
		t.Fatalf("readlink: %q %v", target, err)
	}
	if s := string(mustRead(t, l)); s != "two" {
		t.Fatalf("read through symlink: %q", s)
	}
	if fi, err := os.Lstat(l); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("lstat: %v %v", fi.Mode(), err)
	}
	if target, _ := os.Readlink(filepath.Join(export, "l")); target != "b" {
		t.Fatalf("the export's symlink points to %q", target)
	}
}

// TestMountTimes: utimes sets atime and mtime as given; a write moves mtime.
func TestMountTimes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	testMountTimes(t, newMount(t, e).dir, e.dir)
}

// testMountTimes is TestMountTimes on mount point mnt of export directory export
// (also run against nfs-ganesha: TestMountGanesha/Cases).
func testMountTimes(t *testing.T, mnt, export string) {
	p := filepath.Join(mnt, "t")
	os.WriteFile(p, []byte("x"), 0o644)
	at, mt := time.Unix(1000000000, 123456789), time.Unix(1100000000, 987654321)
	if err := os.Chtimes(p, at, mt); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{p, filepath.Join(export, "t")} {
		var st syscall.Stat_t
		syscall.Stat(q, &st)
		if st.Mtim.Sec != mt.Unix() || st.Mtim.Nsec != int64(mt.Nanosecond()) || st.Atim.Sec != at.Unix() {
			t.Fatalf("%s: atime %v mtime %v", q, st.Atim, st.Mtim)
		}
	}
	before := time.Now().Add(-2 * time.Second)
	f, _ := os.OpenFile(p, os.O_WRONLY, 0)
	f.Write([]byte("y"))
	f.Close()
	fi, _ := os.Stat(p)
	if fi.ModTime().Before(before) {
		t.Fatalf("mtime after a write: %v", fi.ModTime())
	}
}

// TestMountPermissions: a non-root process (uid 65534, in a child process made
// with setpriv) is refused what the modes refuse, and owns what it creates.
func TestMountPermissions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	testMountPermissions(t, newMount(t, e).dir, e.dir)
}

// testMountPermissions is TestMountPermissions on mount point mnt of export directory export
// (also run against nfs-ganesha: TestMountGanesha/Cases).
func testMountPermissions(t *testing.T, mnt, export string) {
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	os.WriteFile(filepath.Join(mnt, "secret"), []byte("root only"), 0o600)
	os.WriteFile(filepath.Join(mnt, "public"), []byte("everyone"), 0o644)
	os.Mkdir(filepath.Join(mnt, "shared"), 0o777)
	os.Mkdir(filepath.Join(mnt, "closed"), 0o700)
	as := func(script string) (string, error) {
		cmd := command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c", script)
		cmd.Dir = "/"
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	d := mnt
	if out, err := as("cat " + d + "/secret"); err == nil {
		t.Errorf("nobody read a 0600 root file: %q", out)
	}
	if out, err := as("cat " + d + "/public"); err != nil || out != "everyone" {
		t.Errorf("nobody reading a 0644 file: %q %v", out, err)
	}
	if out, err := as("echo hi > " + d + "/public"); err == nil {
		t.Errorf("nobody wrote a 0644 root file: %q", out)
	}
	if out, err := as("ls " + d + "/closed"); err == nil {
		t.Errorf("nobody listed a 0700 root directory: %q", out)
	}
	if out, err := as("echo mine > " + d + "/shared/mine && chmod 0400 " + d + "/shared/mine && cat " + d + "/shared/mine"); err != nil || out != "mine\n" {
		t.Fatalf("nobody creating a file in a 0777 directory: %q %v", out, err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(export, "shared/mine"), &st); err != nil || st.Uid != 65534 || st.Gid != 65534 || st.Mode&0o777 != 0o400 {
		t.Fatalf("the export's file: uid %d gid %d mode %o, %v", st.Uid, st.Gid, st.Mode&0o777, err)
	}
	if out, err := as("echo again >> " + d + "/shared/mine"); err == nil {
		t.Errorf("nobody appended to its own 0400 file: %q", out)
	}
}

// TestMountCloseToOpen: two mounts of one export see each other's files once
// closed, including a rewrite of a file the other has cached (same size, so
// only mtime/ctime tell).
func TestMountCloseToOpen(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	m1, m2 := newMount(t, e), newMount(t, e)
	p1, p2 := filepath.Join(m1.dir, "shared"), filepath.Join(m2.dir, "shared")
	if err := os.WriteFile(p1, []byte("version 1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if s := string(mustRead(t, p2)); s != "version 1" {
		t.Fatalf("second mount reads %q", s)
	}
	for v := 2; v <= 4; v++ {
		want := "version " + string(rune('0'+v))
		from, to := p1, p2
		if v%2 == 1 {
			from, to = p2, p1
		}
		f, err := os.OpenFile(from, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteAt([]byte(want), 0)
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if s := string(mustRead(t, to)); s != want {
			t.Fatalf("after close on one mount, the other reads %q, want %q", s, want)
		}
	}
	// A longer file written on one mount: the other reads all of it (its
	// cached size is updated at open).
	long := randBytes(9, 100000)
	os.WriteFile(p1, long, 0o644)
	if got := mustRead(t, p2); !bytes.Equal(got, long) {
		t.Fatalf("grown file: the other mount reads %d bytes", len(got))
	}
	// A new file and a removal are seen by name.
	os.WriteFile(filepath.Join(m2.dir, "new"), []byte("n"), 0o644)
	if s := string(mustRead(t, filepath.Join(m1.dir, "new"))); s != "n" {
		t.Fatalf("new file from the other mount: %q", s)
	}
}

// TestMountVerifierChange: data written UNSTABLE before a server restart is
// rewritten after the COMMIT shows the new verifier; nothing is lost. The
// mount reaches the server through a fault proxy; the first COMMIT of the
// file (sent after every WRITE it covers was answered, with the first
// server's verifier) partitions the proxy and resets its connections there,
// on the first server, so that its reply is lost; the server is restarted
// and the partition healed: the mount sends the COMMIT again, to the new
// server. (It was timing-dependent, and serial, when the restart was simply
// made in the middle of the writes.)
func TestMountVerifierChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	p := newProxy(t, e.addr)
	var first atomic.Bool
	held := make(chan struct{})
	e.restartWith(func(c *server.Config) {
		c.Sync = func(n *store.Node, dataOnly bool) error {
			// The file's CREATE is flushed too, empty.
			if n.Stat.Mode&syscall.S_IFMT == syscall.S_IFREG && n.Stat.Size > 0 && first.CompareAndSwap(false, true) {
				p.Partition(0) // new connections wait until Heal
				p.Reset()      // this COMMIT's reply goes nowhere
				close(held)
			}
			return store.SyncNode(n, dataOnly)
		}
	})
	m := newMountAt(t, e, p.Addr(), vfs.Config{})
	want := randBytes(11, 12<<20) // over the dirty limit: some is sent before close
	wrote := make(chan error, 1)
	go func() {
		f, err := os.Create(filepath.Join(m.dir, "f"))
		if err == nil {
			_, err = f.Write(want)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		wrote <- err
	}()
	select {
	case <-held:
	case err := <-wrote:
		t.Fatalf("the file was written and closed (%v) with no COMMIT", err)
	case <-time.After(time.Minute):
		t.Fatal("no COMMIT a minute after the writes began")
	}
	e.restart()
	p.Heal()
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, e.path("f")); !bytes.Equal(got, want) {
		t.Fatalf("the export has %d bytes, different", len(got))
	}
	if m.v.Stats().Rewrites.Load() == 0 {
		t.Error("no rewrite after the verifier changed")
	}
}
