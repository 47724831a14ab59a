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
	if localSetxattrChild() {
		return
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

// env is one running server over one export directory.
type env struct {
	t        *testing.T
	dir      string // the export, on a disk file system
	stateDir string
	cfg      server.Config
	srv      *server.Server
	addr     string // TCP and UDP, NFS and MOUNT
	done     chan error
	ln       net.Listener   // the server's sockets, closed by stop in any case
	pc       net.PacketConn // (a restart on the same port needs them gone)
	nfs      *client.NFS
	root     nfs3.FH
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
		// export, caches) for a post-mortem.
		if os.Getenv("SNFS_TEST_KEEP") != "" && t.Failed() {
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
	srv, err := server.New(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if addr == "127.0.0.1:0" { // a port no other test takes while e is down (ports_test.go)
		addr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	}
	var ln net.Listener
	var pc net.PacketConn
	for i := 0; ; i++ { // the port of a restarted server may linger briefly
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
		// Named, so that whatever took the port is found (restarts in
		// CI could not listen for 5 s, twice: the second time an
		// unconnected UDP socket held the port, by a holder not named as
		// the scan of /proc did not end within its bound).
		holders := portHolders(addrPort(addr))
		srv.Shutdown(context.Background()) // never served: its store and goroutines
		t.Fatalf("%v (the port: %s)", err, holders)
	}
	e.srv, e.addr, e.done, e.ln, e.pc = srv, ln.Addr().String(), make(chan error, 1), ln, pc
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

func (e *env) stop() {
	if e.srv == nil {
		return
	}
	e.nfs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.srv.Shutdown(ctx); err != nil {
		e.t.Errorf("shutdown: %v", err)
	}
	<-e.done
	// The server closes them at shutdown; closed here too, so that a
	// restart's listen on the same port never waits for one left open
	// (twice in CI a restart found the port's UDP socket still bound, its
	// holder unnamed).
	e.ln.Close()
	e.pc.Close()
	e.srv = nil
}

// restart stops the server and starts a new one on the same address and state.
func (e *env) restart() {
	addr := e.addr
	e.stop()
	e.nfs = nil
	e.start(addr)
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

func u32p(v uint32) *uint32 { return &v }
func u64p(v uint64) *uint64 { return &v }

var noneAuth = sunrpc.OpaqueAuth{Flavor: sunrpc.AuthNone}

type (
	xdrWriter = xdr.Writer
	xdrReader = xdr.Reader
)
