package cachemgr

import (
	"context"
	"syscall"
	"testing"

	"snfs/mount/vfs"
	"snfs/state/clientfile"
)

// Root (no_root_squash) creates a file with mode 0444, closes it (kept),
// and opens it for writing again: the kernel lets root, the server lets
// root (and the owner); the seeded access cache refuses.
func TestRootReopen0444Created(t *testing.T) {
	addr, exp := testServer(t)
	ctx := context.Background()
	a := quietMount(t, addr, exp, "A", clientfile.UntilRecalled)
	root := vfs.Cred{}
	e, f, err := a.Create(ctx, a.Root(), root, "g", 0o444, false, syscall.O_WRONLY|syscall.O_CREAT)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write(ctx, f, 0, []byte("a")); err != nil {
		t.Fatal(err)
	}
	a.Release(ctx, f)
	g, _, err := a.Open(ctx, e.Inode, root, syscall.O_WRONLY)
	if err != nil {
		t.Fatalf("root's reopen for writing of the 0444 file it created (kept open): %v", err)
	}
	a.Release(ctx, g)
}
