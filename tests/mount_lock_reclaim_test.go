package tests

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"snfs/mount/vfs"
)

// Locks reclaimed across a server restart (docs/protocol.md, "Server
// restart"; docs/mount.md, "Locks after a server restart"): mount A holds
// fcntl ranges and a flock, the server restarts, and A's locks still exclude
// mount B - B's F_SETLK is refused through the grace period and after it - until
// A unlocks. In snfs mode A reclaims in the session's reclaim (LOCK with
// reclaim TRUE before RECLAIM_DONE); in nfs mode with NLM reclaims once it sees
// the server's NSM state number change.

// reclaimFiles are the descriptors of the scenario: db holds A's fcntl
// ranges, flocked A's flock.
type reclaimFiles struct {
	fa, fb, ga, gb *os.File
}

// reclaimHold opens db and flocked through both mounts (pa, pb give their
// paths) and takes A's locks: write [0,5) and [6,10) (a write lock of
// [0,10) split by an unlock of [5,6)), read [20,30), and a flock of flocked.
func reclaimHold(t *testing.T, pa, pb func(string) string) *reclaimFiles {
	t.Helper()
	r := &reclaimFiles{fa: openRW(t, pa("db")), fb: openRW(t, pb("db")), ga: openRW(t, pa("flocked")), gb: openRW(t, pb("flocked"))}
	if err := setlk(r.fa, unix.F_WRLCK, 0, 10); err != nil {
		t.Fatalf("A write lock [0,10): %v", err)
	}
	if err := setlk(r.fa, unix.F_UNLCK, 5, 1); err != nil {
		t.Fatalf("A unlocks [5,6): %v", err)
	}
	if err := setlk(r.fa, unix.F_RDLCK, 20, 10); err != nil {
		t.Fatalf("A read lock [20,30): %v", err)
	}
	if err := unix.Flock(int(r.ga.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatalf("A flock: %v", err)
	}
	r.excluded(t, "before the restart")
	return r
}

// excluded checks that A's locks exclude B's requests exactly: B is refused
// where A writes and a write where A reads, and granted the hole of A's split
// and a read beside A's.
func (r *reclaimFiles) excluded(t *testing.T, when string) {
	t.Helper()
	wantEAGAIN(t, when+": B write [0,1)", setlk(r.fb, unix.F_WRLCK, 0, 1))
	wantEAGAIN(t, when+": B read [9,10)", setlk(r.fb, unix.F_RDLCK, 9, 1))
	wantEAGAIN(t, when+": B write [25,26)", setlk(r.fb, unix.F_WRLCK, 25, 1))
	if err := unix.Flock(int(r.gb.Fd()), unix.LOCK_EX|unix.LOCK_NB); !errors.Is(err, unix.EWOULDBLOCK) {
		t.Fatalf("%s: B flock while A holds it: %v, want EWOULDBLOCK", when, err)
	}
	for _, l := range []struct {
		typ        int16
		start, len int64
	}{{unix.F_WRLCK, 5, 1}, {unix.F_RDLCK, 25, 1}} {
		if err := setlk(r.fb, l.typ, l.start, l.len); err != nil {
			t.Fatalf("%s: B lock %d [%d,+%d) beside A's: %v", when, l.typ, l.start, l.len, err)
		}
		if err := setlk(r.fb, unix.F_UNLCK, l.start, l.len); err != nil {
			t.Fatal(err)
		}
	}
}

// reclaimRelease checks, after the restart, that A's locks were reclaimed:
// they exclude B, A's I/O through them goes on, and once A unlocks B takes
// them.
func (r *reclaimFiles) reclaimRelease(t *testing.T) {
	t.Helper()
	r.excluded(t, "after the restart")
	if _, err := r.fa.WriteAt([]byte("A"), 0); err != nil {
		t.Fatalf("A writes under its reclaimed lock: %v", err)
	}
	if _, err := r.fa.ReadAt(make([]byte, 1), 0); err != nil {
		t.Fatalf("A reads under its reclaimed lock: %v", err)
	}
	if err := setlk(r.fa, unix.F_UNLCK, 0, 0); err != nil {
		t.Fatalf("A unlocks: %v", err)
	}
	if err := setlk(r.fb, unix.F_WRLCK, 0, 0); err != nil {
		t.Fatalf("B write lock of the whole file after A unlocked: %v", err)
	}
	if err := unix.Flock(int(r.ga.Fd()), unix.LOCK_UN); err != nil {
		t.Fatalf("A's flock unlock: %v", err)
	}
	if err := unix.Flock(int(r.gb.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatalf("B flock after A's unlock: %v", err)
	}
}

// TestMountSNFSLockServerRestart: snfs mode, the server shut down and
// started again. A's locks are reclaimed and exclude B, whose request made in
// the grace period is refused once it ends; then A, partitioned
// from the server over a second restart, comes back after the grace period:
// its reclaim is refused (SNFS_ERR_NOGRACE), B has taken the lock meanwhile,
// and A's process gets EIO on the descriptor that held it.
func TestMountSNFSLockServerRestart(t *testing.T) {
	// Serial (no t.Parallel): A must reclaim within a 3 s grace period.
	e := newEnv(t, "rw,no_root_squash")
	e.cfg.Grace = 3 * time.Second
	e.restart()
	p := newProxy(t, e.addr)
	a := lockLeaseMount(t, e, "A", p.Addr())
	b := lockLeaseMount(t, e, "B", e.addr)
	r := reclaimHold(t, a.path, b.path)
	// A lock for the second part, taken before: A's files are not touched
	// while A is partitioned.
	fa, fb := openRW(t, a.path("late")), openRW(t, b.path("late"))
	if err := setlk(fa, unix.F_WRLCK, 0, 0); err != nil {
		t.Fatalf("A write lock of late: %v", err)
	}
	if _, err := fa.WriteAt([]byte("late data"), 0); err != nil {
		t.Fatal(err)
	}
	// Another client known before the restart comes back late: the grace
	// period lasts until it has reclaimed, a second after the restart.
	g := dialGrace(t, e, "late", nil)
	g.holding.Store(true)
	e.restart()
	back := time.AfterFunc(time.Second, func() { close(g.hold) })
	t.Cleanup(func() { back.Stop() })
	select {
	case <-e.srv.GraceOver():
		t.Fatal("the grace period ended before B's request")
	default:
	}
	// B's request in the grace period waits it out (LOCK_GRACE) and is then
	// refused: A reclaimed the lock in the grace period.
	wantEAGAIN(t, "B write [0,1) in the grace period", setlk(r.fb, unix.F_WRLCK, 0, 1))
	r.reclaimRelease(t)
	wantEAGAIN(t, "B on late, reclaimed by A", setlk(fb, unix.F_WRLCK, 0, 0))

	p.Partition(0)
	t.Cleanup(p.Heal) // on a failure: before the closes and unmounts
	e.restart()
	// A is away for the whole grace period (3 s): its lock is not
	// reclaimed, and B's request is granted once the period is over.
	if err := setlk(fb, unix.F_WRLCK, 0, 0); err != nil {
		t.Fatalf("B on late after the grace period A missed: %v", err)
	}
	p.Heal()
	_, err := fa.WriteAt([]byte("unprotected"), 0)
	wantEIO(t, "A's write after its lock could not be reclaimed", err)
	_, err = fa.ReadAt(make([]byte, 1), 0)
	wantEIO(t, "A's read after its lock could not be reclaimed", err)
}

// TestMountSNFSLockReclaimKilled: snfs mode through `snfs mount`, the
// server killed with SIGKILL and started again: A's locks are reclaimed.
func TestMountSNFSLockReclaimKilled(t *testing.T) {
	t.Parallel()
	s := newServeProc(t, "--grace", "20s")
	a := startMount(t, s, "", "")
	b := startMount(t, s, "", "")
	r := reclaimHold(t, a.path, b.path)
	s.restart()
	r.reclaimRelease(t)
}

// nfsReclaimMount is an nfs mode mount of e's export whose NLM and NSM calls
// go to addr (e's server, or a fault proxy in front of it), watching the
// server's state number every 200 ms.
func nfsReclaimMount(t *testing.T, e *env, name, addr string) *mount {
	t.Helper()
	cfg := vfs.NLMConfig{CallerName: name, Addr: addr, NSMAddr: addr, CallbackAddr: "127.0.0.1:0", Poll: 200 * time.Millisecond}
	m := newMountConfig(t, e, vfs.Config{NLM: &cfg})
	t.Cleanup(func() { m.v.Close() }) // before the unmount: the files are closed by then
	return m
}

// TestMountNFSLockServerRestart: nfs mode, the server shut down and started
// again (its NSM state number advances). A sees the new number and reclaims
// its locks with NLM in the grace period: they exclude B. Then A, cut off
// from the server's NLM and NSM over a second restart, comes back after the
// grace period, in which B took the lock: A's reclaim is refused, and A's
// process gets EIO on the descriptor that held it.
func TestMountNFSLockServerRestart(t *testing.T) {
	// Serial (no t.Parallel): A must reclaim within a 4 s grace period.
	h := newNLMMountHost(t)
	e := newNLMEnv(t, &nlmHostSide{t: t, pmapPort: h.port}, 4*time.Second)
	p := newProxy(t, e.addr)
	a := nfsReclaimMount(t, e, "A", p.Addr())
	b := nfsReclaimMount(t, e, "B", e.addr)
	r := reclaimHold(t, a.path, b.path)
	fa, fb := openRW(t, a.path("late")), openRW(t, b.path("late"))
	if err := setlk(fa, unix.F_WRLCK, 0, 0); err != nil {
		t.Fatalf("A write lock of late: %v", err)
	}
	if _, err := fa.WriteAt([]byte("late data"), 0); err != nil {
		t.Fatal(err)
	}
	e.restart()
	r.reclaimRelease(t)
	wantEAGAIN(t, "B on late, reclaimed by A", setlk(fb, unix.F_WRLCK, 0, 0))

	p.Partition(0)
	t.Cleanup(p.Heal) // on a failure: before the closes and unmounts
	e.restart()
	// A is away for the whole grace period (4 s): B's request is granted
	// once the period is over.
	if err := setlk(fb, unix.F_WRLCK, 0, 0); err != nil {
		t.Fatalf("B on late after the grace period A missed: %v", err)
	}
	p.Heal()
	// A's watch finds the new state number within its poll; its reclaim is
	// refused (B holds the lock).
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := fa.ReadAt(make([]byte, 1), 0)
		if errors.Is(err, unix.EIO) {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("A's read after its lock could not be reclaimed: %v, want EIO", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, err := fa.WriteAt([]byte("unprotected"), 0)
	wantEIO(t, "A's write after its lock could not be reclaimed", err)
}

// TestMountNFSLockReclaimKilled: nfs mode through `snfs mount --mode=nfs`
// (its NLM at snfs serve's NFS port, and the NSM found beside it), the
// server killed with SIGKILL and started again: A's locks are reclaimed.
func TestMountNFSLockReclaimKilled(t *testing.T) {
	t.Parallel()
	s := newServeProc(t, "--grace", "8s")
	nlm := fmt.Sprintf("--nlm-port=%d", s.nfsPort) // not a system rpcbind's lock manager
	a := startMount(t, s, "", "", "--mode=nfs", nlm)
	b := startMount(t, s, "", "", "--mode=nfs", nlm)
	r := reclaimHold(t, a.path, b.path)
	s.restart()
	r.reclaimRelease(t)
}
