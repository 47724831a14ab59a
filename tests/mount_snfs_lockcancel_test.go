package tests

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestMountSNFSLockWaitKilledBeforeBlocked: in snfs mode, a waiter killed
// after the server queued its blocking LOCK but before the BLOCKED reply
// reached the mount leaves no waiting request at the server: the mount
// withdraws (LOCKU with cancel) a LOCK it gave up, answered or not. (Its
// absence failed TestMountSNFSLockWait under load in CI.)
func TestMountSNFSLockWaitKilledBeforeBlocked(t *testing.T) {
	requireFUSE(t)
	e := newEnv(t, "rw,no_root_squash")
	a := newSNFSMount(t, e, "A", "", time.Hour)
	g := newReplyGate(t, e.addr)
	dir := diskTempDir(t, "snfs-mnt-")
	bg, err := mountSNFS(g.addr(), e.cfg.Exports[0].Path, "gated-B", dir, diskTempDir(t, "snfs-cache-"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bg.unmount(t) })
	fa := openRW(t, a.path("db"))
	openRW(t, bg.path("db")).Close()
	if err := setlk(fa, unix.F_WRLCK, 0, 0); err != nil {
		t.Fatal(err)
	}

	// The child opens the file (its OPEN answered), then waits to be told
	// before its F_SETLKW, so that only the LOCK's reply is held.
	c := startGatedLockChild(t, bg.path("db"))
	c.expect(t, "ready")
	killed, killing := make(chan struct{}), false

	g.hold.Lock()
	held := true
	release := func() {
		if held {
			held = false
			g.hold.Unlock()
		}
	}
	defer func() {
		release()
		if killing {
			<-killed
		}
	}()
	c.go_()
	waitWaiters(t, e, 1) // queued at the server; its BLOCKED reply is held
	killing = true
	go func() { c.kill(); close(killed) }()
	waitWaiters(t, e, 0)
	release()
	<-killed
	if err := setlk(fa, unix.F_UNLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := localLock(t, e.path("db"), unix.F_WRLCK, 0, 0); err != nil {
		t.Fatalf("a local lock after A's unlock: %v (the killed waiter holds it?)", err)
	}
}
