package tests

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
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

	// The child opens the file (its OPEN answered), then waits for a line
	// before its F_SETLKW, so that only the LOCK's reply is held.
	cmd := exec.Command(os.Args[0], "-test.run=^TestMountSNFSLockStdinChild$", "-test.v")
	cmd.Env = append(os.Environ(), "SNFS_LOCK_STDIN_CHILD="+bg.path("db"))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := make(chan struct{})
	kill := func() { cmd.Process.Signal(unix.SIGKILL); cmd.Wait(); close(killed) }
	lines := bufio.NewReader(out)
	for {
		s, err := lines.ReadString('\n')
		if err != nil {
			kill()
			t.Fatalf("gated child: %q, %v", s, err)
		}
		if strings.TrimSpace(s) == "opened" {
			break
		}
	}

	g.hold.Lock()
	held := true
	release := func() {
		if held {
			held = false
			g.hold.Unlock()
		}
	}
	defer func() { release(); <-killed }()
	fmt.Fprintln(stdin, "lock")
	waitWaiters(t, e, 1) // queued at the server; its BLOCKED reply is held
	go kill()
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

// TestMountSNFSLockStdinChild is the gated lock child's body.
func TestMountSNFSLockStdinChild(t *testing.T) {
	path := os.Getenv("SNFS_LOCK_STDIN_CHILD")
	if path == "" {
		t.Skip("the lock child of TestMountSNFSLockWaitKilledBeforeBlocked")
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("opened")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	fl := unix.Flock_t{Type: unix.F_WRLCK}
	if err := unix.FcntlFlock(f.Fd(), unix.F_SETLKW, &fl); err != nil {
		t.Fatal(err)
	}
	fmt.Println("locked")
	select {}
}
