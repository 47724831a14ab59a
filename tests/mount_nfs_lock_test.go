package tests

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"snfs/client"
	"snfs/mount/fusefs"
	"snfs/mount/vfs"
	"snfs/nlm4"
	"snfs/portmap"
	"snfs/sunrpc"
	"snfs/xdr"
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
	m := newNLMMountCfg(t, e, vfs.NLMConfig{CallerName: name, Poll: poll})
	if register {
		for _, prot := range []uint32{portmap.ProtoTCP, portmap.ProtoUDP} {
			h.pm.Add(portmap.Mapping{Prog: nlm4.Program, Vers: nlm4.Version, Prot: prot, Port: uint32(m.v.NLMCallbackPort())})
		}
	}
	return m
}

// newNLMMountCfg is an nfs mode mount with the NLM settings cfg (its Addr
// and CallbackAddr filled in).
func newNLMMountCfg(t *testing.T, e *env, cfg vfs.NLMConfig) *mount {
	t.Helper()
	cfg.Addr, cfg.CallbackAddr = e.addr, "127.0.0.1:0"
	m := newMountConfig(t, e, vfs.Config{NLM: &cfg})
	t.Cleanup(func() { m.v.Close() }) // before the unmount: the files are closed by then
	return m
}

func (m *mount) path(name string) string { return filepath.Join(m.dir, name) }

// TestMountNFSLockRanges: fcntl locks of nfs mode mount A exclude mount B's by
// range; F_GETLK through B reports A's lock; a local process on the server
// and an snfs mode mount meet them; flock excludes across mounts and ends at
// the last close.
func TestMountNFSLockRanges(t *testing.T) {
	t.Parallel()
	h := newNLMMountHost(t)
	e := newNLMMountEnv(t, h)
	a := newNLMMount(t, e, h, false, time.Hour)
	b := newNLMMount(t, e, h, false, time.Hour)
	fa := openRW(t, a.path("db"))
	fb := openRW(t, b.path("db"))

	checkTwoMountLocks(t, e, fa, fb)

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
	t.Parallel()
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
	// The mount cancels the request before it answers the kernel, which
	// holds the dying process until then; waiting for the state (not a
	// time) keeps the test independent of the machine's load. A request
	// left at the server stays until A unlocks (its GRANTED denied).
	waitWaiters(t, e, 0)
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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

// setRPCBind is a port mapper that takes SET and UNSET, as a host's rpcbind
// does from local callers.
type setRPCBind struct {
	mu   sync.Mutex
	maps map[[3]uint32]uint32 // (prog, vers, prot) to port; guarded by mu
	port int
}

func newSetRPCBind(t *testing.T) *setRPCBind {
	r := &setRPCBind{maps: map[[3]uint32]uint32{}}
	mapping := func(a *xdr.Reader) (portmap.Mapping, error) {
		var m portmap.Mapping
		if m.Decode(a) != nil {
			return m, sunrpc.ErrGarbageArgs
		}
		return m, nil
	}
	procs := map[uint32]sunrpc.Proc{
		portmap.ProcNull: {Name: "NULL", Handler: func(context.Context, *sunrpc.Call, *xdr.Reader, *xdr.Writer) error { return nil }},
		portmap.ProcSet: {Name: "SET", Handler: func(ctx context.Context, c *sunrpc.Call, a *xdr.Reader, w *xdr.Writer) error {
			m, err := mapping(a)
			if err != nil {
				return err
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			k := [3]uint32{m.Prog, m.Vers, m.Prot}
			_, taken := r.maps[k]
			if !taken {
				r.maps[k] = m.Port
			}
			w.Bool(!taken)
			return nil
		}},
		portmap.ProcUnset: {Name: "UNSET", Handler: func(ctx context.Context, c *sunrpc.Call, a *xdr.Reader, w *xdr.Writer) error {
			m, err := mapping(a)
			if err != nil {
				return err
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			for k := range r.maps {
				if k[0] == m.Prog && k[1] == m.Vers {
					delete(r.maps, k)
				}
			}
			w.Bool(true)
			return nil
		}},
		portmap.ProcGetPort: {Name: "GETPORT", Handler: func(ctx context.Context, c *sunrpc.Call, a *xdr.Reader, w *xdr.Writer) error {
			m, err := mapping(a)
			if err != nil {
				return err
			}
			w.Uint32(r.get(m.Prog, m.Vers, m.Prot))
			return nil
		}},
	}
	ps := make([]sunrpc.Proc, portmap.ProcDump+1)
	for n, p := range procs {
		ps[n] = p
	}
	s := &sunrpc.Server{Logger: quietLogger()}
	s.Register(&sunrpc.Program{Name: "portmap", Number: portmap.Program, Versions: map[uint32][]sunrpc.Proc{portmap.Version: ps}})
	r.port = serveBoth(t, s)
	return r
}

func (r *setRPCBind) get(prog, vers, prot uint32) uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.maps[[3]uint32{prog, vers, prot}]
}

func (r *setRPCBind) nlmPort() int { return int(r.get(nlm4.Program, nlm4.Version, portmap.ProtoTCP)) }

// TestMountNFSLockRegister: an nfs mode mount lists its callback service in
// this host's rpcbind (SET), where the server finds it for GRANTED; a second
// mount leaves a live listing alone; a listing whose port does not answer (a
// mount that died) is replaced; a mount's Close removes its own listing only.
func TestMountNFSLockRegister(t *testing.T) {
	t.Parallel()
	r := newSetRPCBind(t)
	e := newNLMEnv(t, &nlmHostSide{t: t, pmapPort: r.port}, 0)
	rpcbind := fmt.Sprintf("127.0.0.1:%d", r.port)
	a := newNLMMountCfg(t, e, vfs.NLMConfig{CallerName: "reg-a", Poll: time.Hour})
	b := newNLMMountCfg(t, e, vfs.NLMConfig{CallerName: "reg-b", Poll: time.Hour, RPCBind: rpcbind})
	if got, want := r.nlmPort(), b.v.NLMCallbackPort(); got != want || r.get(nlm4.Program, nlm4.Version, portmap.ProtoUDP) != uint32(want) {
		t.Fatalf("rpcbind lists NLM at %d, want B's callback service at %d (TCP and UDP)", got, want)
	}
	c := newNLMMountCfg(t, e, vfs.NLMConfig{CallerName: "reg-c", Poll: time.Hour, RPCBind: rpcbind})
	if got := r.nlmPort(); got != b.v.NLMCallbackPort() {
		t.Fatalf("C replaced B's live listing: rpcbind lists NLM at %d, B's is %d, C's %d", got, b.v.NLMCallbackPort(), c.v.NLMCallbackPort())
	}
	// B's blocked lock is granted by the server's GRANTED, found through
	// the listing (B polls once an hour).
	fa := openRW(t, a.path("db"))
	openRW(t, b.path("db")).Close()
	if err := setlk(fa, unix.F_WRLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	ch := startLockChild(t, b.path("db"))
	ch.expect(t, "waiting")
	waitWaiters(t, e, 1)
	if err := setlk(fa, unix.F_UNLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	ch.expect(t, "locked")
	ch.kill()

	// C's Close leaves B's listing; B's removes it.
	c.v.Close()
	if got := r.nlmPort(); got != b.v.NLMCallbackPort() {
		t.Fatalf("C's Close changed B's listing to %d", got)
	}
	b.v.Close()
	if got := r.nlmPort(); got != 0 {
		t.Fatalf("B's Close left the listing at %d", got)
	}
	// A stale listing (nothing answers at its port) is replaced.
	dead := freePort(t)
	r.mu.Lock()
	r.maps[[3]uint32{nlm4.Program, nlm4.Version, portmap.ProtoTCP}] = uint32(dead)
	r.mu.Unlock()
	d := newNLMMountCfg(t, e, vfs.NLMConfig{CallerName: "reg-d", Poll: time.Hour, RPCBind: rpcbind})
	if got := r.nlmPort(); got != d.v.NLMCallbackPort() {
		t.Fatalf("rpcbind lists NLM at %d after D's start, want D's %d (the listing at %d was stale)", got, d.v.NLMCallbackPort(), dead)
	}
}

// TestMountNFSLockPeers: the server's GRANTED for a mount's blocked lock goes
// to the mount this host's rpcbind lists, another one: it passes the call on
// (NLMConfig.PeerDir), so the waiting mount, which polls only once an hour,
// gets its lock at once.
func TestMountNFSLockPeers(t *testing.T) {
	t.Parallel()
	h := newNLMMountHost(t)
	e := newNLMMountEnv(t, h)
	peers := diskTempDir(t, "snfs-nlm-peers-")
	a := newNLMMountCfg(t, e, vfs.NLMConfig{CallerName: "peer-a", Poll: time.Hour, PeerDir: peers})
	b := newNLMMountCfg(t, e, vfs.NLMConfig{CallerName: "peer-b", Poll: time.Hour, PeerDir: peers})
	c := newNLMMountCfg(t, e, vfs.NLMConfig{CallerName: "peer-c", Poll: time.Hour, PeerDir: peers})
	for _, prot := range []uint32{portmap.ProtoTCP, portmap.ProtoUDP} { // C is the host's lock manager
		h.pm.Add(portmap.Mapping{Prog: nlm4.Program, Vers: nlm4.Version, Prot: prot, Port: uint32(c.v.NLMCallbackPort())})
	}
	fa := openRW(t, a.path("db"))
	openRW(t, b.path("db")).Close()
	if err := setlk(fa, unix.F_WRLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	ch := startLockChild(t, b.path("db"))
	ch.expect(t, "waiting")
	waitWaiters(t, e, 1)
	if err := setlk(fa, unix.F_UNLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	ch.expect(t, "locked")
	wantEAGAIN(t, "A while B's child holds the lock", setlk(fa, unix.F_WRLCK, 0, 1))
}

// TestMountNFSLockMountKilled: `snfs mount --mode=nfs` killed (SIGKILL) while
// a process holds a lock through it leaves the lock on the server; the mount
// started again on the same mount point (the same caller_name) frees it
// (FREE_ALL). Through the binary: it finds snfs serve's NLM on the NFS port.
func TestMountNFSLockMountKilled(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	e := newEnv(t, "rw,no_root_squash")
	bin := snfsBinary(t)
	spec, ports := "127.0.0.1:"+e.cfg.Exports[0].Path, portArgs(e.port(), e.port())
	// The server's NLM at its NFS port, not whatever lock manager a system
	// rpcbind on this host lists.
	ports = append(ports, "--mode=nfs", fmt.Sprintf("--nlm-port=%d", e.port()))
	m := startProcMount(t, bin, spec, ports...)
	f, err := os.OpenFile(m.path("db"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := setlk(f, unix.F_WRLCK, 0, 0); err != nil {
		t.Fatalf("lock through the mount: %v\n%s", err, m.log.String())
	}
	if _, err := localLock(t, e.path("db"), unix.F_WRLCK, 0, 1); err == nil {
		t.Fatal("a local lock over the mount's")
	}
	m.cmd.Process.Signal(syscall.SIGKILL)
	<-m.done
	m.cmd = nil // dead: nothing to unmount cleanly
	f.Close()   // the FLUSH finds no mount: nothing is released
	if err := fusefs.Unmount(m.dir, nil, 5*time.Second); err != nil {
		t.Logf("unmount of the dead mount: %v", err)
	}
	if _, err := localLock(t, e.path("db"), unix.F_WRLCK, 0, 1); err == nil {
		t.Fatal("the killed mount's lock went by itself")
	}
	startProcMountAt(t, bin, spec, m.dir, ports...)
	if _, err := localLock(t, e.path("db"), unix.F_WRLCK, 0, 1); err != nil {
		t.Fatalf("a local lock after the mount started again: %v", err)
	}
}
