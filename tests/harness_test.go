package tests

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"snfs/client"
	"snfs/nfs3"
	"snfs/server"
	"snfs/sunrpc"
	"snfs/xdr"
)

func TestMain(m *testing.M) {
	if spawnerChild() || localSetxattrChild() {
		return
	}
	// Before anything is open: every program the tests run is started by
	// the spawner, not forked from this process (spawner_test.go).
	if err := startSpawner(); err != nil {
		fmt.Fprintln(os.Stderr, "snfs/tests: "+err.Error())
		os.Exit(2)
	}
	// Objects are created with exactly the mode asked for, as `snfs serve` does.
	syscall.Umask(0)
	finish := startLeftoverGuard()
	code := m.Run()
	for _, s := range finish() {
		fmt.Fprintln(os.Stderr, "snfs/tests: "+s)
	}
	if libnfsOp.dir != "" {
		os.RemoveAll(libnfsOp.dir)
	}
	if guestWrap.dir != "" {
		os.RemoveAll(guestWrap.dir)
	}
	if faultsBin.path != "" {
		os.RemoveAll(filepath.Dir(faultsBin.path))
	}
	os.Exit(code)
}

func quietLogger() *slog.Logger {
	if os.Getenv("SNFS_TEST_DEBUG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// failLogger logs at debug level into memory, and prints the log (its last
// 4 MiB) to the test's output when the test failed: for a failure seen once
// in a loaded run, the log of that run is the only record.
func failLogger(t *testing.T, name string) *slog.Logger {
	if os.Getenv("SNFS_TEST_DEBUG") != "" {
		return quietLogger()
	}
	b := &tailBuffer{max: 4 << 20}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s's log:\n%s", name, b.bytes())
		}
	})
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// tailBuffer keeps the last max bytes written to it; safe for concurrent use.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte // guarded by mu
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]byte(nil), b.buf...)
}

// env is one running server over one export directory.
type env struct {
	t        *testing.T
	dir      string // the export, on a disk file system
	stateDir string
	cfg      server.Config
	srv      *server.Server
	addr     string // TCP and UDP, NFS and MOUNT
	done     chan error
	// ln and pc are the port's sockets, bound by start and kept by the
	// harness across a restart: each server serves on copies of them
	// (serveOn), closed by its shutdown. stop closes them.
	ln   net.Listener
	pc   net.PacketConn
	nfs  *client.NFS
	root nfs3.FH
}

// diskTempDir makes a directory on a disk file system (/var/tmp), not tmpfs,
// its name tagged with this run (runTag: what a later run's sweep of dead
// runs' leftovers goes by).
func diskTempDir(t testing.TB, pattern string) string {
	t.Helper()
	d, err := os.MkdirTemp("/var/tmp", pattern+runTag())
	if err != nil {
		t.Fatal(err)
	}
	noteRunDir(d)
	t.Cleanup(func() {
		// SNFS_TEST_KEEP=1 keeps a failed test's directories (logs,
		// export, caches) for a post-mortem; SNFS_TEST_KEEP=always
		// keeps them whatever the outcome (to compare with a failure).
		if k := os.Getenv("SNFS_TEST_KEEP"); k == "always" || k != "" && t.Failed() {
			t.Logf("kept %s", d)
			return
		}
		os.RemoveAll(d)
	})
	return d
}

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the server switches to each caller's identity (CI runs as root)")
	}
}

// newEnv serves a fresh directory with the given export options to every client.
func newEnv(t *testing.T, opts string) *env {
	t.Helper()
	return newEnvWith(t, opts, nil)
}

// newEnvWith is newEnv with the server's configuration changed by tweak (if
// not nil) before the server starts: a sync hook, the NLM clients' rpcbind,
// lock delegation, timeouts.
func newEnvWith(t *testing.T, opts string, tweak func(*server.Config)) *env {
	t.Helper()
	dir := diskTempDir(t, "snfs-export-")
	os.Chmod(dir, 0o777)
	o, err := server.ParseOptions(server.DefaultOptions, opts)
	if err != nil {
		t.Fatal(err)
	}
	return newEnvConfigWith(t, dir, []server.ExportConfig{{Path: dir, Clients: []server.ClientRule{{Spec: "*", Opts: o}}}}, tweak)
}

func newEnvConfig(t *testing.T, dir string, exports []server.ExportConfig) *env {
	t.Helper()
	return newEnvConfigWith(t, dir, exports, nil)
}

// newEnvConfigWith is newEnvConfig with tweak, as in newEnvWith.
func newEnvConfigWith(t *testing.T, dir string, exports []server.ExportConfig, tweak func(*server.Config)) *env {
	t.Helper()
	e := &env{t: t, dir: dir, stateDir: diskTempDir(t, "snfs-state-")}
	e.cfg = server.Config{StateDir: e.stateDir, Exports: exports,
		Logger: quietLogger()}
	if tweak != nil {
		tweak(&e.cfg)
	}
	e.start("127.0.0.1:0")
	t.Cleanup(e.stop)
	return e
}

func (e *env) start(addr string) {
	t := e.t
	if addr == "127.0.0.1:0" { // a port no other test takes while e is down (ports_test.go)
		addr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	}
	var ln net.Listener
	var pc net.PacketConn
	var err error
	for i := 0; ; i++ { // the port of a stopped server may linger briefly
		ln, err = net.Listen("tcp", addr)
		if err == nil {
			if pc, err = net.ListenPacket("udp", addr); err != nil {
				ln.Close()
			}
		}
		if err == nil || i > 150 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		// Named, so that whatever took the port is found.
		t.Fatalf("%v (the port: %s)", err, portHolders(addrPort(addr)))
	}
	e.ln, e.pc = ln, pc
	e.serveOn()
}

// serveOn starts a server with e.cfg on copies of the port's sockets e.ln and
// e.pc (the server closes its copies at shutdown; e keeps the sockets).
//
// A restart serves on the sockets the stopped server had, as a server started
// by socket activation would, instead of binding the port again: another
// process can hold the old server's sockets, so that its shutdown does not
// unbind them, and a new bind then fails with EADDRINUSE for as long as that
// process lives. Every child this test binary starts holds them a while: Go's
// os/exec forks, and the child has a copy of every descriptor of the test
// binary until its execve closes the close-on-exec ones, in the order of
// their numbers. A descriptor of a file on a FUSE mount that this process
// serves is among them, and its close sends a FLUSH to the mount, which the
// exec waits for. A mount whose server is down (stopped for this restart, or
// partitioned by a proxy) answers a FLUSH of a file with data to write back
// only when the server is back; the child then holds the old server's
// sockets until the server is back, and a restart that binds the port again
// waits for itself: a deadlock, met twice in CI by TestMountVerifierChange
// (its restart's bind failed with EADDRINUSE; the children, in execve since
// their fork, blocked every read of their /proc entries; the mount had
// FLUSHes in flight for its file, which the test had not closed; see
// TestRestartPortHeldByChild).
func (e *env) serveOn() {
	t := e.t
	srv, err := server.New(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, pc, err := copySockets(e.ln, e.pc)
	if err != nil {
		srv.Shutdown(context.Background()) // never served: its store and goroutines
		t.Fatal(err)
	}
	e.srv, e.addr, e.done = srv, e.ln.Addr().String(), make(chan error, 1)
	go func() { e.done <- srv.Serve(ln, pc) }()
	ctx := context.Background()
	m, err := client.DialMount(ctx, "tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	res, err := m.Mnt(ctx, e.cfg.Exports[0].Path)
	if err != nil || res.Status != 0 {
		t.Fatalf("MNT: %v %v", err, res.Status)
	}
	e.root = res.FH
	if e.nfs != nil {
		e.nfs.Close()
	}
	e.nfs, err = client.DialNFS(ctx, "tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
}

// copySockets returns a listener and a packet connection on new descriptors
// (dup) of ln's and pc's sockets: closing the copies leaves ln and pc open.
func copySockets(ln net.Listener, pc net.PacketConn) (net.Listener, net.PacketConn, error) {
	lf, err := ln.(*net.TCPListener).File()
	if err != nil {
		return nil, nil, fmt.Errorf("copying the listener: %w", err)
	}
	defer lf.Close()
	pf, err := pc.(*net.UDPConn).File()
	if err != nil {
		return nil, nil, fmt.Errorf("copying the UDP socket: %w", err)
	}
	defer pf.Close()
	l, err := net.FileListener(lf)
	if err != nil {
		return nil, nil, fmt.Errorf("copying the listener: %w", err)
	}
	p, err := net.FilePacketConn(pf)
	if err != nil {
		l.Close()
		return nil, nil, fmt.Errorf("copying the UDP socket: %w", err)
	}
	return l, p, nil
}

// stop shuts the server down and closes the port's sockets: clients find
// nothing there (connections refused) until a start.
func (e *env) stop() {
	e.shutdown()
	if e.ln != nil { // also when a server failed to start on them
		e.ln.Close()
		e.pc.Close()
		e.ln, e.pc = nil, nil
	}
}

// shutdown shuts the server down (it closes its copies of the port's
// sockets); it reports whether there was one.
func (e *env) shutdown() bool {
	if e.srv == nil {
		return false
	}
	e.nfs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.srv.Shutdown(ctx); err != nil {
		e.t.Errorf("shutdown: %v", err)
	}
	<-e.done
	e.srv = nil
	return true
}

// restart stops the server and starts a new one on the same address and state.
// It keeps the port's sockets (serveOn says why).
func (e *env) restart() {
	if e.srv == nil { // stopped: its sockets are closed
		e.nfs = nil
		e.start(e.addr)
		return
	}
	// Down, the port refuses connections as a stopped server's does (and
	// as the clients of the tests expect: they come back once refused, not
	// queued until the new server accepts): the listener stops listening,
	// still bound, and listens again for the new server.
	if err := listenAgain(e.ln, false); err != nil {
		e.t.Fatal(err)
	}
	e.shutdown()
	e.nfs = nil
	if err := listenAgain(e.ln, true); err != nil {
		e.t.Fatal(err)
	}
	e.serveOn()
}

// listenAgain makes ln's socket listen (on) or stop listening (not on): a
// shutdown(2) of its reading side ends a TCP socket's listening (resetting
// the connections not yet accepted) and leaves it bound to its port, and a
// listen(2) makes it listen again. Both act on the socket, whoever else
// holds a descriptor of it.
func listenAgain(ln net.Listener, on bool) error {
	rc, err := ln.(*net.TCPListener).SyscallConn()
	if err != nil {
		return fmt.Errorf("the listener's socket: %w", err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		if on {
			serr = syscall.Listen(int(fd), 4096) // the kernel bounds it by somaxconn
		} else {
			serr = syscall.Shutdown(int(fd), syscall.SHUT_RD)
		}
	}); err != nil {
		return fmt.Errorf("the listener's socket: %w", err)
	}
	if serr != nil {
		return fmt.Errorf("listen %v on the kept socket of %s: %w", on, ln.Addr(), serr)
	}
	return nil
}

func (e *env) port() int { return addrPort(e.addr) }

func addrPort(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}

func (e *env) path(name string) string { return filepath.Join(e.dir, name) }

// as returns a client with the given AUTH_SYS identity on the same connection.
func (e *env) as(uid, gid uint32, groups ...uint32) *client.NFS { return e.nfs.As(uid, gid, groups...) }

var ctx = context.Background()

// ok fails the test unless st is NFS3_OK.
func ok(t testing.TB, what string, st nfs3.Status, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if st != nfs3.OK {
		t.Fatalf("%s: %v", what, st)
	}
}

// want fails the test unless st is the expected status.
func want(t testing.TB, what string, st nfs3.Status, err error, exp nfs3.Status) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if st != exp {
		t.Fatalf("%s: got %v, want %v", what, st, exp)
	}
}

// create makes a file with GUARDED create and returns its handle.
func (e *env) create(c *client.NFS, dir nfs3.FH, name string, mode uint32) nfs3.FH {
	e.t.Helper()
	res, err := c.Create(ctx, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: dir, Name: name}, Mode: nfs3.Guarded, Attr: nfs3.Sattr{Mode: &mode}})
	ok(e.t, "CREATE "+name, res.Status, err)
	return res.Object
}

func (e *env) lookup(dir nfs3.FH, name string) nfs3.FH {
	e.t.Helper()
	res, err := e.nfs.Lookup(ctx, dir, name)
	ok(e.t, "LOOKUP "+name, res.Status, err)
	return res.Object
}

// lookupBy looks name up in dir through c (a permit holder's own
// connection, Session.NFS, reads without recalling its permit).
func lookupBy(t *testing.T, c *client.NFS, dir nfs3.FH, name string) nfs3.FH {
	t.Helper()
	res, err := c.Lookup(ctx, dir, name)
	ok(t, "LOOKUP "+name, res.Status, err)
	return res.Object
}

func u32p(v uint32) *uint32 { return &v }
func u64p(v uint64) *uint64 { return &v }

var noneAuth = sunrpc.OpaqueAuth{Flavor: sunrpc.AuthNone}

type (
	xdrWriter = xdr.Writer
	xdrReader = xdr.Reader
)
