package cachemgr

import (
	"context"
	"syscall"
	"testing"

	"snfs/mount/vfs"
)

// TestProvInodeKnownAgainResolves: a file made locally and reintegrated
// (its record settled), whose inode a FORGET dropped while a lookup that
// raced with it gave the kernel its node again (vfs.FS.Known puts the inode
// back), resolves to the file the server made: the kernel's node of it
// keeps working instead of failing ESTALE for as long as the kernel keeps
// it (found by TestCrashCycles: a mount's reads of a file it had created
// failed "stale file handle" until the test gave up).
func TestProvInodeKnownAgainResolves(t *testing.T) {
	s := newServer(t, true)
	v, sn, d := permitsMount(t, s, "prov-known-again")
	holdPermit(t, sn, d)
	ctx := context.Background()
	if _, err := v.ReadDir(ctx, d, vfs.Cred{}); err != nil {
		t.Fatal(err)
	}
	e, f, err := v.Create(ctx, d, vfs.Cred{}, "p", 0o644, false, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	if !isProvFH(e.Inode.FH) {
		t.Fatalf("the create was not made locally (handle %x)", e.Inode.FH)
	}
	if err := v.Release(ctx, f); err != nil {
		t.Fatal(err)
	}
	if err := sn.permits.flush(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	ri, err := v.Resolve(ctx, e.Inode, false)
	if err != nil || isProvFH(ri.FH) {
		t.Fatalf("resolve once reintegrated: %v, %v", ri, err)
	}
	// The kernel's FORGET of its node: nothing else keeps the inode.
	v.Forget(e.Inode)
	if v.LookupInode(e.Inode.FH) != nil {
		t.Fatal("the provisional inode was not dropped")
	}
	// A lookup that raced with the FORGET gave the kernel the node again.
	v.Known(e.Inode)
	got, err := v.Resolve(ctx, e.Inode, false)
	if err != nil {
		t.Fatalf("resolve of the inode known again: %v", err)
	}
	if string(got.FH) != string(ri.FH) {
		t.Fatalf("resolved to %x, want the server's file %x", got.FH, ri.FH)
	}
}
