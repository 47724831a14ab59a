package tests

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"snfs/nlm4"
	"snfs/nsm"
	"snfs/server"
	"snfs/snfs1"
	"snfs/sunrpc"
	"snfs/xdr"
)

// NLM v4 and NSM served by the server (server/nlm.go, server/nsm.go): two
// client hosts' lock managers (caller names "host-a", "host-b") calling over
// TCP, their callbacks served by the test's client host side.

// TestNLMExclusion: two hosts' locks exclude each other; TEST names the holder
// (svid, oh, range); an NLM lock, an snfs client's lock and a local process's
// lock on the backing file exclude one another both ways; UNLOCK splits.
func TestNLMExclusion(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	h := newNLMHostSide(t)
	e := newNLMEnv(t, h, 0)
	fh := e.create(e.nfs, e.root, "db", 0o644)
	a, b := newNLMClient(t, e, "host-a"), newNLMClient(t, e, "host-b")

	wantNLM(t, "A write [0,10)", a.lock(a.lk(fh, 1, 0, 10), true, false, false), nlm4.Granted)
	wantNLM(t, "B write [5,6)", b.lock(b.lk(fh, 1, 5, 1), true, false, false), nlm4.Denied)
	wantNLM(t, "B read [9,10)", b.lock(b.lk(fh, 1, 9, 1), false, false, false), nlm4.Denied)
	wantNLM(t, "B write [10,20): adjacent", b.lock(b.lk(fh, 1, 10, 10), true, false, false), nlm4.Granted)
	wantNLM(t, "A's other owner write [0,1)", a.lock(a.lk(fh, 2, 0, 1), true, false, false), nlm4.Denied)
	tr := b.test(b.lk(fh, 1, 0, 1), false)
	wantNLM(t, "B TEST [0,1)", tr.Stat, nlm4.Denied)
	if hd := tr.Holder; !hd.Exclusive || hd.Svid != 1 || string(hd.OH) != "1@host-a" || hd.Offset != 0 || hd.Len != 10 {
		t.Fatalf("TEST holder %+v, want A's svid 1 write [0,10)", hd)
	}
	if !bytes.Equal(tr.Cookie, []byte{0, byte(b.n)}) {
		t.Fatalf("TEST cookie %x", tr.Cookie)
	}
	wantNLM(t, "A TEST its own range", a.test(a.lk(fh, 1, 0, 10), true).Stat, nlm4.Granted)

	// A local process meets the NLM locks, and they meet its.
	if _, err := localLock(t, e.path("db"), unix.F_WRLCK, 3, 1); err != unix.EAGAIN && err != unix.EACCES {
		t.Fatalf("local write lock under A's: %v, want EAGAIN", err)
	}
	if _, err := localLock(t, e.path("db"), unix.F_WRLCK, 100, 10); err != nil {
		t.Fatalf("local write lock [100,110): %v", err)
	}
	wantNLM(t, "A read [105,106) under the local lock", a.lock(a.lk(fh, 1, 105, 1), false, false, false), nlm4.Denied)
	tr = b.test(b.lk(fh, 1, 104, 2), false)
	if tr.Stat != nlm4.Denied || tr.Holder.Svid != 0 || !tr.Holder.Exclusive || tr.Holder.Offset != 100 || tr.Holder.Len != 10 {
		t.Fatalf("TEST under the local lock: %+v", tr)
	}

	// An snfs protocol client meets them too.
	p := newProtoClient(t, e, "snfs-c")
	wantLock(t, "snfs write [15,16) under B's", p.lock(fh, 1, snfs1.LockWrite, 15, 1, false), snfs1.LockDenied)
	wantLock(t, "snfs write [50,60)", p.lock(fh, 1, snfs1.LockWrite, 50, 10, false), snfs1.LockGranted)
	wantNLM(t, "A write [55,56) under snfs's", a.lock(a.lk(fh, 1, 55, 1), true, false, false), nlm4.Denied)

	// UNLOCK of the middle splits A's lock.
	wantNLM(t, "A unlock [4,6)", a.unlock(a.lk(fh, 1, 4, 2)), nlm4.Granted)
	wantNLM(t, "B write [4,6) in the hole", b.lock(b.lk(fh, 1, 4, 2), true, false, false), nlm4.Granted)
	wantNLM(t, "B write [3,4) still A's", b.lock(b.lk(fh, 1, 3, 1), true, false, false), nlm4.Denied)
	if fl := localTest(t, e.path("db"), unix.F_WRLCK, 6, 1); fl.Type != unix.F_WRLCK || fl.Start != 6 || fl.Len != 4 {
		t.Fatalf("local F_OFD_GETLK [6,7): %+v, want A's write [6,10)", fl)
	}
	wantNLM(t, "A unlock all", a.unlock(a.lk(fh, 1, 0, 0)), nlm4.Granted)
	wantNLM(t, "A unlock all again", a.unlock(a.lk(fh, 1, 0, 0)), nlm4.Granted)
	wantNLM(t, "B write [0,4)", b.lock(b.lk(fh, 1, 0, 4), true, false, false), nlm4.Granted)

	// NM_LOCK: a lock from a host without a status monitor.
	var res nlm4.Res
	c := newNLMClient(t, e, "host-c")
	c.call(nlm4.ProcNMLock, &nlm4.LockArgs{Cookie: c.cookie(), Exclusive: true, Lock: c.lk(fh, 7, 200, 1)}, &res)
	wantNLM(t, "C NM_LOCK [200,201)", res.Stat, nlm4.Granted)
	wantNLM(t, "B read [200,201)", b.lock(b.lk(fh, 1, 200, 1), false, false, false), nlm4.Denied)

	// Over UDP, as clients mounted with proto=udp call.
	u, err := sunrpc.Dial(ctx, "udp", e.addr, nlm4.Program, nlm4.Version)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	bu := &nlmClient{t: t, name: "host-b", rpc: u}
	wantNLM(t, "B over UDP: write [0,4) again", bu.lock(bu.lk(fh, 1, 0, 4), true, false, false), nlm4.Granted)
	wantNLM(t, "B over UDP: write [200,201)", bu.lock(bu.lk(fh, 1, 200, 1), true, false, false), nlm4.Denied)

	// A handle that is no file's.
	bad := append(nfs3FH(fh), 0)
	wantNLM(t, "LOCK of a bad handle", a.lock(a.lk(bad, 1, 0, 1), true, false, false), nlm4.StaleFH)
	if _, err := os.Stat(filepath.Join(e.stateDir, "nlm", "state")); err != nil {
		t.Fatalf("no NSM state file: %v", err)
	}
}

func nfs3FH(b []byte) []byte { return append([]byte{}, b...) }

// TestNLMBlockedGranted: a blocking LOCK that conflicts is answered BLOCKED,
// and when the holder unlocks the server calls GRANTED on the waiting host's
// lock manager (found through its rpcbind) with the lock as requested; the
// lock is then held. CANCEL withdraws a waiter: no GRANTED comes for it. A
// GRANTED the client refuses is backed out.
func TestNLMBlockedGranted(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	h := newNLMHostSide(t)
	e := newNLMEnv(t, h, 0)
	fh := e.create(e.nfs, e.root, "f", 0o644)
	a, b, c := newNLMClient(t, e, "host-a"), newNLMClient(t, e, "host-b"), newNLMClient(t, e, "host-c")

	wantNLM(t, "A write all", a.lock(a.lk(fh, 1, 0, 0), true, false, false), nlm4.Granted)
	wantNLM(t, "B blocking write [0,100)", b.lock(b.lk(fh, 4, 0, 100), true, true, false), nlm4.Blocked)
	wantNLM(t, "B re-sends its blocking LOCK", b.lock(b.lk(fh, 4, 0, 100), true, true, false), nlm4.Blocked)
	wantNLM(t, "C blocking read [50,51)", c.lock(c.lk(fh, 2, 50, 1), false, true, false), nlm4.Blocked)
	h.noGranted("while A holds", 300*time.Millisecond)
	wantNLM(t, "C cancels", c.cancel(c.lk(fh, 2, 50, 1), false), nlm4.Granted)

	wantNLM(t, "A unlocks", a.unlock(a.lk(fh, 1, 0, 0)), nlm4.Granted)
	g := h.waitGranted("B's grant")
	if g.Lock.CallerName != "host-b" || g.Lock.Svid != 4 || string(g.Lock.OH) != "4@host-b" || !g.Exclusive ||
		g.Lock.Offset != 0 || g.Lock.Len != 100 || !bytes.Equal(g.Lock.FH, fh) || len(g.Cookie) == 0 || len(g.Cookie) > nlm4.MaxCookieSent {
		t.Fatalf("GRANTED %+v, want B's write [0,100)", g)
	}
	h.noGranted("C cancelled", 300*time.Millisecond)
	tr := a.test(a.lk(fh, 1, 10, 1), false)
	if tr.Stat != nlm4.Denied || tr.Holder.Svid != 4 {
		t.Fatalf("A TEST after B's grant: %+v", tr)
	}
	wantNLM(t, "C read [100,101): past B's", c.lock(c.lk(fh, 2, 100, 1), false, false, false), nlm4.Granted)

	// A grant the client refuses (it no longer waits) is backed out.
	wantNLM(t, "A blocking write [0,1)", a.lock(a.lk(fh, 1, 0, 1), true, true, false), nlm4.Blocked)
	h.grantAns <- nlm4.Denied
	wantNLM(t, "B unlocks", b.unlock(b.lk(fh, 4, 0, 0)), nlm4.Granted)
	h.waitGranted("A's grant, refused")
	deadline := time.Now().Add(10 * time.Second)
	for b.lock(b.lk(fh, 4, 0, 1), true, false, false) != nlm4.Granted {
		if time.Now().After(deadline) {
			t.Fatal("the refused grant was not backed out")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestNLMMsgForms: the _MSG calls are answered by calls to the host's _RES
// procedures, with the call's cookie and the same results.
func TestNLMMsgForms(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	h := newNLMHostSide(t)
	e := newNLMEnv(t, h, 0)
	fh := e.create(e.nfs, e.root, "f", 0o644)
	a, b := newNLMClient(t, e, "host-a"), newNLMClient(t, e, "host-b")

	wantRes := func(what string, proc uint32) []byte {
		t.Helper()
		select {
		case r := <-h.results:
			if r.proc != proc {
				t.Fatalf("%s: %s, want %s", what, nlm4.ProcNames[r.proc], nlm4.ProcNames[proc])
			}
			return r.body
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no %s call", what, nlm4.ProcNames[proc])
		}
		panic("unreachable")
	}
	decodeRes := func(body []byte) nlm4.Res {
		var r nlm4.Res
		if err := r.Decode(xdr.NewReader(body)); err != nil {
			t.Fatal(err)
		}
		return r
	}
	a.call(nlm4.ProcLockMsg, &nlm4.LockArgs{Cookie: []byte("lk1"), Exclusive: true, Lock: a.lk(fh, 1, 0, 10), State: 3}, nil)
	if r := decodeRes(wantRes("LOCK_MSG", nlm4.ProcLockRes)); r.Stat != nlm4.Granted || string(r.Cookie) != "lk1" {
		t.Fatalf("LOCK_RES %+v", r)
	}
	b.call(nlm4.ProcTestMsg, &nlm4.TestArgs{Cookie: []byte("t1"), Exclusive: true, Lock: b.lk(fh, 1, 5, 1)}, nil)
	var tr nlm4.TestRes
	if err := tr.Decode(xdr.NewReader(wantRes("TEST_MSG", nlm4.ProcTestRes))); err != nil {
		t.Fatal(err)
	}
	if tr.Stat != nlm4.Denied || string(tr.Cookie) != "t1" || tr.Holder.Svid != 1 {
		t.Fatalf("TEST_RES %+v", tr)
	}
	b.call(nlm4.ProcCancelMsg, &nlm4.CancArgs{Cookie: []byte("c1"), Lock: b.lk(fh, 1, 5, 1)}, nil)
	if r := decodeRes(wantRes("CANCEL_MSG", nlm4.ProcCancelRes)); r.Stat != nlm4.Granted || string(r.Cookie) != "c1" {
		t.Fatalf("CANCEL_RES %+v", r)
	}
	a.call(nlm4.ProcUnlockMsg, &nlm4.UnlockArgs{Cookie: []byte("u1"), Lock: a.lk(fh, 1, 0, 0)}, nil)
	if r := decodeRes(wantRes("UNLOCK_MSG", nlm4.ProcUnlockRes)); r.Stat != nlm4.Granted || string(r.Cookie) != "u1" {
		t.Fatalf("UNLOCK_RES %+v", r)
	}
	wantNLM(t, "B write after A's UNLOCK_MSG", b.lock(b.lk(fh, 1, 5, 1), true, false, false), nlm4.Granted)
}

// TestNLMShare: SHARE reservations deny by the DOS rules; UNSHARE lifts them.
func TestNLMShare(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	h := newNLMHostSide(t)
	e := newNLMEnv(t, h, 0)
	fh := e.create(e.nfs, e.root, "f", 0o644)
	a, b := newNLMClient(t, e, "host-a"), newNLMClient(t, e, "host-b")
	share := func(c *nlmClient, proc uint32, mode nlm4.FshMode, acc nlm4.FshAccess) nlm4.Stat {
		var res nlm4.ShareRes
		c.call(proc, &nlm4.ShareArgs{Cookie: c.cookie(), Share: nlm4.Share{CallerName: c.name, FH: fh, OH: []byte("o"),
			Mode: mode, Access: acc}}, &res)
		return res.Stat
	}
	wantNLM(t, "A share rw deny write", share(a, nlm4.ProcShare, nlm4.DenyWrite, nlm4.AccessReadWrite), nlm4.Granted)
	wantNLM(t, "B share w", share(b, nlm4.ProcShare, nlm4.DenyNone, nlm4.AccessWrite), nlm4.Denied)
	wantNLM(t, "B share r", share(b, nlm4.ProcShare, nlm4.DenyNone, nlm4.AccessRead), nlm4.Granted)
	wantNLM(t, "A unshare", share(a, nlm4.ProcUnshare, 0, 0), nlm4.Granted)
	wantNLM(t, "B share rw", share(b, nlm4.ProcShare, nlm4.DenyNone, nlm4.AccessReadWrite), nlm4.Granted)
}

// TestNLMClientRestart: FREE_ALL from a host, and SM_NOTIFY from a host's
// status monitor (the host restarted), release everything that host held and
// grant what waited for it; the other host's locks stay.
func TestNLMClientRestart(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	h := newNLMHostSide(t)
	e := newNLMEnv(t, h, 0)
	fh := e.create(e.nfs, e.root, "f", 0o644)
	a, b, c := newNLMClient(t, e, "host-a"), newNLMClient(t, e, "host-b"), newNLMClient(t, e, "host-c")

	wantNLM(t, "A write [0,10)", a.lock(a.lk(fh, 1, 0, 10), true, false, false), nlm4.Granted)
	wantNLM(t, "C write [20,30)", c.lock(c.lk(fh, 1, 20, 10), true, false, false), nlm4.Granted)
	wantNLM(t, "B blocking write [0,1)", b.lock(b.lk(fh, 1, 0, 1), true, true, false), nlm4.Blocked)
	a.call(nlm4.ProcFreeAll, &nlm4.Notify{Name: "host-a", State: 5}, nil)
	if g := h.waitGranted("B after A's FREE_ALL"); g.Lock.CallerName != "host-b" {
		t.Fatalf("GRANTED %+v", g)
	}
	wantNLM(t, "B write [20,21): C's", b.lock(b.lk(fh, 1, 20, 1), true, false, false), nlm4.Denied)

	sm, err := sunrpcDialNSM(e)
	if err != nil {
		t.Fatal(err)
	}
	defer sm.Close()
	if err := sm.Call(ctx, nsm.ProcNotify, &nsm.StatChge{MonName: "host-c", State: 7}, nil); err != nil {
		t.Fatal(err)
	}
	wantNLM(t, "B write [20,21) after C's SM_NOTIFY", b.lock(b.lk(fh, 1, 20, 1), true, false, false), nlm4.Granted)
	wantNLM(t, "B still holds [0,1)", a.lock(a.lk(fh, 1, 0, 1), true, false, false), nlm4.Denied)
	// The records of the hosts to notify after a restart: C's is gone (it
	// restarted); A's was removed by its FREE_ALL and written again by its
	// LOCK since.
	names := nsmRecords(t, e)
	if want := []string{"host-a\n127.0.0.1\n", "host-b\n127.0.0.1\n"}; !slices.Equal(names, want) {
		t.Fatalf("NSM records %q, want %q", names, want)
	}
	var st nsm.StatRes
	if err := sm.Call(ctx, nsm.ProcStat, &nsm.Name{MonName: "x"}, &st); err != nil || st.State != 3 {
		t.Fatalf("SM_STAT: %+v %v, want the first state number 3", st, err)
	}
}

// TestNLMServerRestart: after a restart the server advances its NSM state
// number, sends SM_NOTIFY with it to every host that held a lock (found
// through the host's rpcbind), and in the grace period grants only reclaims:
// another host's LOCK and TEST are NLM4_DENIED_GRACE_PERIOD, the reclaim is
// granted, and after the grace period the reclaimed lock still excludes.
func TestNLMServerRestart(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	h := newNLMHostSide(t)
	e := newNLMEnv(t, h, 3*time.Second)
	fh := e.create(e.nfs, e.root, "f", 0o644)
	a := newNLMClient(t, e, "host-a")
	wantNLM(t, "A write [0,10)", a.lock(a.lk(fh, 1, 0, 10), true, false, false), nlm4.Granted)
	g := newNLMClient(t, e, "host-gone") // never comes back after the restart
	wantNLM(t, "G write [50,60)", g.lock(g.lk(fh, 1, 50, 10), true, false, false), nlm4.Granted)
	select {
	case n := <-h.notified:
		t.Fatalf("SM_NOTIFY before any restart: %+v", n)
	default:
	}

	e.restart()
	for range 2 { // to A and G
		select {
		case n := <-h.notified:
			host, _ := os.Hostname()
			if n.State != 5 || n.MonName != host {
				t.Fatalf("SM_NOTIFY %+v, want state 5 from %q", n, host)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no SM_NOTIFY after the restart")
		}
	}
	a, b := newNLMClient(t, e, "host-a"), newNLMClient(t, e, "host-b")
	wantNLM(t, "B write [0,1) in grace", b.lock(b.lk(fh, 1, 0, 1), true, false, false), nlm4.DeniedGracePeriod)
	wantNLM(t, "B TEST in grace", b.test(b.lk(fh, 1, 0, 1), true).Stat, nlm4.DeniedGracePeriod)
	wantNLM(t, "A reclaims [0,10)", a.lock(a.lk(fh, 1, 0, 10), true, false, true), nlm4.Granted)
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := b.lock(b.lk(fh, 1, 0, 1), true, false, false)
		if st == nlm4.Denied {
			break
		}
		if st != nlm4.DeniedGracePeriod || time.Now().After(deadline) {
			t.Fatalf("B after grace: %v, want NLM4_DENIED (A reclaimed)", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
	wantNLM(t, "B write [10,11) after grace", b.lock(b.lk(fh, 1, 10, 1), true, false, false), nlm4.Granted)
	// G held its lock before the restart but did not reclaim it: it is free,
	// and G's record is forgotten once the grace period is over.
	wantNLM(t, "B write [50,60): G's, not reclaimed", b.lock(b.lk(fh, 1, 50, 10), true, false, false), nlm4.Granted)
	want := []string{"host-a\n127.0.0.1\n", "host-b\n127.0.0.1\n"}
	for names := nsmRecords(t, e); !slices.Equal(names, want); names = nsmRecords(t, e) {
		if time.Now().After(deadline) { // the grace period ended: G's record goes at once
			t.Fatalf("NSM records after the grace period %q, want A's and B's", names)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// nsmRecords are the contents of the server's NSM records, sorted.
func nsmRecords(t *testing.T, e *env) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(e.stateDir, "nlm", "sm"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, x := range ents {
		b, err := os.ReadFile(filepath.Join(e.stateDir, "nlm", "sm", x.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted since the listing (a grace period's end): not a record now
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, string(b))
	}
	sort.Strings(names)
	return names
}

// TestNLMBound: a host past its bound of lock records is answered
// NLM4_DENIED_NOLOCKS; releasing a record makes room again.
func TestNLMBound(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	h := newNLMHostSide(t)
	e := newNLMEnv(t, h, 0)
	e.restartWith(func(c *server.Config) { c.MaxLocksPerClient = 3 })
	fh := e.create(e.nfs, e.root, "f", 0o644)
	a, b := newNLMClient(t, e, "host-a"), newNLMClient(t, e, "host-b")
	for i := uint64(0); i < 3; i++ {
		wantNLM(t, "A write a record", a.lock(a.lk(fh, 1, 10*i, 1), true, false, false), nlm4.Granted)
	}
	wantNLM(t, "A's fourth record", a.lock(a.lk(fh, 1, 100, 1), true, false, false), nlm4.DeniedNoLocks)
	wantNLM(t, "B's first record", b.lock(b.lk(fh, 1, 100, 1), true, false, false), nlm4.Granted)
	wantNLM(t, "A unlocks one", a.unlock(a.lk(fh, 1, 0, 1)), nlm4.Granted)
	wantNLM(t, "A's third record again", a.lock(a.lk(fh, 1, 50, 1), true, false, false), nlm4.Granted)
}
