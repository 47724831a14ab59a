package store

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// diskTempDir is a new directory under /var/tmp (a disk file system, unlike
// t.TempDir's /tmp on some machines), removed after the test.
func diskTempDir(t *testing.T, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// TestOpenFileWaitsForLease: an open that must break another descriptor's lease
// still succeeds once the lease is given up (the non-blocking raw open fails
// with EWOULDBLOCK and the open is made again, blocking), and the descriptor it
// returns reads and writes.
func TestOpenFileWaitsForLease(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("taking a lease on a file of another owner needs CAP_LEASE: run as root")
	}
	dir := diskTempDir(t, "snfs-openfile-")
	path := filepath.Join(dir, "leased")
	if err := os.WriteFile(path, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	holder, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(holder)
	if _, err := unix.FcntlInt(uintptr(holder), unix.F_SETLEASE, unix.F_RDLCK); err != nil {
		t.Skipf("cannot take a read lease here: %v", err)
	}
	if _, err := unix.Open(path, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err != unix.EWOULDBLOCK {
		t.Skipf("a conflicting open in this process does not break the lease (%v)", err)
	}
	var releasing atomic.Bool // set just before the lease is given up
	go func() {
		time.Sleep(50 * time.Millisecond)
		releasing.Store(true)
		unix.FcntlInt(uintptr(holder), unix.F_SETLEASE, unix.F_UNLCK)
	}()
	fd, err := openFile(path, unix.O_RDWR|unix.O_CLOEXEC)
	if err != nil {
		t.Fatalf("open past a lease: %v", err)
	}
	defer unix.Close(fd)
	if !releasing.Load() {
		t.Fatal("the open returned while the lease was still held")
	}
	if _, err := unix.Pwrite(fd, []byte("D"), 0); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if n, err := unix.Pread(fd, buf, 0); err != nil || string(buf[:n]) != "Data" {
		t.Fatalf("read back %q, %v", buf[:n], err)
	}
}
