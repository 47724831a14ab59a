package tests

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"snfs/nlm4"
	"snfs/nsm"
	"snfs/portmap"
	"snfs/sunrpc"
)

// hostRPCBind makes the server's NLM and NSM findable through an rpcbind on
// 127.0.0.1:111, where the guest's lockd asks (slirp turns 10.0.2.2:111 into
// it): a stand-in port mapper for the test if the port is free, else the
// system's rpcbind, with the mappings removed when the test ends.
func hostRPCBind(t *testing.T, port int) {
	maps := []portmap.Mapping{}
	for _, p := range []struct{ prog, vers uint32 }{{nlm4.Program, nlm4.Version}, {nsm.Program, nsm.Version}} {
		maps = append(maps, portmap.Mapping{Prog: p.prog, Vers: p.vers, Prot: portmap.ProtoTCP, Port: uint32(port)},
			portmap.Mapping{Prog: p.prog, Vers: p.vers, Prot: portmap.ProtoUDP, Port: uint32(port)})
	}
	ln, err := net.Listen("tcp", "127.0.0.1:111")
	if err == nil {
		pc, err := net.ListenPacket("udp", "127.0.0.1:111")
		if err != nil {
			ln.Close()
			t.Fatal(err)
		}
		pm := &portmap.Server{}
		for _, m := range maps {
			pm.Add(m)
		}
		s := &sunrpc.Server{Logger: quietLogger()}
		s.Register(pm.Program())
		done := make(chan struct{}, 2)
		go func() { s.ServeTCP(ln); done <- struct{}{} }()
		go func() { s.ServeUDP(pc); done <- struct{}{} }()
		t.Cleanup(func() {
			s.Shutdown(ctx)
			<-done
			<-done
		})
		return
	}
	c, derr := sunrpc.Dial(ctx, "tcp", "127.0.0.1:111", portmap.Program, portmap.Version)
	if derr != nil {
		t.Fatalf("port 111 is taken (%v) but no rpcbind answers there: %v", err, derr)
	}
	t.Cleanup(func() {
		for _, m := range maps {
			portmap.Unset(ctx, c, m.Prog, m.Vers)
		}
		c.Close()
	})
	for _, m := range maps {
		portmap.Unset(ctx, c, m.Prog, m.Vers)
	}
	for _, m := range maps {
		if ok, err := portmap.Set(ctx, c, m); err != nil || !ok {
			t.Fatalf("the system rpcbind refused %+v: %v", m, err)
		}
	}
}

// TestLinuxClientNLM: the stock Linux kernel client, mounted with locks (no
// nolock), against a Go NLM client and a local process on the server:
// flock and fcntl locks exclude each other both ways; and a blocked flock in
// the guest is granted when the Go client unlocks, by the server's GRANTED
// call into the guest (guestCallbacks), not by the guest's own poll, which
// comes 30 s after its blocked LOCK. The time from the unlock to the guest's
// process holding the lock (its byte on a connection to the test) is logged.
func TestLinuxClientNLM(t *testing.T) {
	// Serial (no t.Parallel): the Linux guest and the host's port 111.
	requireRoot(t)
	guestRunner(t)
	requireGuestLockTools(t)
	g := newGuestCallbacks(t)
	e := newGuestLockEnv(t, g, 0)
	hostRPCBind(t, e.port())
	for _, f := range []string{"held.lock", "local.lock", "guest.lock", "guest-range.lock", "wait.lock"} {
		if err := os.WriteFile(e.path(f), make([]byte, 200), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	rounds := 5 // SNFS_GUEST_GRANT_ROUNDS overrides it (a longer measurement)
	if v := os.Getenv("SNFS_GUEST_GRANT_ROUNDS"); v != "" {
		var err error
		if rounds, err = strconv.Atoi(v); err != nil || rounds <= 0 {
			t.Fatalf("SNFS_GUEST_GRANT_ROUNDS=%q: want a positive number", v)
		}
	}
	if err := os.WriteFile(e.path("rounds"), fmt.Appendf(nil, "%d\n", rounds), 0o666); err != nil {
		t.Fatal(err)
	}
	a, b := newNLMClient(t, e, "host-a"), newNLMClient(t, e, "host-b")
	held, wait := e.lookup(e.root, "held.lock"), e.lookup(e.root, "wait.lock")
	wantNLM(t, "A write held.lock [0,100)", a.lock(a.lk(held, 1, 0, 100), true, false, false), nlm4.Granted)
	if _, err := localLock(t, e.path("local.lock"), unix.F_WRLCK, 0, 0); err != nil {
		t.Fatal(err)
	}

	// The guest reports each grant on a connection to this port (slirp
	// turns 10.0.2.2:PORT into 127.0.0.1:PORT here).
	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer gln.Close()
	if err := os.WriteFile(e.path("grant-port"), fmt.Appendf(nil, "%d\n", gln.Addr().(*net.TCPAddr).Port), 0o666); err != nil {
		t.Fatal(err)
	}
	var gc net.Conn
	acceptGuest := func() net.Conn {
		t.Helper()
		gln.(*net.TCPListener).SetDeadline(time.Now().Add(240 * time.Second)) // a failure bound
		c, err := gln.Accept()
		if err != nil {
			t.Fatalf("the guest did not connect: %v", err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	out := guestLockRun(t, e, g, "nlm.sh")
	guestWaitFile(t, e, out, "guest.ready")
	gl, gr := e.lookup(e.root, "guest.lock"), e.lookup(e.root, "guest-range.lock")
	wantNLM(t, "B write guest.lock under the guest's flock", b.lock(b.lk(gl, 1, 0, 1), true, false, false), nlm4.Denied)
	if tr := b.test(b.lk(gl, 1, 0, 0), false); tr.Stat != nlm4.Denied || !tr.Holder.Exclusive {
		t.Fatalf("B TEST guest.lock: %+v, want the guest's whole-file write lock", tr)
	}
	wantNLM(t, "B write guest-range.lock [15,16)", b.lock(b.lk(gr, 1, 15, 1), true, false, false), nlm4.Denied)
	wantNLM(t, "B write guest-range.lock [25,26)", b.lock(b.lk(gr, 1, 25, 1), true, false, false), nlm4.Granted)
	for _, l := range []struct {
		f          string
		start, len int64
	}{{"guest.lock", 0, 0}, {"guest-range.lock", 12, 1}} {
		if _, err := localLock(t, e.path(l.f), unix.F_WRLCK, l.start, l.len); !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EACCES) {
			t.Fatalf("a local process's lock of %s [%d,+%d) under the guest's: %v, want EAGAIN", l.f, l.start, l.len, err)
		}
	}
	if err := os.WriteFile(e.path("release"), nil, 0o666); err != nil {
		t.Fatal(err)
	}

	var grants []time.Duration
	for i := 1; i <= rounds; i++ {
		wantNLM(t, fmt.Sprintf("round %d: A write wait.lock", i), a.lock(a.lk(wait, 1, 0, 0), true, false, false), nlm4.Granted)
		if i == 1 {
			// The guest connects before its first wait.
			gc = acceptGuest()
		}
		if err := os.WriteFile(e.path(fmt.Sprintf("go.%d", i)), nil, 0o666); err != nil {
			t.Fatal(err)
		}
		guestWaitFile(t, e, out, fmt.Sprintf("waiting.%d", i))
		time.Sleep(time.Second) // let the guest's LOCK queue behind A's
		t0 := time.Now()
		wantNLM(t, fmt.Sprintf("round %d: A unlocks wait.lock", i), a.unlock(a.lk(wait, 1, 0, 0)), nlm4.Granted)
		// The guest's poll would come 30 s after its blocked LOCK, which
		// was sent at least a second before the unlock: a grant within
		// 10 s of the unlock came by the callback.
		gc.SetReadDeadline(t0.Add(10 * time.Second))
		if _, err := io.ReadFull(gc, make([]byte, 1)); err != nil {
			t.Fatalf("round %d: the guest's process did not get wait.lock within 10 s of the unlock (%v): not by the server's GRANTED", i, err)
		}
		grants = append(grants, time.Since(t0))
		guestWaitFile(t, e, out, fmt.Sprintf("released.%d", i))
	}
	tr := guestDone(t, out)
	t.Logf("guest transcript:\n%s", tr)
	slices.Sort(grants)
	t.Logf("from the unlock to the guest's process holding the lock (its byte through slirp): median %v, all %v", grants[len(grants)/2], grants)
}

// TestLinuxClientNLMReclaim: the guest's kernel client holds a flock and an
// fcntl range lock; the server restarts (same port and state); its SM_NOTIFY
// reaches the guest's rpc.statd through slirp (guestCallbacks), the guest's
// lockd reclaims both locks in the grace period, and after it a second client
// (the Go NLM client), an snfs mount and a local process on the server are
// denied them; when the guest lets go, they are free.
func TestLinuxClientNLMReclaim(t *testing.T) {
	// Serial (no t.Parallel): the Linux guest and the host's port 111.
	requireRoot(t)
	guestRunner(t)
	requireGuestLockTools(t)
	g := newGuestCallbacks(t)
	const grace = 10 * time.Second
	e := newGuestLockEnv(t, g, grace)
	hostRPCBind(t, e.port())
	for _, f := range []string{"reclaim.lock", "reclaim-range.lock", "after.lock"} {
		if err := os.WriteFile(e.path(f), make([]byte, 200), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	b := newNLMClient(t, e, "host-b")
	out := guestLockRun(t, e, g, "nlm-reclaim.sh")
	guestWaitFile(t, e, out, "guest.ready")
	fl, fr := e.lookup(e.root, "reclaim.lock"), e.lookup(e.root, "reclaim-range.lock")
	wantNLM(t, "B write reclaim.lock before the restart", b.lock(b.lk(fl, 1, 0, 1), true, false, false), nlm4.Denied)

	e.restart()
	restarted := time.Now()
	// The guest's two locks come back (reclaims: nothing else is granted in
	// the grace period).
	for e.srv.LockStats().Records < 2 {
		if time.Since(restarted) > grace { // a failure bound: reclaims come in the grace period
			t.Fatalf("the guest did not reclaim its locks in the grace period: %+v", e.srv.LockStats())
		}
		time.Sleep(time.Millisecond)
	}
	reclaimed := time.Since(restarted)
	wantNLM(t, "B write reclaim.lock in the grace period", b.lock(b.lk(fl, 1, 0, 1), true, false, false), nlm4.DeniedGracePeriod)
	// The lock manager's grace lasts its whole bound when NLM hosts were
	// recorded (they send no "reclaim done"): ask until it is over.
	st := nlm4.DeniedGracePeriod
	for st == nlm4.DeniedGracePeriod {
		if time.Since(restarted) > 3*grace { // a failure bound
			t.Fatal("the grace period did not end")
		}
		time.Sleep(200 * time.Millisecond)
		st = b.lock(b.lk(fl, 1, 0, 1), true, false, false)
	}
	wantNLM(t, "B write reclaim.lock after the grace period", st, nlm4.Denied)
	if tr := b.test(b.lk(fl, 1, 0, 0), false); tr.Stat != nlm4.Denied || !tr.Holder.Exclusive {
		t.Fatalf("B TEST reclaim.lock: %+v, want the guest's reclaimed whole-file write lock", tr)
	}
	wantNLM(t, "B write reclaim-range.lock [15,16)", b.lock(b.lk(fr, 1, 15, 1), true, false, false), nlm4.Denied)
	wantNLM(t, "B write reclaim-range.lock [25,26)", b.lock(b.lk(fr, 1, 25, 1), true, false, false), nlm4.Granted)
	for _, l := range []struct {
		f          string
		start, len int64
	}{{"reclaim.lock", 0, 0}, {"reclaim-range.lock", 12, 1}} {
		if _, err := localLock(t, e.path(l.f), unix.F_WRLCK, l.start, l.len); !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EACCES) {
			t.Fatalf("a local process's lock of %s [%d,+%d) under the guest's reclaimed lock: %v, want EAGAIN", l.f, l.start, l.len, err)
		}
	}
	// An snfs mount, mounted after the restart, is denied them too.
	m := newSNFSMount(t, e, "M", "", time.Hour)
	mf, mr := openRW(t, m.path("reclaim.lock")), openRW(t, m.path("reclaim-range.lock"))
	if err := unix.Flock(int(mf.Fd()), unix.LOCK_EX|unix.LOCK_NB); !errors.Is(err, unix.EWOULDBLOCK) {
		t.Fatalf("flock of reclaim.lock through an snfs mount under the guest's reclaimed lock: %v, want EWOULDBLOCK", err)
	}
	wantEAGAIN(t, "fcntl [12,13) of reclaim-range.lock through an snfs mount", setlk(mr, unix.F_WRLCK, 12, 1))
	if err := setlk(mr, unix.F_WRLCK, 30, 1); err != nil {
		t.Fatalf("fcntl [30,31) of reclaim-range.lock through an snfs mount, past the guest's lock: %v", err)
	}
	if err := setlk(mr, unix.F_UNLCK, 30, 1); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.path("release"), nil, 0o666); err != nil {
		t.Fatal(err)
	}
	guestWaitFile(t, e, out, "released")
	wantNLM(t, "B write reclaim.lock once the guest let go", b.lock(b.lk(fl, 1, 0, 1), true, false, false), nlm4.Granted)
	wantNLM(t, "B write reclaim-range.lock [15,16) once the guest let go", b.lock(b.lk(fr, 1, 15, 1), true, false, false), nlm4.Granted)
	tr := guestDone(t, out)
	t.Logf("guest transcript:\n%s", tr)
	t.Logf("the guest's locks were back %v after the server's restart", reclaimed)
}
