package tests

import (
	"errors"
	"os"
	"syscall"
	"testing"
)

// TestMountSNFSPermitsDataTruncateTooBig: a file made locally keeps its data
// in the mount's local store (--permit-data=on); a truncation or a write
// beyond what the local file system takes fails as the server's would have
// (EFBIG, pjdfstest's truncate/12.t and ftruncate/12.t), not with EIO, and
// leaves the file as it was.
func TestMountSNFSPermitsDataTruncateTooBig(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	a := newPermitDataMount(t, e, "A", "")
	f, err := os.Create(a.path("f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const huge = 999999999999999
	if err := os.Truncate(a.path("f"), huge); !errors.Is(err, syscall.EFBIG) && !errors.Is(err, syscall.EINVAL) {
		t.Errorf("truncate to %d bytes: %v, want EFBIG or EINVAL", huge, err)
	}
	if err := f.Truncate(huge); !errors.Is(err, syscall.EFBIG) && !errors.Is(err, syscall.EINVAL) {
		t.Errorf("ftruncate to %d bytes: %v, want EFBIG or EINVAL", huge, err)
	}
	if _, err := f.WriteAt([]byte("x"), huge); !errors.Is(err, syscall.EFBIG) && !errors.Is(err, syscall.EINVAL) {
		t.Errorf("a write at %d: %v, want EFBIG or EINVAL", huge, err)
	}
	if st, err := os.Stat(a.path("f")); err != nil || st.Size() != 0 {
		t.Fatalf("the file after the refused truncations: %v, %v; want it empty", st, err)
	}
}
