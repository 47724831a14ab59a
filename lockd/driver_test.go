package lockd

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"snfs/lockmgr"
)

type chanGranter chan lockmgr.Action

func (g chanGranter) Granted(ctx context.Context, a lockmgr.Action) error {
	g <- a
	return nil
}

func newDriver(t *testing.T) (*Driver, lockmgr.FileKey, string, chanGranter) {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "lockd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	g := make(chanGranter, 4)
	d := New(Config{Granter: g, Open: func(k lockmgr.FileKey) (int, error) {
		return unix.Open(filepath.Join(dir, string(k)), unix.O_RDWR|unix.O_CLOEXEC, 0)
	}})
	t.Cleanup(d.Stop)
	return d, "f", path, g
}

// localLock tries F_OFD_SETLK of typ over [start, start+n) on a description of
// its own, as a process on the server would.
func localLock(t *testing.T, path string, typ int16, start, n int64) (fd int, err error) {
	t.Helper()
	fd, err = unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	fl := unix.Flock_t{Type: typ, Start: start, Len: n}
	return fd, unix.FcntlFlock(uintptr(fd), unix.F_OFD_SETLK, &fl)
}

func TestRemoteLockExcludesLocalProcess(t *testing.T) {
	d, k, path, _ := newDriver(t)
	a := lockmgr.Owner{Client: 1, ID: "a"}
	if res := d.Lock(lockmgr.LockArgs{File: k, Owner: a, Type: lockmgr.Write, Range: lockmgr.RangeOf(0, 10)}); res.Verdict != lockmgr.Granted {
		t.Fatalf("lock: %v", res.Verdict)
	}
	fd, err := localLock(t, path, unix.F_WRLCK, 5, 1)
	defer unix.Close(fd)
	if err == nil {
		t.Fatal("a local process took a lock a remote owner holds")
	}
	// Outside the remote owner's range the local process is free.
	fd2, err := localLock(t, path, unix.F_WRLCK, 10, 1)
	if err != nil {
		t.Fatalf("a local lock past the remote range: %v", err)
	}
	unix.Close(fd2)
	// The unlock is mirrored: the local process then gets the lock.
	if v := d.Unlock(k, a, lockmgr.Whole); v != lockmgr.Granted {
		t.Fatalf("unlock: %v", v)
	}
	fl := unix.Flock_t{Type: unix.F_WRLCK, Start: 5, Len: 1}
	if err := unix.FcntlFlock(uintptr(fd), unix.F_OFD_SETLK, &fl); err != nil {
		t.Fatalf("local lock after the remote unlock: %v", err)
	}
	// And now the remote owner is refused, and Test reports the local holder.
	if res := d.Lock(lockmgr.LockArgs{File: k, Owner: a, Type: lockmgr.Read, Range: lockmgr.RangeOf(0, 0)}); res.Verdict != lockmgr.Denied || !res.Local {
		t.Fatalf("lock over a local process's lock: %+v", res)
	}
	res := d.Test(k, a, lockmgr.Read, lockmgr.RangeOf(0, 0))
	if res.Verdict != lockmgr.Denied || !res.Local || res.Holder.Type != lockmgr.Write || res.Holder.Range != lockmgr.RangeOf(5, 1) {
		t.Fatalf("test over a local process's lock: %+v", res)
	}
	if d.Count(1) != 0 {
		t.Fatalf("a refused lock left %d records", d.Count(1))
	}
}

func TestBlockedLockGrantedByCallback(t *testing.T) {
	d, k, _, g := newDriver(t)
	a := lockmgr.Owner{Client: 1, ID: "a"}
	b := lockmgr.Owner{Client: 2, ID: "b"}
	if res := d.Lock(lockmgr.LockArgs{File: k, Owner: a, Type: lockmgr.Write, Range: lockmgr.Whole}); res.Verdict != lockmgr.Granted {
		t.Fatalf("lock a: %v", res.Verdict)
	}
	res := d.Lock(lockmgr.LockArgs{File: k, Owner: b, Type: lockmgr.Write, Range: lockmgr.Whole, Block: true})
	if res.Verdict != lockmgr.Blocked {
		t.Fatalf("lock b: %v", res.Verdict)
	}
	select {
	case a := <-g:
		t.Fatalf("granted while a holds it: %v", a)
	default:
	}
	d.ClientGone(1)
	got := <-g
	if got.Req != res.Req || got.Owner != b {
		t.Fatalf("grant %v, want req %d of %v", got, res.Req, b)
	}
	// b holds it once the grant is taken: a's new request is refused.
	for {
		if r := d.Lock(lockmgr.LockArgs{File: k, Owner: a, Type: lockmgr.Read, Range: lockmgr.Whole}); r.Verdict == lockmgr.Denied {
			break
		}
		t.Fatal("a granted over b's lock")
	}
}

// TestDescriptionsTidy: a description opened for a request that was refused
// or cancelled, or whose owner released everything, is closed.
func TestDescriptionsTidy(t *testing.T) {
	d, k, _, _ := newDriver(t)
	a := lockmgr.Owner{Client: 1, ID: "a"}
	b := lockmgr.Owner{Client: 2, ID: "b"}
	descs := func() int {
		d.mu.Lock()
		defer d.mu.Unlock()
		return len(d.fds)
	}
	d.Lock(lockmgr.LockArgs{File: k, Owner: a, Type: lockmgr.Write, Range: lockmgr.Whole})
	if r := d.Lock(lockmgr.LockArgs{File: k, Owner: b, Type: lockmgr.Read, Range: lockmgr.Whole}); r.Verdict != lockmgr.Denied {
		t.Fatalf("b: %v", r.Verdict)
	}
	if n := descs(); n != 1 {
		t.Fatalf("%d descriptions after b's refusal, want a's only", n)
	}
	if r := d.Lock(lockmgr.LockArgs{File: k, Owner: b, Type: lockmgr.Read, Range: lockmgr.Whole, Block: true}); r.Verdict != lockmgr.Blocked {
		t.Fatalf("b blocking: %v", r.Verdict)
	}
	if n := descs(); n != 2 {
		t.Fatalf("%d descriptions while b waits, want 2", n)
	}
	d.Cancel(lockmgr.CancelArgs{File: k, Owner: b, Type: lockmgr.Read, Range: lockmgr.Whole})
	if n := descs(); n != 1 {
		t.Fatalf("%d descriptions after b's cancel, want 1", n)
	}
	d.Unlock(k, a, lockmgr.Whole)
	if n := descs(); n != 0 {
		t.Fatalf("%d descriptions after a's unlock, want none", n)
	}
}
