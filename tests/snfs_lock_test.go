package tests

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"snfs/nfs3"
	"snfs/snfs1"
)

// Locks in the snfs protocol (docs/protocol.md, "LOCK"; server/lock.go): the
// server's one lock manager, mirrored on the backing file with F_OFD_SETLK.

func (p *protoClient) clientID() snfs1.ClientID {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.id
}

func (p *protoClient) lock(fh nfs3.FH, owner uint64, typ snfs1.LockType, off, n uint64, block bool) *snfs1.LockRes {
	p.t.Helper()
	var res snfs1.LockRes
	err := p.rpc.Call(ctx, snfs1.ProcLock, &snfs1.LockArgs{Client: p.clientID(), File: fh, Owner: owner, Type: typ,
		Offset: off, Length: n, Block: block}, &res)
	ok(p.t, "LOCK", res.Status, err)
	return &res
}

func (p *protoClient) lockt(fh nfs3.FH, owner uint64, typ snfs1.LockType, off, n uint64) *snfs1.LockRes {
	p.t.Helper()
	var res snfs1.LockRes
	err := p.rpc.Call(ctx, snfs1.ProcLockT, &snfs1.LockTArgs{Client: p.clientID(), File: fh, Owner: owner, Type: typ,
		Offset: off, Length: n}, &res)
	ok(p.t, "LOCKT", res.Status, err)
	return &res
}

func (p *protoClient) locku(fh nfs3.FH, owner uint64, off, n uint64, cancel snfs1.LockType) {
	p.t.Helper()
	var res snfs1.StatusRes
	err := p.rpc.Call(ctx, snfs1.ProcLockU, &snfs1.LockUArgs{Client: p.clientID(), File: fh, Owner: owner,
		Offset: off, Length: n, Cancel: cancel != 0, Type: cancel}, &res)
	ok(p.t, "LOCKU", res.Status, err)
}

func wantLock(t *testing.T, what string, res *snfs1.LockRes, want snfs1.LockStat) {
	t.Helper()
	if res.Stat != want {
		t.Fatalf("%s: %v (holder %+v), want %v", what, res.Stat, res.Holder, want)
	}
}

// localLock tries a lock of a process on the server machine on path
// (F_OFD_SETLK on a description of its own); the description is returned
// open (its locks last until it is closed).
func localLock(t *testing.T, path string, typ int16, start, n int64) (int, error) {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	fl := unix.Flock_t{Type: typ, Start: start, Len: n}
	return fd, unix.FcntlFlock(uintptr(fd), unix.F_OFD_SETLK, &fl)
}

// localTest is F_OFD_GETLK on a fresh description of path.
func localTest(t *testing.T, path string, typ int16, start, n int64) unix.Flock_t {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	fl := unix.Flock_t{Type: typ, Start: start, Len: n}
	if err := unix.FcntlFlock(uintptr(fd), unix.F_OFD_GETLK, &fl); err != nil {
		t.Fatal(err)
	}
	return fl
}

func (p *protoClient) waitGrant(what string) snfs1.GrantedArgs {
	p.t.Helper()
	select {
	case g := <-p.granted:
		return g
	case <-time.After(30 * time.Second): // a failure bound, not a speed assertion
		p.t.Fatalf("%s: no CB_GRANTED", what)
	}
	panic("unreachable")
}

func (p *protoClient) noGrant(what string) {
	p.t.Helper()
	select {
	case g := <-p.granted:
		p.t.Fatalf("%s: unexpected CB_GRANTED %+v", what, g)
	default:
	}
}

// TestSNFSLockExclusion: two clients' locks exclude each other by range and
// type; LOCKT names the holder; a local process on the server meets the
// clients' locks and they meet its.
func TestSNFSLockExclusion(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	fh := e.create(e.nfs, e.root, "db", 0o644)
	a, b := newProtoClient(t, e, "lock-a"), newProtoClient(t, e, "lock-b")

	wantLock(t, "A write [0,10)", a.lock(fh, 1, snfs1.LockWrite, 0, 10, false), snfs1.LockGranted)
	res := b.lock(fh, 1, snfs1.LockWrite, 5, 1, false)
	wantLock(t, "B write [5,6) under A's", res, snfs1.LockDenied)
	if h := res.Holder; h.Type != snfs1.LockWrite || h.Offset != 0 || h.Length != 10 || h.Local {
		t.Fatalf("holder %+v, want A's write [0,10)", h)
	}
	wantLock(t, "B read [9,10) under A's write", b.lock(fh, 1, snfs1.LockRead, 9, 1, false), snfs1.LockDenied)
	wantLock(t, "B LOCKT [0,1)", b.lockt(fh, 1, snfs1.LockRead, 0, 1), snfs1.LockDenied)
	wantLock(t, "B write [10,20) beside A's", b.lock(fh, 1, snfs1.LockWrite, 10, 10, false), snfs1.LockGranted)
	wantLock(t, "A's second owner, read [0,1)", a.lock(fh, 2, snfs1.LockRead, 0, 1, false), snfs1.LockDenied)

	// A process on the server: the clients' locks are on the backing file.
	if _, err := localLock(t, e.path("db"), unix.F_WRLCK, 3, 1); err == nil {
		t.Fatal("a local process took a byte A holds locked")
	}
	if fl := localTest(t, e.path("db"), unix.F_RDLCK, 15, 1); fl.Type != unix.F_WRLCK || fl.Start != 10 || fl.Len != 10 {
		t.Fatalf("F_OFD_GETLK on the server: %+v, want B's write lock [10,20)", fl)
	}
	// Unlocking a sub-range splits A's lock: [0,5) is free, [5,10) is not.
	a.locku(fh, 1, 0, 5, 0)
	wantLock(t, "B LOCKT [0,5) after A's partial unlock", b.lockt(fh, 1, snfs1.LockWrite, 0, 5), snfs1.LockGranted)
	wantLock(t, "B write [5,6) still A's", b.lock(fh, 1, snfs1.LockWrite, 5, 1, false), snfs1.LockDenied)
	if _, err := localLock(t, e.path("db"), unix.F_WRLCK, 0, 5); err != nil {
		t.Fatalf("a local lock of the range A unlocked: %v", err)
	}
	// Now the local process holds [0,5): the clients meet it.
	res = b.lock(fh, 1, snfs1.LockRead, 2, 1, false)
	wantLock(t, "B read under a local lock", res, snfs1.LockDenied)
	if !res.Holder.Local {
		t.Fatalf("holder %+v: not reported local", res.Holder)
	}
	res = b.lockt(fh, 1, snfs1.LockRead, 0, 3)
	if res.Stat != snfs1.LockDenied || !res.Holder.Local || res.Holder.Offset != 0 || res.Holder.Length != 5 {
		t.Fatalf("LOCKT over a local lock: %v %+v", res.Stat, res.Holder)
	}
	a.locku(fh, 1, 0, 5, 0) // idempotent: nothing of A's is there
}

// TestSNFSLockBlocked: a blocking LOCK is answered LOCK_BLOCKED at once and
// granted by CB_GRANTED when the holder unlocks; a cancelled waiter and an
// unwanted grant leave nothing held.
func TestSNFSLockBlocked(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	fh := e.create(e.nfs, e.root, "db", 0o644)
	a, b := newProtoClient(t, e, "lock-a"), newProtoClient(t, e, "lock-b")

	wantLock(t, "A write", a.lock(fh, 1, snfs1.LockWrite, 0, 0, false), snfs1.LockGranted)
	wantLock(t, "B blocking write", b.lock(fh, 7, snfs1.LockWrite, 0, 0, true), snfs1.LockBlocked)
	b.noGrant("while A holds the lock")
	a.locku(fh, 1, 0, 0, 0)
	g := b.waitGrant("after A's unlock")
	if string(g.File) != string(fh) || g.Owner != 7 || g.Type != snfs1.LockWrite || g.Offset != 0 || g.Length != 0 {
		t.Fatalf("CB_GRANTED %+v", g)
	}
	wantLock(t, "A write after B's grant", a.lock(fh, 1, snfs1.LockWrite, 0, 1, false), snfs1.LockDenied)

	// A waits, then cancels: B's unlock grants nothing.
	wantLock(t, "A blocking write", a.lock(fh, 1, snfs1.LockWrite, 0, 0, true), snfs1.LockBlocked)
	a.locku(fh, 1, 0, 0, snfs1.LockWrite)
	b.locku(fh, 7, 0, 0, 0)
	if _, err := localLock(t, e.path("db"), unix.F_WRLCK, 0, 0); err != nil {
		t.Fatalf("local lock after the cancel and the unlock: %v", err)
	}
	a.noGrant("after its cancel")
}

// TestSNFSLockGrantUnwanted: a client that answers CB_GRANTED with
// GRANTED_UNWANTED (its process went away) does not keep the lock.
func TestSNFSLockGrantUnwanted(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	fh := e.create(e.nfs, e.root, "db", 0o644)
	a, b := newProtoClient(t, e, "lock-a"), newProtoClient(t, e, "lock-b")
	b.mu.Lock()
	b.grantAnswer = snfs1.GrantedUnwanted
	b.mu.Unlock()
	wantLock(t, "A write", a.lock(fh, 1, snfs1.LockWrite, 0, 0, false), snfs1.LockGranted)
	wantLock(t, "B blocking write", b.lock(fh, 7, snfs1.LockWrite, 0, 0, true), snfs1.LockBlocked)
	a.locku(fh, 1, 0, 0, 0)
	b.waitGrant("after A's unlock")
	// The back-out follows the answer: A's LOCK is tried until it is granted,
	// and must be (nothing else holds the file).
	for range 1000 {
		if r := a.lock(fh, 1, snfs1.LockWrite, 0, 0, false); r.Stat == snfs1.LockGranted {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("B's unwanted grant was never backed out")
}

// TestSNFSLockUnregister: a client's locks go when its registration ends.
func TestSNFSLockUnregister(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	fh := e.create(e.nfs, e.root, "db", 0o644)
	a := newProtoClient(t, e, "lock-a")
	wantLock(t, "A write", a.lock(fh, 1, snfs1.LockWrite, 0, 0, false), snfs1.LockGranted)
	if _, err := localLock(t, e.path("db"), unix.F_WRLCK, 0, 0); err == nil {
		t.Fatal("a local lock over A's")
	}
	var res snfs1.StatusRes
	err := a.rpc.Call(ctx, snfs1.ProcUnregister, &snfs1.ClientArgs{Client: a.clientID()}, &res)
	ok(t, "UNREGISTER", res.Status, err)
	if _, err := localLock(t, e.path("db"), unix.F_WRLCK, 0, 0); err != nil {
		t.Fatalf("local lock after A unregistered: %v", err)
	}
}

// TestSNFSLockGrace: the lock manager's grace period is the consistency
// protocol's: after a restart with a client recorded, a LOCK is answered
// LOCK_GRACE until that client is back, then granted.
func TestSNFSLockGrace(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	fh := e.create(e.nfs, e.root, "db", 0o644)
	g := dialGrace(t, e, "lock-grace", nil)
	g.holding.Store(true) // its reclaim waits until the checks below are made
	restartGrace(e, time.Hour)
	b := newProtoClient(t, e, "lock-b")
	wantLock(t, "B write during the grace period", b.lock(fh, 1, snfs1.LockWrite, 0, 0, false), snfs1.LockGrace)
	wantLock(t, "B LOCKT during the grace period", b.lockt(fh, 1, snfs1.LockWrite, 0, 0), snfs1.LockGrace)
	close(g.hold)
	if g.comeBack(t) {
		t.Fatal("the recorded client's reclaim was refused")
	}
	waitGrace(t, e)
	wantLock(t, "B write after the grace period", b.lock(fh, 1, snfs1.LockWrite, 0, 0, false), snfs1.LockGranted)
}

// TestSNFSLockAccess: a caller who may neither read nor write a file cannot
// lock it; one who may only read it can take any lock (flock's exclusive lock
// on a read-only descriptor).
func TestSNFSLockAccess(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	secret := e.create(e.nfs, e.root, "secret", 0o600)
	readable := e.create(e.nfs, e.root, "readable", 0o644)
	a := newProtoClient(t, e, "lock-a")
	user := e.as(1000, 1000).Program(snfs1.Program, snfs1.Version)
	call := func(fh nfs3.FH) *snfs1.LockRes {
		var res snfs1.LockRes
		if err := user.Call(ctx, snfs1.ProcLock, &snfs1.LockArgs{Client: a.clientID(), File: fh, Owner: 1, Type: snfs1.LockWrite}, &res); err != nil {
			t.Fatal(err)
		}
		return &res
	}
	if res := call(secret); res.Status != nfs3.ErrAcces {
		t.Fatalf("LOCK of a file the caller cannot open: %v %v, want NFS3ERR_ACCES", res.Status, res.Stat)
	}
	if res := call(readable); res.Status != nfs3.OK || res.Stat != snfs1.LockGranted {
		t.Fatalf("write LOCK of a file the caller may read: %v %v", res.Status, res.Stat)
	}
}

// TestSNFSLockDeadlock: two clients' owners each holding what the other waits
// for: the request that would close the cycle is answered LOCK_DEADLOCK.
func TestSNFSLockDeadlock(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	fh := e.create(e.nfs, e.root, "db", 0o644)
	a, b := newProtoClient(t, e, "lock-a"), newProtoClient(t, e, "lock-b")
	wantLock(t, "A [0,1)", a.lock(fh, 1, snfs1.LockWrite, 0, 1, false), snfs1.LockGranted)
	wantLock(t, "B [1,2)", b.lock(fh, 1, snfs1.LockWrite, 1, 1, false), snfs1.LockGranted)
	wantLock(t, "A waits for [1,2)", a.lock(fh, 1, snfs1.LockWrite, 1, 1, true), snfs1.LockBlocked)
	wantLock(t, "B waits for [0,1)", b.lock(fh, 1, snfs1.LockWrite, 0, 1, true), snfs1.LockDeadlock)
	b.locku(fh, 1, 0, 0, 0)
	if g := a.waitGrant("after B's unlock"); g.Offset != 1 || g.Length != 1 {
		t.Fatalf("CB_GRANTED %+v", g)
	}
}

// TestSNFSLockReclaimNoGrace: a LOCK with reclaim TRUE is taken only from a
// client that may still reclaim (docs/protocol.md, "Server restart"):
// outside a grace period it is answered SNFS_ERR_NOGRACE and nothing is
// locked, so a client that came back too late learns its lock is lost
// instead of getting it back over another client's changes.
func TestSNFSLockReclaimNoGrace(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	fh := e.create(e.nfs, e.root, "db", 0o644)
	a, b := newProtoClient(t, e, "lock-a"), newProtoClient(t, e, "lock-b")
	var res snfs1.LockRes
	err := a.rpc.Call(ctx, snfs1.ProcLock, &snfs1.LockArgs{Client: a.clientID(), File: fh, Owner: 1, Type: snfs1.LockWrite,
		Reclaim: true}, &res)
	if err != nil || res.Status != snfs1.ErrNoGrace {
		t.Fatalf("LOCK reclaim outside the grace period: %v %v %v, want SNFS_ERR_NOGRACE", err, res.Status, res.Stat)
	}
	wantLock(t, "B write after A's refused reclaim", b.lock(fh, 1, snfs1.LockWrite, 0, 0, false), snfs1.LockGranted)
}
