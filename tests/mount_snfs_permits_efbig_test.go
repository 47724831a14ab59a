package tests

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestMountSNFSPermitsDataTruncateTooBig: a file made locally keeps its data
// in the mount's local store (--permit-data=on); a truncation or a write
// beyond what the local file system takes fails as the server's would have
// (EFBIG, pjdfstest's truncate/12.t and ftruncate/12.t), not with EIO, and
// leaves the file as it was.
func TestMountSNFSPermitsDataTruncateTooBig(t *testing.T) {
	t.Parallel()
	const huge = 999999999999999
	requireSizeRefused(t, huge)
	e := newEnv(t, "rw,no_root_squash")
	a := newPermitDataMount(t, e, "A", "")
	f, err := os.Create(a.path("f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	refusedTooBig(t, a.path("f"), f, huge)
	if st, err := os.Stat(a.path("f")); err != nil || st.Size() != 0 {
		t.Fatalf("the file after the refused truncations: %v, %v; want it empty", st, err)
	}
}

// TestMountSNFSCachedTruncateTooBig: a file the server made, cached here and
// open for writing (its size changes are made in the cache and written back
// later), refuses a truncation or a write beyond what the cache's local file
// system takes as the server would have (EFBIG), not with EIO, and keeps
// its data (pjdfstest's truncate/12.t failed so in snfs mode whenever its
// file was not made under a permit).
func TestMountSNFSCachedTruncateTooBig(t *testing.T) {
	t.Parallel()
	const huge = 999999999999999
	requireSizeRefused(t, huge)
	e := newEnv(t, "rw,no_root_squash")
	a := newSNFSMountDelayed(t, e, "A", 30*time.Second, 2*time.Second)
	if err := os.WriteFile(filepath.Join(e.dir, "f"), []byte("server"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(a.path("f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte("S"), 0); err != nil {
		t.Fatal(err)
	}
	refusedTooBig(t, a.path("f"), f, huge)
	if b, err := os.ReadFile(a.path("f")); err != nil || string(b) != "Server" {
		t.Errorf("the file after the refused changes: %q, %v; want \"Server\"", b, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	a.unmount(t)
	if b, err := os.ReadFile(filepath.Join(e.dir, "f")); err != nil || string(b) != "Server" {
		t.Errorf("the server's file: %q, %v; want \"Server\"", b, err)
	}
}

// requireSizeRefused skips the test unless the file system of the tests'
// caches and exports (/var/tmp: diskTempDir) refuses a file of size bytes,
// as ext4 does past 16 TiB; on one that takes it, so would the mount.
func requireSizeRefused(t *testing.T, size int64) {
	t.Helper()
	p := filepath.Join(diskTempDir(t, "snfs-fbig-"), "probe")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, size); err == nil {
		t.Skipf("the file system of /var/tmp takes a file of %d bytes", size)
	}
}

// refusedTooBig checks that a truncation of path and of f (an open of it for
// writing) to size bytes and a write at size fail with EFBIG or EINVAL.
func refusedTooBig(t *testing.T, path string, f *os.File, size int64) {
	t.Helper()
	tooBig := func(err error) bool { return errors.Is(err, syscall.EFBIG) || errors.Is(err, syscall.EINVAL) }
	if err := os.Truncate(path, size); !tooBig(err) {
		t.Errorf("truncate to %d bytes: %v, want EFBIG or EINVAL", size, err)
	}
	if err := f.Truncate(size); !tooBig(err) {
		t.Errorf("ftruncate to %d bytes: %v, want EFBIG or EINVAL", size, err)
	}
	if _, err := f.WriteAt([]byte("x"), size); !tooBig(err) {
		t.Errorf("a write at %d: %v, want EFBIG or EINVAL", size, err)
	}
}
