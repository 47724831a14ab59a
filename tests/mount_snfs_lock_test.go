package tests

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"snfs/mount/fusefs"
)

// File locks through snfs mounts (vfs/lock.go, fusefs/lock.go): two mounts of
// one export and processes on the server exclude each other.

func openRW(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func setlk(f *os.File, typ int16, start, n int64) error {
	fl := unix.Flock_t{Type: typ, Start: start, Len: n}
	return unix.FcntlFlock(f.Fd(), unix.F_SETLK, &fl)
}

func wantEAGAIN(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EACCES) {
		t.Fatalf("%s: %v, want EAGAIN (the lock is held through the other mount)", what, err)
	}
}

// TestMountSNFSLockRanges: fcntl locks of mount A exclude mount B's by range;
// F_GETLK through B reports A's lock; a local process on the server meets
// them and they meet its; flock excludes across mounts too.
func TestMountSNFSLockRanges(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	a := newSNFSMount(t, e, "A", "", time.Hour)
	b := newSNFSMount(t, e, "B", "", time.Hour)
	fa := openRW(t, a.path("db"))
	fb := openRW(t, b.path("db"))

	checkTwoMountLocks(t, e, fa, fb)

	// flock: on another file (flock and fcntl locks of one mount's process
	// exclude each other on the server, as the Linux NFS client's do).
	ga := openRW(t, a.path("flocked"))
	gb := openRW(t, b.path("flocked"))
	if err := unix.Flock(int(ga.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatalf("flock through A: %v", err)
	}
	if err := unix.Flock(int(gb.Fd()), unix.LOCK_EX|unix.LOCK_NB); !errors.Is(err, unix.EWOULDBLOCK) {
		t.Fatalf("flock through B while A holds it: %v, want EWOULDBLOCK", err)
	}
	// The last close of A's description ends its flock: FUSE's RELEASE
	// (with FUSE_RELEASE_FLOCK_UNLOCK), which the kernel sends after the
	// close has returned.
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

// lockChild is a process holding or waiting for a lock through a mount
// (TestMountSNFSLockChild): it prints "locked" once it holds the lock, then
// waits to be killed. A gated one (gatedChild) prints "ready" once it has
// opened the file, and takes its lock ("waiting", then "locked") only when
// told (go_).
type lockChild struct {
	cmd  *spawnCmd
	out  *bufio.Reader
	in   io.WriteCloser
	line chan string
}

// A lockChildOption changes the child startLockChild runs.
type lockChildOption func(*lockChildConfig)

type lockChildConfig struct {
	body  string // the test that is the child's body
	gated bool
}

// gatedChild runs body, a gated child: it opens the file, says "ready", and
// takes its lock when told.
func gatedChild(body string) lockChildOption {
	return func(c *lockChildConfig) { c.body, c.gated = body, true }
}

// startLockChild runs a lock child on path, in its own process (its locks
// are its own; it can be killed), killed when the test ends or, by
// Pdeathsig, when this process dies first.
func startLockChild(t *testing.T, path string, opts ...lockChildOption) *lockChild {
	t.Helper()
	cfg := lockChildConfig{body: "TestMountSNFSLockChild"}
	for _, o := range opts {
		o(&cfg)
	}
	cmd := command(os.Args[0], "-test.run=^"+cfg.body+"$", "-test.v")
	cmd.Env = append(os.Environ(), "SNFS_LOCK_CHILD="+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &lockChild{cmd: cmd, out: bufio.NewReader(out), line: make(chan string, 4)}
	if cfg.gated {
		if c.in, err = cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { // ends at the child's exit (EOF)
		for {
			s, err := c.out.ReadString('\n')
			if s = strings.TrimSpace(s); s == "locked" || s == "waiting" || s == "ready" {
				c.line <- s
			}
			if err != nil {
				close(c.line)
				return
			}
		}
	}()
	t.Cleanup(func() { c.kill() })
	return c
}

// go_ tells a gated child to take its lock.
func (c *lockChild) go_() { fmt.Fprintln(c.in, "go") }

func (c *lockChild) expect(t *testing.T, want string) {
	t.Helper()
	select {
	case s, ok := <-c.line:
		if !ok || s != want {
			t.Fatalf("lock child said %q (open %v), want %q", s, ok, want)
		}
	case <-time.After(60 * time.Second): // a failure bound, not a speed assertion
		t.Fatalf("lock child: no %q", want)
	}
}

func (c *lockChild) kill() {
	if c.cmd.ProcessState == nil {
		c.cmd.Process.Signal(syscall.SIGKILL)
		c.cmd.Wait()
	}
}

// TestMountSNFSLockChild is the lock child's body.
func TestMountSNFSLockChild(t *testing.T) {
	t.Parallel()
	path := os.Getenv("SNFS_LOCK_CHILD")
	if path == "" {
		t.Skip("the lock child of TestMountSNFSLockWait")
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
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

// waitWaiters waits until the server's lock manager has n waiting requests.
func waitWaiters(t *testing.T, e *env, n int) {
	t.Helper()
	for range 6000 {
		if e.srv.LockStats().Waiters == n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the server never had %d waiting lock requests (%+v)", n, e.srv.LockStats())
}

// TestMountSNFSLockWait: F_SETLKW through B waits while A holds the lock and
// is granted once A unlocks (CB_GRANTED); kill -9 of the holder releases it;
// a waiter killed while it waits leaves nothing behind.
func TestMountSNFSLockWait(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	e := newEnv(t, "rw,no_root_squash")
	a := newSNFSMount(t, e, "A", "", time.Hour)
	b := newSNFSMount(t, e, "B", "", time.Hour)
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
	// kill -9: its files are closed (FLUSH with its lock owner) before it is
	// reaped.
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

// TestMountSNFSLockMountKilled: a mount process killed (SIGKILL) while a
// process holds a lock through it keeps its registration, and so the lock,
// until the mount starts again (a new boot verifier ends the old
// registration); then the lock is gone.
func TestMountSNFSLockMountKilled(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	e := newEnv(t, "rw,no_root_squash")
	dir := diskTempDir(t, "snfs-mnt-")
	cacheDir := diskTempDir(t, "snfs-cache-")
	cmd := command(os.Args[0], "-test.run=^TestMountSNFSChild$", "-test.v")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with the test binary
	cmd.Env = append(os.Environ(), "SNFS_MOUNT_CHILD="+strings.Join([]string{e.addr, e.cfg.Exports[0].Path, dir, cacheDir}, "|"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
		fusefs.Unmount(dir, nil, 5*time.Second)
	})
	awaitMountReady(t, out)
	f, err := os.OpenFile(filepath.Join(dir, "db"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := setlk(f, unix.F_WRLCK, 0, 0); err != nil {
		t.Fatalf("lock through the child mount: %v", err)
	}
	if _, err := localLock(t, e.path("db"), unix.F_WRLCK, 0, 1); err == nil {
		t.Fatal("a local lock over the mount's")
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	killed = true
	f.Close() // the FLUSH finds no mount: nothing is released
	if err := fusefs.Unmount(dir, nil, 5*time.Second); err != nil {
		t.Logf("unmount of the dead mount: %v", err)
	}
	if _, err := localLock(t, e.path("db"), unix.F_WRLCK, 0, 1); err == nil {
		t.Fatal("the killed mount's lock went before its registration ended")
	}
	newSNFSMountAt(t, e, "crash", dir, cacheDir, time.Hour)
	if _, err := localLock(t, e.path("db"), unix.F_WRLCK, 0, 1); err != nil {
		t.Fatalf("a local lock after the mount started again: %v", err)
	}
}

// TestMountSNFSLockWritesBack: a lock request writes the file's dirty data
// back first (the data written before it is the server's when the lock is
// held), and a lock granted through another mount reads it.
func TestMountSNFSLockWritesBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	// db made on the server first: the test is about the dirty data of a
	// file the server has (a file the mount creates under a write-back
	// permit, the default, is not on the server until reintegrated).
	if err := os.WriteFile(e.path("db"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	a := newSNFSMount(t, e, "A", "", time.Hour)
	b := newSNFSMount(t, e, "B", "", time.Hour)
	fa := openRW(t, a.path("db"))
	want := randBytes(7, 100000)
	if _, err := fa.WriteAt(want, 0); err != nil {
		t.Fatal(err)
	}
	if n := exportSize(t, e.path("db")); n != 0 {
		t.Fatalf("the export has %d bytes before the lock; want none (delayed write-back)", n)
	}
	if err := setlk(fa, unix.F_WRLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, e.path("db")); !bytes.Equal(got, want) {
		t.Fatalf("the export has %d bytes after A's lock, want the %d written before it", len(got), len(want))
	}
	if err := setlk(fa, unix.F_UNLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	fb := openRW(t, b.path("db"))
	if err := setlk(fb, unix.F_RDLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if _, err := fb.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("B reads under its lock: %v, same %v", err, bytes.Equal(got, want))
	}
}

// checkTwoMountLocks: fcntl locks through two mounts of e's export (fa
// through A, fb through B, both open on db) exclude each other by range, show
// through F_GETLK (pid 0: another host's), split on a partial unlock, and
// exclude and are excluded by a local process's OFD locks on the server.
func checkTwoMountLocks(t *testing.T, e *env, fa, fb *os.File) {
	t.Helper()
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
	// A local process on the server sees both mounts' locks on the backing
	// file, and is refused.
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
}

// TestMountSNFSLockNotInterrupted: F_SETLK, F_GETLK and an unlock do not
// wait for another process, so a signal to the caller (here Go's own
// preemption signal, as every Go program gets) does not cut them short:
// they never fail EINTR, which a caller of a non-blocking lock does not
// expect (the kernel interrupts the request at the daemon; the mount used to
// cancel the call and answer EINTR).
func TestMountSNFSLockNotInterrupted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	a := newSNFSMount(t, e, "A", "", time.Hour)
	f := openRW(t, a.path("db"))
	tids := make(chan int, 1)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // signals the locking thread, as fast as it can
		defer close(done)
		tid := <-tids
		for {
			select {
			case <-stop:
				return
			default:
			}
			unix.Tgkill(os.Getpid(), tid, unix.SIGURG)
			time.Sleep(20 * time.Microsecond)
		}
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tids <- unix.Gettid()
	interrupted := 0
	const rounds = 1000
	for i := 0; i < rounds; i++ {
		off := int64(i % 64)
		var err error
		switch i % 3 {
		case 0:
			err = setlk(f, unix.F_WRLCK, off, 1)
		case 1:
			fl := unix.Flock_t{Type: unix.F_RDLCK, Start: off, Len: 1}
			err = unix.FcntlFlock(f.Fd(), unix.F_GETLK, &fl)
		case 2:
			err = setlk(f, unix.F_UNLCK, 0, 0)
		}
		if errors.Is(err, unix.EINTR) {
			interrupted++
		} else if err != nil {
			close(stop)
			<-done
			t.Fatalf("round %d: %v", i, err)
		}
	}
	close(stop)
	<-done
	if interrupted > 0 {
		t.Fatalf("%d of %d non-blocking lock calls failed EINTR", interrupted, rounds)
	}
}
