package cachemgr

import (
	"context"
	"syscall"
	"testing"

	"snfs/mount/vfs"
)

// TestPathOf: a file's path for messages follows what the mount saw: its
// directories from the root, a rename through the mount, the mount point
// before it; a directory the mount forgot makes the path say so; the root is
// the mount point.
func TestPathOf(t *testing.T) {
	ctx := context.Background()
	v, _, fe, f := restartTestFile(t)
	if err := v.Release(ctx, f); err != nil {
		t.Fatal(err)
	}
	v.Cfg.MountPoint = "/mnt/share"
	if got := v.PathOf(v.Root()); got != "/mnt/share" {
		t.Errorf("root: %q; want /mnt/share", got)
	}
	if got := v.PathOf(fe.Inode); got != "/mnt/share/f" {
		t.Errorf("f: %q; want /mnt/share/f", got)
	}
	a, err := v.Mkdir(ctx, v.Root(), vfs.Cred{}, "a", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	b, err := v.Mkdir(ctx, a.Inode, vfs.Cred{}, "b", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	ge, g, err := v.Create(ctx, b.Inode, vfs.Cred{}, "g", 0o644, false, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	if got := v.PathOf(ge.Inode); got != "/mnt/share/a/b/g" {
		t.Errorf("g: %q; want /mnt/share/a/b/g", got)
	}
	if err := v.Rename(ctx, b.Inode, "g", a.Inode, "h", vfs.Cred{}, nil, ge.Inode, false); err != nil {
		t.Fatal(err)
	}
	if got := v.PathOf(ge.Inode); got != "/mnt/share/a/h" {
		t.Errorf("g renamed to a/h: %q; want /mnt/share/a/h", got)
	}
	// A new lookup from another directory, as after another client's rename.
	if _, err := v.Lookup(ctx, a.Inode, vfs.Cred{}, "b"); err != nil {
		t.Fatal(err)
	}
	if err := v.Rename(ctx, a.Inode, "h", b.Inode, "k", vfs.Cred{}, nil, nil, false); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Lookup(ctx, b.Inode, vfs.Cred{}, "k"); err != nil {
		t.Fatal(err)
	}
	if got := v.PathOf(ge.Inode); got != "/mnt/share/a/b/k" {
		t.Errorf("after a rename the mount did not see and a lookup: %q; want /mnt/share/a/b/k", got)
	}
	// The kernel forgets a: the path's directories above b are not known.
	v.Forget(a.Inode)
	if got := v.PathOf(ge.Inode); got != "(unknown directory)/b/k" {
		t.Errorf("a forgotten: %q; want (unknown directory)/b/k", got)
	}
}
