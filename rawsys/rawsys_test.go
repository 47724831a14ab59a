package rawsys

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// testDir is a fresh directory on a disk file system, opened as a descriptor.
func testDir(t *testing.T) (string, int) {
	t.Helper()
	base := os.Getenv("SNFS_TEST_DIR")
	if base == "" {
		base = "/var/tmp"
	}
	dir, err := os.MkdirTemp(base, "rawsys-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return dir, fd
}

// TestNamespaceOps runs each call against the same directory and checks its effect
// with the ordinary (x/sys/unix) calls, and that errors are the kernel's errno.
func TestNamespaceOps(t *testing.T) {
	dir, dfd := testDir(t)
	fd, err := Openat(dfd, "f", unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Openat(dfd, "f", unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, 0o640); !errors.Is(err, unix.EEXIST) {
		t.Fatalf("exclusive create of an existing name: %v, want EEXIST", err)
	}
	if n, err := Pwrite(fd, []byte("hello"), 3); n != 5 || err != nil {
		t.Fatalf("pwrite: %d, %v", n, err)
	}
	var st, ref unix.Stat_t
	if err := Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(filepath.Join(dir, "f"), &ref); err != nil {
		t.Fatal(err)
	}
	if st.Ino != ref.Ino || st.Size != 8 || st.Mode&0o777 != 0o640 {
		t.Fatalf("fstat: ino %d size %d mode %o; stat says ino %d", st.Ino, st.Size, st.Mode, ref.Ino)
	}
	if err := Fstatat(dfd, "missing", &st, unix.AT_SYMLINK_NOFOLLOW); !errors.Is(err, unix.ENOENT) {
		t.Fatalf("fstatat of a missing name: %v, want ENOENT", err)
	}
	if err := Fchmodat(dfd, "f", 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Fchownat(dfd, "f", 1234, 5678, unix.AT_SYMLINK_NOFOLLOW); err != nil && !errors.Is(err, unix.EPERM) {
		t.Fatal(err)
	}
	ts := []unix.Timespec{{Sec: 1000, Nsec: 1}, {Sec: 2000, Nsec: 2}}
	if err := UtimesNanoAt(dfd, "f", ts, 0); err != nil {
		t.Fatal(err)
	}
	if err := UtimesNanoAt(dfd, "f", ts[:1], 0); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("utimensat with one time: %v, want EINVAL", err)
	}
	if err := Fstatat(dfd, "f", &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o777 != 0o600 || st.Atim.Sec != 1000 || st.Mtim.Sec != 2000 || st.Mtim.Nsec != 2 {
		t.Fatalf("after chmod and utimensat: mode %o atime %v mtime %v", st.Mode&0o777, st.Atim, st.Mtim)
	}
	if os.Geteuid() == 0 && (st.Uid != 1234 || st.Gid != 5678) {
		t.Fatalf("after fchownat as root: %d:%d", st.Uid, st.Gid)
	}
	if err := Faccessat2(dfd, "f", unix.R_OK, unix.AT_EACCESS); err != nil {
		t.Fatal(err)
	}
	if err := Close(fd); err != nil {
		t.Fatal(err)
	}
	if err := Close(fd); !errors.Is(err, unix.EBADF) {
		t.Fatalf("second close: %v, want EBADF", err)
	}

	if err := Mkdirat(dfd, "d", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Symlinkat("f", dfd, "l"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	if n, err := Readlinkat(dfd, "l", buf); err != nil || string(buf[:n]) != "f" {
		t.Fatalf("readlinkat: %q, %v", buf[:n], err)
	}
	if err := Linkat(dfd, "f", dfd, "g", 0); err != nil {
		t.Fatal(err)
	}
	if err := Renameat(dfd, "g", dfd, "d/h"); err != nil {
		t.Fatal(err)
	}
	if err := Mknodat(dfd, "p", unix.S_IFIFO|0o600, 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Lstat(filepath.Join(dir, "d", "h"), &ref); err != nil || ref.Nlink != 2 {
		t.Fatalf("after link and rename: nlink %d, %v", ref.Nlink, err)
	}
	if err := Unlinkat(dfd, "d", unix.AT_REMOVEDIR); !errors.Is(err, unix.ENOTEMPTY) {
		t.Fatalf("rmdir of a non-empty directory: %v, want ENOTEMPTY", err)
	}
	for _, name := range []string{"d/h", "l", "p", "f"} {
		if err := Unlinkat(dfd, name, 0); err != nil {
			t.Fatalf("unlink %s: %v", name, err)
		}
	}
	if err := Unlinkat(dfd, "d", unix.AT_REMOVEDIR); err != nil {
		t.Fatal(err)
	}
	if err := Fstatat(dfd, "bad\x00name", &st, 0); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("a name with a NUL: %v, want EINVAL", err)
	}
}

// TestHandles: a handle from NameToHandleAt is the one x/sys/unix gives, and
// opens the same object again.
func TestHandles(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("open_by_handle_at needs CAP_DAC_READ_SEARCH: run as root")
	}
	dir, dfd := testDir(t)
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	h, mid, err := NameToHandleAt(dfd, "f", 0)
	if err != nil {
		t.Fatal(err)
	}
	ref, refMID, err := unix.NameToHandleAt(dfd, "f", 0)
	if err != nil {
		t.Fatal(err)
	}
	if mid != refMID || h.Type() != ref.Type() || !bytes.Equal(h.Bytes(), ref.Bytes()) {
		t.Fatalf("handle %d/%x mount %d, x/sys says %d/%x mount %d", h.Type(), h.Bytes(), mid, ref.Type(), ref.Bytes(), refMID)
	}
	fd, err := OpenByHandleAt(dfd, h, unix.O_PATH|unix.O_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	var a, b unix.Stat_t
	if err := Fstat(fd, &a); err != nil {
		t.Fatal(err)
	}
	Close(fd)
	if err := Fstatat(dfd, "f", &b, 0); err != nil || a.Ino != b.Ino {
		t.Fatalf("opened inode %d, name has %d (%v)", a.Ino, b.Ino, err)
	}
	// With no descriptor left, the removed inode is gone and so is its handle.
	if err := os.Remove(filepath.Join(dir, "f")); err != nil {
		t.Fatal(err)
	}
	if fd, err := OpenByHandleAt(dfd, h, unix.O_PATH); !errors.Is(err, unix.ESTALE) {
		Close(fd)
		t.Fatalf("handle of a removed file: %v, want ESTALE", err)
	}
}

// TestGetdentsSeek lists a directory in small reads, seeks back and reads again.
func TestGetdentsSeek(t *testing.T) {
	dir, _ := testDir(t)
	for _, n := range []string{"a", "b", "c"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fd, err := Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer Close(fd)
	count := func() int {
		names := 0
		buf := make([]byte, 64) // a few entries per call
		for {
			n, err := Getdents(fd, buf)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				return names
			}
			for off := 0; off < n; {
				reclen := int(buf[off+16]) | int(buf[off+17])<<8
				names++
				off += reclen
			}
		}
	}
	if got := count(); got != 5 { // with . and ..
		t.Fatalf("first pass: %d entries, want 5", got)
	}
	if off, err := Seek(fd, 0, 0); off != 0 || err != nil {
		t.Fatalf("seek: %d, %v", off, err)
	}
	if got := count(); got != 5 {
		t.Fatalf("after seek: %d entries, want 5", got)
	}
	Seek(fd, 0, 0)
	if _, err := Getdents(fd, nil); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("getdents into no buffer: %v, want EINVAL", err)
	}
}

// TestReadWritev: Writev and Read on a non-blocking socket pair, through a full
// buffer (EAGAIN) and back.
func TestReadWritev(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	if _, err := Read(fds[1], make([]byte, 8)); !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("read of an empty socket: %v, want EAGAIN", err)
	}
	a, b := []byte("abc"), []byte("defg")
	iov := []unix.Iovec{{Base: &a[0]}, {Base: &b[0]}}
	iov[0].SetLen(len(a))
	iov[1].SetLen(len(b))
	if n, err := Writev(fds[0], iov); n != 7 || err != nil {
		t.Fatalf("writev: %d, %v", n, err)
	}
	buf := make([]byte, 16)
	if n, err := Read(fds[1], buf); n != 7 || err != nil || string(buf[:n]) != "abcdefg" {
		t.Fatalf("read: %q, %v", buf[:n], err)
	}
	big := make([]byte, 1<<20)
	iov = []unix.Iovec{{Base: &big[0]}}
	iov[0].SetLen(len(big))
	total := 0
	for {
		n, err := Writev(fds[0], iov)
		if errors.Is(err, unix.EAGAIN) {
			break
		}
		if err != nil || n == 0 {
			t.Fatalf("writev into a filling socket: %d, %v", n, err)
		}
		total += n
	}
	if total == 0 || total >= 64<<20 {
		t.Fatalf("a non-blocking socket took %d bytes before EAGAIN", total)
	}
}
