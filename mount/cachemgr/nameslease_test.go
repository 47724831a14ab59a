package cachemgr

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"snfs/internal/faultproxy"
	"snfs/mount/vfs"
	"snfs/nfs3"
)

// The lease of the directory name cache (names.go; docs/protocol.md 20.4)
// across a partition: the rule kept opens follow (keptlease.go) holds for
// cached listings too.

// TestNameCacheAfterPartition: A has a listing of the root cached under its
// promise and is cut off (its connection intact) for longer than the
// callback timeout while B creates g there: B's CREATE waits until the
// server's INVALIDATE of the root to A times out. The partition heals from
// A to the server first; the server's messages to A, that INVALIDATE among
// them, come a moment later. A's lookup of g, sent meanwhile, must find it:
// the NULL that renews A's lapsed lease is answered after the INVALIDATE,
// and a listing must not be trusted while a callback read before that
// reply is still being served.
func TestNameCacheAfterPartition(t *testing.T) {
	p, a, b, _, _ := keptLeaseSetup(t, []byte("f's bytes"))
	ctx := context.Background()
	if _, err := a.Lookup(ctx, a.Root(), vfs.Cred{}, "g"); !errors.Is(err, nfs3.ErrNoEnt) {
		t.Fatalf("A's lookup of g before B made it: %v; want NOENT", err)
	}
	nc := mgrOf(a).names
	misses := nc.Stats().Misses
	if _, err := a.Lookup(ctx, a.Root(), vfs.Cred{}, "g"); !errors.Is(err, nfs3.ErrNoEnt) {
		t.Fatalf("A's second lookup of g: %v; want NOENT", err)
	}
	if nc.Stats().Misses == misses {
		t.Fatal("A's second lookup of g was not answered from the cached listing of the root")
	}
	p.Stall(faultproxy.ClientToServer)
	p.Stall(faultproxy.ServerToClient)
	start := time.Now()
	_, f, err := b.Create(ctx, b.Root(), vfs.Cred{}, "g", 0o644, true, syscall.O_RDWR)
	if err != nil {
		t.Fatalf("B's create of g: %v", err)
	}
	if d := time.Since(start); d < keptLeaseCBT {
		t.Fatalf("B's create returned after %v, within the callback timeout: A was not called back", d)
	}
	if err := b.Release(ctx, f); err != nil {
		t.Fatal(err)
	}
	p.Restore(faultproxy.ClientToServer)
	got := make(chan error, 1)
	go func() {
		_, err := a.Lookup(ctx, a.Root(), vfs.Cred{}, "g")
		got <- err
	}()
	time.Sleep(300 * time.Millisecond)
	p.Restore(faultproxy.ServerToClient)
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("A's lookup of g after the partition: %v; want B's file", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("A's lookup of g did not end within 30 s of the partition's end")
	}
}
