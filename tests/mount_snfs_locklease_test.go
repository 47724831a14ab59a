package tests

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/sunrpc"
	"snfs/xdr"
)

// Lock leases and lost locks (docs/protocol.md, "Lock leases"; docs/mount.md,
// "Lost locks"): a mount whose callback path is silent past the callback
// timeout loses its locks to a waiter of another mount, and its process's
// next I/O through the descriptor that held them fails with EIO; a lock not
// reclaimed after a server restart has the same outcome
// (mount_lock_reclaim_test.go).

// lockLeaseMount mounts e's export in snfs mode through addr (a fault proxy,
// or e.addr), without FUSE passthrough: every read and write of the test
// reaches the mount.
func lockLeaseMount(t *testing.T, e *env, name, addr string) *snfsMount {
	t.Helper()
	return lostLockMount(t, e, name, addr, false)
}

func wantEIO(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, unix.EIO) {
		t.Fatalf("%s: %v, want EIO (the descriptor's lock was lost)", what, err)
	}
}

// TestMountSNFSLockRevoked: mount A holds a write lock; its connection is
// partitioned (its callback path silent, the mount alive). A process of
// mount B waits for the lock: the server probes A, revokes A's lock once the
// probe is unanswered past the callback timeout, and grants B's. After the
// partition heals, A's process gets EIO writing and reading through the
// descriptor that held the lock; once it unlocks, its I/O works again.
func TestMountSNFSLockRevoked(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	e.cfg.Table.CallbackTimeout = 2 * time.Second
	e.restart()
	p := newProxy(t, e.addr)
	a := lockLeaseMount(t, e, "A", p.Addr())
	b := lockLeaseMount(t, e, "B", e.addr)
	fa := openRW(t, a.path("db"))
	openRW(t, b.path("db")) // open in both: write-shared, no callbacks for B's lock
	if _, err := fa.WriteAt([]byte("held by A"), 0); err != nil {
		t.Fatal(err)
	}
	if err := setlk(fa, unix.F_WRLCK, 0, 0); err != nil {
		t.Fatalf("A write lock: %v", err)
	}
	if _, err := fa.WriteAt([]byte("A"), 0); err != nil {
		t.Fatalf("A writes under its lock: %v", err)
	}

	// The child starts before the partition: a process started during it
	// would close its copies of the test's descriptors of A's files, and
	// those closes (FLUSH) wait for the server through A.
	c := startGatedLockChild(t, b.path("db"))
	c.expect(t, "ready")
	p.Partition(0)
	t.Cleanup(p.Heal) // on a failure: before the closes and unmounts (last first)
	c.go_()
	c.expect(t, "waiting")
	// Granted once A's probe has gone unanswered for the callback timeout.
	c.expect(t, "locked")
	if _, err := localLock(t, e.path("db"), unix.F_WRLCK, 0, 1); err == nil {
		t.Fatal("a local lock over B's granted lock")
	}
	p.Heal()

	_, err := fa.WriteAt([]byte("unprotected"), 0)
	wantEIO(t, "A's write after its lock was revoked", err)
	_, err = fa.ReadAt(make([]byte, 4), 0)
	wantEIO(t, "A's read after its lock was revoked", err)
	wantEAGAIN(t, "A locks again while B holds the lock", setlk(fa, unix.F_WRLCK, 0, 1))
	_, err = fa.WriteAt([]byte("x"), 0)
	wantEIO(t, "A's write after a refused lock", err)
	// An unlock of the whole file ends the loss: the descriptor holds nothing.
	if err := setlk(fa, unix.F_UNLCK, 0, 0); err != nil {
		t.Fatalf("A unlocks: %v", err)
	}
	if _, err := fa.ReadAt(make([]byte, 1), 0); err != nil {
		t.Fatalf("A reads after unlocking: %v", err)
	}
	c.kill()
	if err := setlk(fa, unix.F_WRLCK, 0, 0); err != nil {
		t.Fatalf("A locks after B's holder died: %v", err)
	}
	if _, err := fa.WriteAt([]byte("A again"), 0); err != nil {
		t.Fatalf("A writes under its new lock: %v", err)
	}
}

// startGatedLockChild runs TestMountSNFSLockGatedChild: it says "ready",
// and takes its lock (F_SETLKW of the whole file: "waiting", then "locked")
// only when told (go_).
func startGatedLockChild(t *testing.T, path string) *lockChild {
	t.Helper()
	return startLockChild(t, path, gatedChild("TestMountSNFSLockGatedChild"))
}

// TestMountSNFSLockGatedChild is the gated lock child's body.
func TestMountSNFSLockGatedChild(t *testing.T) {
	t.Parallel()
	path := os.Getenv("SNFS_LOCK_CHILD")
	if path == "" {
		t.Skip("the lock child of TestMountSNFSLockRevoked")
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	fmt.Println("waiting")
	fl := unix.Flock_t{Type: unix.F_WRLCK}
	if err := unix.FcntlFlock(f.Fd(), unix.F_SETLKW, &fl); err != nil {
		t.Fatal(err)
	}
	fmt.Println("locked")
	select {}
}

// TestSNFSLockLeaseRevoked: at the protocol level, a lock holder whose
// callback path does not answer CB_NULL (its own calls still go through)
// loses its locks once another client's request meets them and the probe has
// gone unanswered for the callback timeout: the waiter is granted, and the
// holder's next lock procedure is answered SNFS_ERR_FENCED, once. A holder
// that answers keeps its lock.
func TestSNFSLockLeaseRevoked(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	e.cfg.Table.CallbackTimeout = 2 * time.Second
	e.restart()
	fh := e.create(e.nfs, e.root, "db", 0o644)
	fh2 := e.create(e.nfs, e.root, "db2", 0o644)
	release := make(chan struct{})
	silent := newProtoClientNull(t, e, "lease-silent", func(ctx context.Context, _ *sunrpc.Call, _ *xdr.Reader, _ *xdr.Writer) error {
		select { // a callback path that does not answer
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	t.Cleanup(func() { close(release) })
	live, b := newProtoClient(t, e, "lease-live"), newProtoClient(t, e, "lease-b")

	wantLock(t, "silent write", silent.lock(fh, 1, snfs1.LockWrite, 0, 0, false), snfs1.LockGranted)
	wantLock(t, "live write", live.lock(fh2, 1, snfs1.LockWrite, 0, 0, false), snfs1.LockGranted)
	wantLock(t, "B blocking write on the live holder's", b.lock(fh2, 7, snfs1.LockWrite, 0, 0, true), snfs1.LockBlocked)
	wantLock(t, "B blocking write on the silent holder's", b.lock(fh, 7, snfs1.LockWrite, 0, 0, true), snfs1.LockBlocked)
	// While the probe is out, the holder's LOCKT (its lease renewal) is put
	// off: answered now, it could vouch for a lock about to be revoked.
	var tres snfs1.LockRes
	err := silent.rpc.Call(ctx, snfs1.ProcLockT, &snfs1.LockTArgs{Client: silent.clientID(), File: fh, Owner: 1,
		Type: snfs1.LockRead, Length: 1}, &tres)
	if err != nil || tres.Status != nfs3.ErrJukebox {
		t.Fatalf("the probed holder's LOCKT: %v %v, want NFS3ERR_JUKEBOX", tres.Status, err)
	}
	g := b.waitGrant("after the silent holder's probe went unanswered")
	if string(g.File) != string(fh) {
		t.Fatalf("CB_GRANTED for %x, want the silent holder's file", g.File)
	}
	// The live holder's probe was answered long before this: it keeps its lock.
	wantLock(t, "B on the live holder's lock", b.lock(fh2, 8, snfs1.LockWrite, 0, 1, false), snfs1.LockDenied)
	b.noGrant("while the live holder holds its lock")

	var res snfs1.StatusRes
	err = silent.rpc.Call(ctx, snfs1.ProcLockU, &snfs1.LockUArgs{Client: silent.clientID(), File: fh, Owner: 1}, &res)
	if err != nil || res.Status != snfs1.ErrFenced {
		t.Fatalf("the revoked client's LOCKU: %v %v, want SNFS_ERR_FENCED", res.Status, err)
	}
	silent.locku(fh, 1, 0, 0, 0) // said once
	wantLock(t, "the revoked client locks again", silent.lock(fh, 1, snfs1.LockWrite, 0, 1, false), snfs1.LockDenied)
}
