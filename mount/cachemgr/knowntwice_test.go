package cachemgr

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"snfs/mount/vfs"
	"snfs/state"
)

// TestKnownAgainReplacesIdleTwin: an inode dropped (the kernel's FORGET
// raced with a lookup) while a lookup made another inode of its handle, and
// then used again by the kernel's node (vfs.FS.Known at its open), is the
// one callbacks find: a rewrite through it is written back before the
// callback is answered. With the other inode in the table the callback
// found no dirty data and answered at once, and the reader got the bytes
// before the rewrite whose close had returned (TestCrashCycles' stale
// reads).
func TestKnownAgainReplacesIdleTwin(t *testing.T) {
	s := newServer(t, true)
	v, sn, d := permitsMount(t, s, "known-twice")
	srv := filepath.Join(s.export, "d", "f")
	if err := os.WriteFile(srv, []byte("old old old"), 0o666); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e, err := v.Lookup(ctx, d, vfs.Cred{}, "f")
	if err != nil {
		t.Fatal(err)
	}
	x := e.Inode
	v.Forget(x) // the kernel's FORGET: nothing keeps it
	if v.LookupInode(x.FH) != nil {
		t.Fatal("not dropped")
	}
	e2, err := v.Lookup(ctx, d, vfs.Cred{}, "f") // a lookup after the drop
	if err != nil {
		t.Fatal(err)
	}
	if e2.Inode == x {
		t.Fatal("the lookup did not make another inode")
	}
	v.Known(x) // the kernel's node of x is used again (an open)
	f, _, err := v.Open(ctx, x, vfs.Cred{}, syscall.O_WRONLY|syscall.O_TRUNC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sn.Write(ctx, f, 0, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if err := sn.Flush(ctx, f); err != nil {
		t.Fatal(err)
	}
	if err := v.Release(ctx, f); err != nil {
		t.Fatal(err)
	}
	// Another client's open: the server asks for the data.
	sn.Callback(ctx, x.FH, state.Writeback, nil)
	if got, err := os.ReadFile(srv); err != nil || string(got) != "new" {
		t.Fatalf("the server's file once the callback is answered: %q, %v; want %q", got, err, "new")
	}
}
