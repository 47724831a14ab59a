package cachemgr

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"snfs/mount/vfs"
	"snfs/server"
	"snfs/state"
	"snfs/store"
)

// The package's test servers: one harness for the tests that need a real
// server (and restart it), instead of a copy per test file.

// restartableServer serves export with `snfs serve`'s server on 127.0.0.1,
// unless asDefault with no grace period and no recall back-off (every
// reclaim after a restart is refused); restart shuts it down and serves
// again on the same address and state directory. It is stopped when the
// test ends.
type restartableServer struct {
	t             *testing.T
	addr          string
	export, state string
	asDefault     bool          // the server's defaults for grace and recall back-off
	opts          string        // export options ("" rw,no_root_squash)
	grace         time.Duration // the server's grace period; 0: none (every reclaim refused)
	cbt           time.Duration // the server's callback timeout; 0: its default
	srv           *server.Server
	done          chan error
	// sync, if set, is the server's data flush (server.Config.Sync): a
	// test fails some on purpose (newServerSync).
	sync func(n *store.Node, dataOnly bool) error
}

// testServer serves a fresh export directory (on disk, not tmpfs) with
// `snfs serve`'s server and its defaults on 127.0.0.1; it returns the
// address and the export.
func testServer(t *testing.T) (addr, export string) {
	t.Helper()
	s := newServer(t, true)
	return s.addr, s.export
}

func newRestartableServer(t *testing.T) *restartableServer {
	t.Helper()
	return newServer(t, false)
}

func newServer(t *testing.T, asDefault bool) *restartableServer {
	t.Helper()
	return newServerSync(t, asDefault, nil)
}

// newServerSync is newServer whose data flushes are sync (nil: the
// server's own).
func newServerSync(t *testing.T, asDefault bool, sync func(n *store.Node, dataOnly bool) error) *restartableServer {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the server switches to each caller's identity")
	}
	tmp := func(pattern string) string {
		d, err := os.MkdirTemp("/var/tmp", pattern)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		return d
	}
	s := &restartableServer{t: t, export: tmp("vfs-export-"), state: tmp("vfs-state-"), asDefault: asDefault, sync: sync}
	os.Chmod(s.export, 0o777)
	s.start("127.0.0.1:0")
	t.Cleanup(s.stop)
	return s
}

func (s *restartableServer) start(addr string) {
	t := s.t
	eo := "rw,no_root_squash"
	if s.opts != "" {
		eo = s.opts
	}
	o, err := server.ParseOptions(server.DefaultOptions, eo)
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	// No recall back-off: an OPEN after a recall may be granted caching at
	// once (the tests look at the opens counted, not the back-off).
	cfg := server.Config{StateDir: s.state, Logger: quiet,
		Exports: []server.ExportConfig{{Path: s.export, Clients: []server.ClientRule{{Spec: "*", Opts: o}}}}, Sync: s.sync}
	if !s.asDefault {
		cfg.Grace = s.grace
		if cfg.Grace == 0 {
			cfg.Grace = -1
		}
		cfg.Table = state.Config{RecallBackoff: time.Nanosecond}
	}
	cfg.Table.CallbackTimeout = s.cbt
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s.addr, s.srv, s.done = ln.Addr().String(), srv, make(chan error, 1)
	go func() { s.done <- srv.Serve(ln, pc) }()
}

func (s *restartableServer) stop() {
	if s.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		s.t.Errorf("shutdown: %v", err)
	}
	<-s.done
	s.srv = nil
}

// mount opens an snfs-mode FS named name on s (delayed write-back off the
// test's clock), synced and closed at the test's end.
func (s *restartableServer) mount(name string) *vfs.FS {
	t, ctx := s.t, context.Background()
	v, err := OpenSNFS(ctx, SNFSMountConfig{Addr: s.addr, Export: s.export, Name: name,
		CacheDir: t.TempDir(), WriteBackDelay: time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := v.Sync(ctx); err != nil {
			t.Error(err)
		}
		if err := v.Close(); err != nil {
			t.Error(err)
		}
	})
	return v
}

func (s *restartableServer) restart() {
	s.stop()
	s.start(s.addr)
}

// quietMount opens an snfs-mode FS named name on the server at addr
// (export), with an hour's write-back delay and closeDelay (0: none), synced
// and closed at the test's end whatever they return (a test may leave the
// mount's work failed on purpose).
func quietMount(t *testing.T, addr, export, name string, closeDelay time.Duration) *vfs.FS {
	ctx := context.Background()
	v, err := OpenSNFS(ctx, SNFSMountConfig{Addr: addr, Export: export, Name: name,
		CacheDir: t.TempDir(), WriteBackDelay: time.Hour, CloseDelay: closeDelay,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Sync(ctx); v.Close() })
	return v
}

// pathVerified returns once the server has verified v's callback path (its
// probe of the path, sent after REGISTER, answered): until then every OPEN
// of v's is answered without caching (docs/protocol.md section 7), and a
// test that asserts an OPEN's caching must not send it before. A scratch
// file, name, is opened until an OPEN grants caching, and released.
func pathVerified(t *testing.T, v *vfs.FS, name string) {
	t.Helper()
	ctx := context.Background()
	e, f, err := v.Create(ctx, v.Root(), vfs.Cred{}, name, 0o644, false, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); f.DirectIO; {
		if err := v.Release(ctx, f); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("no OPEN granted caching in 10 s: the callback path was never verified")
		}
		time.Sleep(10 * time.Millisecond)
		if f, _, err = v.Open(ctx, e.Inode, vfs.Cred{}, syscall.O_RDWR); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.Release(ctx, f); err != nil {
		t.Fatal(err)
	}
}
