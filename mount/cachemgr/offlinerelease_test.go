package cachemgr

import (
	"runtime"
	"syscall"
	"testing"
)

// TestOfflineRemoveWaitsEveryRelease: offline, a file made offline is
// written and closed, then read back and closed, and the first open's
// RELEASE comes after the second's (the kernel sends RELEASEs without
// waiting for them: a loaded machine delivered one late, and
// TestMountDisconnectedInProcessTree's unlink failed with EHOSTDOWN). The
// unlink waits for every open whose close was seen, not only the latest,
// and is made offline once the late RELEASE comes.
func TestOfflineRemoveWaitsEveryRelease(t *testing.T) {
	addr, exp := testServer(t)
	a := openOffline(t, addr, exp, nil)
	ctx, c := a.ctx, a.c
	sn := a.Ops().(*snfsFS)
	d, err := a.Mkdir(ctx, a.Root(), c, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	a.listed(d.Inode)
	a.setOffline(true)

	e, w, err := a.Create(ctx, d.Inode, c, "f", 0o644, true, syscall.O_WRONLY)
	if err != nil {
		t.Fatalf("create offline: %v", err)
	}
	if _, err := a.Write(ctx, w, 0, []byte("data")); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(ctx, w); err != nil { // its close; its RELEASE is late
		t.Fatal(err)
	}
	r, _, err := a.Open(ctx, e.Inode, c, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, r); err != nil {
		t.Fatal(err)
	}

	done := make(chan error, 1)
	go func() { done <- a.Remove(ctx, d.Inode, c, "f", e.Inode) }()
	// The write open's RELEASE once the unlink is at its check (it holds
	// the offline changes' lock while it waits), or after it if it did not
	// wait.
	var (
		rerr error
		got  bool
	)
	for released := false; !released; {
		select {
		case rerr = <-done:
			released, got = true, true
		default:
			if !sn.permits.off.change.TryLock() {
				released = true
				break
			}
			sn.permits.off.change.Unlock()
			runtime.Gosched()
		}
	}
	if err := a.Release(ctx, w); err != nil {
		t.Fatal(err)
	}
	if !got {
		rerr = <-done
	}
	if rerr != nil {
		t.Fatalf("unlink offline of a file closed twice, its first RELEASE late: %v; want made offline", rerr)
	}
	if _, err := a.Lookup(ctx, d.Inode, c, "f"); err == nil {
		t.Fatal("f still there after its unlink")
	}
}
