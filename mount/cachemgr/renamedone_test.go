package cachemgr

import (
	"context"
	"errors"
	"testing"

	"snfs/mount/vfs"
	"snfs/nfs3"
)

// TestRenameAnsweredNoEntDone: a RENAME answered NFS3ERR_NOENT whose object
// is at the new name already, and gone from the old, is done
// (vfs.FS.renamedAlready): so it is when the server applied the call and
// restarted before it saved the reply, and the call sent again found no
// source; here B makes the very same rename first. A's rename of f (its
// inode known) to g succeeds; a rename of a name that is simply missing
// still fails NOENT.
func TestRenameAnsweredNoEntDone(t *testing.T) {
	a, b, ia, _ := twoSNFS(t, 0, []byte("f's bytes"))
	ctx := context.Background()
	var c vfs.Cred
	if err := b.Rename(ctx, b.Root(), "f", b.Root(), "g", c, nil, nil, false); err != nil {
		t.Fatal(err)
	}
	if err := a.Rename(ctx, a.Root(), "f", a.Root(), "g", c, nil, ia, false); err != nil {
		t.Fatalf("A's rename of f to g, which B made already: %v; want done", err)
	}
	if err := a.Rename(ctx, a.Root(), "nothing", a.Root(), "h", c, nil, ia, false); !errors.Is(err, nfs3.ErrNoEnt) {
		t.Fatalf("A's rename of a missing name (its object elsewhere): %v; want NOENT", err)
	}
	e, err := a.Lookup(ctx, a.Root(), c, "g")
	if err != nil || e.Inode != ia {
		t.Fatalf("A's lookup of g: %v (same inode as f's: %v)", err, err == nil && e.Inode == ia)
	}
}
