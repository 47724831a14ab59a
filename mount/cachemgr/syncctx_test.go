package cachemgr

import (
	"context"
	"syscall"
	"testing"
	"time"

	"snfs/mount/vfs"
)

// A sync whose context is already done must not report success while
// dirty files were not written back.
func TestSyncCancelledReportsUnsent(t *testing.T) {
	addr, exp := testServer(t)
	ctx := context.Background()
	a := quietMount(t, addr, exp, "A", 0)
	for _, n := range []string{"x", "y", "z"} {
		_, f, err := a.Create(ctx, a.Root(), vfs.Cred{}, n, 0o644, false, syscall.O_WRONLY|syscall.O_CREAT)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Write(ctx, f, 0, []byte("acknowledged")); err != nil {
			t.Fatal(err)
		}
		a.Release(ctx, f)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	err := mgrOf(a).snfsSync(cctx)
	left := len(mgrOf(a).dirtyInodes(time.Time{}))
	if err == nil && left > 0 {
		t.Errorf("snfsSync with a done context returned nil with %d files still dirty", left)
	}
}
