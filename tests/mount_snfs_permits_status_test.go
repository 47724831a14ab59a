package tests

import (
	"context"
	"os"
	"testing"
	"time"

	"snfs/mount/cachemgr"
)

// TestMountSNFSPermitsDataStatusDirty: the data of a file made locally, kept
// in the mount's local store until its reintegration (--permit-data=on), is
// data written on the mount and not yet on the server: snfs status's "not yet
// on the server" (and snfs_client_dirty_bytes) counts it until it is pushed.
func TestMountSNFSPermitsDataStatusDirty(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	a := newPermitDataMountKept(t, e, "A")
	if err := os.WriteFile(a.path("f"), []byte("dirty for an hour"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, ok := cachemgr.StatusOf(a.v, 0)
	if !ok || st.DirtyBytes != 17 || st.DirtyFiles != 1 {
		t.Fatalf("status before the reintegration: %d bytes in %d files not on the server (snfs mode %v); want 17 in 1",
			st.DirtyBytes, st.DirtyFiles, ok)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := a.v.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, e.path("f")); string(got) != "dirty for an hour" {
		t.Fatalf("the export has %q after the sync", got)
	}
	if st, _ := cachemgr.StatusOf(a.v, 0); st.DirtyBytes != 0 || st.DirtyFiles != 0 {
		t.Errorf("status after the sync: %d bytes in %d files not on the server; want none", st.DirtyBytes, st.DirtyFiles)
	}
}
