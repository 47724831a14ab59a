package tests

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"snfs/client"
	"snfs/mount/vfs"
	"snfs/nlm4"
	"snfs/portmap"
	"snfs/sunrpc"
)

// File locks through nfs mode mounts (vfs/nlmlock.go): NLM v4 to the
// server's lock manager, so two nfs mode mounts, an snfs mode mount and a
// local process on the server exclude each other.

// nlmMountHost is the mounts' host side: the rpcbind the server asks for the
// host's lock manager (Config.ClientRPCBindPort), which lists the callback
// service of the mount registered last.
type nlmMountHost struct {
	pm   *portmap.Server
	port int
}

func newNLMMountHost(t *testing.T) *nlmMountHost {
	h := &nlmMountHost{pm: &portmap.Server{}}
	ps := &sunrpc.Server{Logger: quietLogger()}
	ps.Register(h.pm.Program())
	h.port = serveBoth(t, ps)
	return h
}

// newNLMMountEnv is an env whose server finds its NLM clients' lock managers
// through h's rpcbind.
func newNLMMountEnv(t *testing.T, h *nlmMountHost) *env {
	return newNLMEnv(t, &nlmHostSide{t: t, pmapPort: h.port}, 0)
}

// newNLMMount is an nfs mode mount of e's export with its locks at the
// server's NLM (snfs serve answers NLM on its NFS port). With register, its
// callback service is listed in h's rpcbind (the test's rpcbind refuses SET:
// the mapping is added directly). poll is how often a blocked LOCK is sent
// again.
func newNLMMount(t *testing.T, e *env, h *nlmMountHost, register bool, poll time.Duration) *mount {
	t.Helper()
	return newNLMMountNamed(t, e, h, fmt.Sprintf("nlm-mount-%d", nlmMounts.Add(1)), register, poll)
}

var nlmMounts atomic.Int64

// newNLMMountNamed is newNLMMount with the caller_name name.
func newNLMMountNamed(t *testing.T, e *env, h *nlmMountHost, name string, register bool, poll time.Duration) *mount {
	t.Helper()
	m := newMountConfig(t, e, vfs.Config{NLM: &vfs.NLMConfig{Addr: e.addr, CallerName: name,
		CallbackAddr: "127.0.0.1:0", Poll: poll}})
	t.Cleanup(func() { m.v.Close() }) // before the unmount: the files are closed by then
	if register {
		for _, prot := range []uint32{portmap.ProtoTCP, portmap.ProtoUDP} {
			h.pm.Add(portmap.Mapping{Prog: nlm4.Program, Vers: nlm4.Version, Prot: prot, Port: uint32(m.v.NLMCallbackPort())})
		}
	}
	return m
}

func (m *mount) path(name string) string { return filepath.Join(m.dir, name) }

// TestMountNFSLockRanges: fcntl locks of nfs mode mount A exclude mount B's by
// range; F_GETLK through B reports A's lock; a local process on the server
// and an snfs mode mount meet them; flock excludes across mounts and ends at
// the last close.
func TestMountNFSLockRanges(t *testing.T) {
	h := newNLMMountHost(t)
	e := newNLMMountEnv(t, h)
	a := newNLMMount(t, e, h, false, time.Hour)
	b := newNLMMount(t, e, h, false, time.Hour)
	fa := openRW(t, a.path("db"))
	fb := openRW(t, b.path("db"))

	if err := setlk(fa, unix.F_WRLCK, 0, 10); err != nil {
		t.Fatalf("A write lock [0,10): %v", err)
	}
	wantEAGAIN(t, "B write lock [5,6)", setlk(fb, unix.F_WRLCK, 5, 1))
	wantEAGAIN(t, "B read lock [9,10)", setlk(fb, unix.F_RDLCK, 9, 1))
	fl := unix.Flock_t{Type: unix.F_RDLCK, Start: 0, Len: 0}
	if err := unix.FcntlFlock(fb.Fd(), unix.F_GETLK, &fl); err != nil {
		t.Fatal(err)
	}
	if fl.Type != unix.F_WRLCK || fl.Start != 0 || fl.Len != 10 || fl.Pid != 0 {
		t.Fatalf("F_GETLK through B: %+v, want A's write lock [0,10) with pid 0", fl)
	}
	if err := setlk(fb, unix.F_WRLCK, 10, 10); err != nil {
		t.Fatalf("B write lock [10,20) beside A's: %v", err)
	}
	if fl := localTest(t, e.path("db"), unix.F_RDLCK, 12, 1); fl.Type != unix.F_WRLCK || fl.Start != 10 || fl.Len != 10 {
		t.Fatalf("F_OFD_GETLK on the server: %+v, want B's write lock [10,20)", fl)
	}
	if _, err := localLock(t, e.path("db"), unix.F_RDLCK, 0, 1); err == nil {
		t.Fatal("a local process took a read lock under A's write lock")
	}
	// Unlocking a sub-range splits A's lock.
	if err := setlk(fa, unix.F_UNLCK, 0, 5); err != nil {
		t.Fatal(err)
	}
	if err := setlk(fb, unix.F_RDLCK, 0, 5); err != nil {
		t.Fatalf("B read lock [0,5) after A's partial unlock: %v", err)
	}
	wantEAGAIN(t, "B write lock [5,6) after A's partial unlock", setlk(fb, unix.F_WRLCK, 5, 1))
	// A local lock excludes the mounts.
	if _, err := localLock(t, e.path("db"), unix.F_WRLCK, 100, 10); err != nil {
		t.Fatal(err)
	}
	wantEAGAIN(t, "A write lock under a local process's", setlk(fa, unix.F_WRLCK, 105, 1))

	// An snfs mode mount and an nfs mode mount exclude each other.
	s := newSNFSMount(t, e, "S", "", time.Hour)
	fs := openRW(t, s.path("db"))
	wantEAGAIN(t, "snfs mount S write lock [5,6) under A's", setlk(fs, unix.F_WRLCK, 5, 1))
	if err := setlk(fs, unix.F_WRLCK, 50, 10); err != nil {
		t.Fatalf("snfs mount S write lock [50,60): %v", err)
	}
	wantEAGAIN(t, "A read lock [55,56) under S's", setlk(fa, unix.F_RDLCK, 55, 1))

	// flock: on another file.
	ga := openRW(t, a.path("flocked"))
	gb := openRW(t, b.path("flocked"))
	if err := unix.Flock(int(ga.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatalf("flock through A: %v", err)
	}
	if err := unix.Flock(int(gb.Fd()), unix.LOCK_EX|unix.LOCK_NB); !errors.Is(err, unix.EWOULDBLOCK) {
		t.Fatalf("flock through B while A holds it: %v, want EWOULDBLOCK", err)
	}
	// The last close of A's description ends its flock (FUSE's RELEASE,
	// sent after the close returned).
	ga.Close()
	for k := 0; ; k++ {
		err := unix.Flock(int(gb.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || k == 6000 {
			t.Fatalf("flock through B after A's close: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMountNFSLockWait: F_SETLKW through B waits while A holds the lock and is
// granted once A unlocks, by the server's GRANTED call to B's callback service
// (B polls only every hour); kill -9 of the holder releases it; a waiter
// killed while it waits leaves nothing behind.
func TestMountNFSLockWait(t *testing.T) {
	h := newNLMMountHost(t)
	e := newNLMMountEnv(t, h)
	a := newNLMMount(t, e, h, false, time.Hour)
	b := newNLMMount(t, e, h, true, time.Hour)
	fa := openRW(t, a.path("db"))
	openRW(t, b.path("db")).Close()
	if err := setlk(fa, unix.F_WRLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	c := startLockChild(t, b.path("db"))
	c.expect(t, "waiting")
	waitWaiters(t, e, 1)
	select {
	case s := <-c.line:
		t.Fatalf("the child said %q while A holds the lock", s)
	default:
	}
	if err := setlk(fa, unix.F_UNLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	c.expect(t, "locked")
	wantEAGAIN(t, "A while the child holds the lock", setlk(fa, unix.F_WRLCK, 0, 1))
	if _, err := localLock(t, e.path("db"), unix.F_RDLCK, 0, 1); err == nil {
		t.Fatal("a local process took a read lock under the child's")
	}
	// kill -9: its files are closed (FLUSH with its lock owner).
	c.kill()
	if err := setlk(fa, unix.F_WRLCK, 0, 0); err != nil {
		t.Fatalf("A after the holder was killed: %v", err)
	}

	// A waiter killed while it waits: its request is cancelled.
	w := startLockChild(t, b.path("db"))
	w.expect(t, "waiting")
	waitWaiters(t, e, 1)
	w.kill()
	if st := e.srv.LockStats(); st.Waiters != 0 {
		t.Fatalf("a killed waiter left %d waiting requests", st.Waiters)
	}
	if err := setlk(fa, unix.F_UNLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := localLock(t, e.path("db"), unix.F_WRLCK, 0, 0); err != nil {
		t.Fatalf("a local lock after A's unlock: %v (the killed waiter holds it?)", err)
	}
}

// TestMountNFSLockPoll: a mount whose callback service the server cannot find
// (not in the host's rpcbind) still gets its blocked lock, by sending the
// LOCK again every poll interval (as Linux's client does every 30 s).
func TestMountNFSLockPoll(t *testing.T) {
	h := newNLMMountHost(t)
	e := newNLMMountEnv(t, h)
	a := newNLMMount(t, e, h, false, time.Hour)
	b := newNLMMount(t, e, h, false, 200*time.Millisecond)
	fa := openRW(t, a.path("db"))
	openRW(t, b.path("db")).Close()
	if err := setlk(fa, unix.F_WRLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	c := startLockChild(t, b.path("db"))
	c.expect(t, "waiting")
	waitWaiters(t, e, 1)
	if err := setlk(fa, unix.F_UNLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	c.expect(t, "locked")
	wantEAGAIN(t, "A while the child holds the lock", setlk(fa, unix.F_WRLCK, 0, 1))
}

// TestMountNFSSQLite: TestMountSNFSSQLite through two nfs mode mounts: SQLite's
// fcntl locks through NLM, the data written back before each unlock and the
// cache dropped at each grant.
func TestMountNFSSQLite(t *testing.T) {
	h := newNLMMountHost(t)
	e := newNLMMountEnv(t, h)
	a := newNLMMount(t, e, h, false, time.Hour)
	b := newNLMMount(t, e, h, true, time.Hour)
	sqliteCounter(t, a.path("db"), b.path("db"))
}

// TestMountNFSLockFreeAll: a mount that died (kill -9 of the mount process:
// here, its caller_name's lock taken by a bare NLM client and never released)
// leaves its locks on the server; the mount started again with the same
// caller_name (`snfs mount` uses HOST:MOUNTPOINT) frees them with FREE_ALL.
func TestMountNFSLockFreeAll(t *testing.T) {
	h := newNLMMountHost(t)
	e := newNLMMountEnv(t, h)
	fh := e.create(e.nfs, e.root, "db", 0o666)
	dead, err := client.DialNLM(ctx, e.addr, "dead-mount")
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	oh := []byte("an owner of the dead instance")
	if st, err := dead.Lock(ctx, nlm4.Lock{FH: fh, OH: oh, Svid: 7}, true, false, 0); err != nil || st != nlm4.Granted {
		t.Fatalf("the dead instance's lock: %v %v", st, err)
	}
	a := newNLMMount(t, e, h, false, time.Hour)
	fa := openRW(t, a.path("db"))
	wantEAGAIN(t, "A's lock under the dead instance's", setlk(fa, unix.F_WRLCK, 0, 1))
	newNLMMountNamed(t, e, h, "dead-mount", false, time.Hour) // the same mount started again
	if err := setlk(fa, unix.F_WRLCK, 0, 1); err != nil {
		t.Fatalf("A's lock once the dead instance's mount started again: %v", err)
	}
}
