package fusefs_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"snfs/client"
	"snfs/internal/faultproxy"
	"snfs/mount/cachemgr"
	"snfs/mount/fusefs"
	"snfs/mount/vfs"
	"snfs/server"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// testMount is a real FUSE mount (nfs mode) of an in-process server's export,
// reached through a fault-injecting proxy: the test can make the server stop
// answering (Partition) and answer again (Heal).
type testMount struct {
	export string // the exported directory (the server's side)
	dir    string // the mount point
	proxy  *faultproxy.Proxy
	srv    *fuse.Server
}

func diskTempDir(t *testing.T, pattern string) string {
	t.Helper()
	d, err := os.MkdirTemp("/var/tmp", pattern)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newTestMount serves a fresh directory and mounts it in mode ("nfs" with cfg,
// its NFS, Root and Logger filled in; "snfs": the protocol's session, cfg
// unused); everything is unmounted and stopped when the test ends, failed or
// not.
func newTestMount(t *testing.T, mode string, cfg vfs.Config) *testMount {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the server switches to each caller's identity, the mount uses mount(2) (CI runs as root)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("needs /dev/fuse (CI has it): ", err)
	}
	export := diskTempDir(t, "snfs-export-")
	o, err := server.ParseOptions(server.DefaultOptions, "rw,no_root_squash")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{StateDir: diskTempDir(t, "snfs-state-"), Logger: quietLogger(),
		Exports: []server.ExportConfig{{Path: export, Clients: []server.ClientRule{{Spec: "*", Opts: o}}}}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", ln.Addr().String())
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln, pc) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("server shutdown: %v", err)
		}
		<-served
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mc, err := client.DialMount(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	res, err := mc.Mnt(ctx, export)
	mc.Close()
	if err != nil || res.Status != 0 {
		t.Fatalf("MNT: %v %v", err, res.Status)
	}
	p, err := faultproxy.New(context.Background(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	dir := diskTempDir(t, "snfs-mnt-")
	// Below mount.Open (which serves through this package): the test is of
	// fusefs.Mount itself, over an FS made here.
	var v *vfs.FS
	var nfs *client.NFS
	if mode == "snfs" || mode == "snfs-permits" {
		v, err = cachemgr.OpenSNFS(ctx, cachemgr.SNFSMountConfig{Addr: p.Addr(), Export: export, Name: "A:" + dir,
			CacheDir: diskTempDir(t, "snfs-cache-"), WriteBackDelay: time.Hour, Logger: quietLogger(),
			Permits: mode == "snfs-permits"})
	} else if nfs, err = client.DialNFS(ctx, "tcp", p.Addr()); err == nil {
		cfg.NFS, cfg.Root, cfg.Logger = nfs, res.FH, quietLogger()
		if v, err = vfs.New(ctx, cfg); err != nil {
			nfs.Close()
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	closeFS := func() {
		if mode != "nfs" {
			if err := v.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		} else {
			nfs.Close()
		}
	}
	life, stop := context.WithCancel(context.Background())
	fsrv, err := fusefs.Mount(life, dir, v, fusefs.Options{FsName: p.Addr() + ":" + export})
	if err != nil {
		stop()
		closeFS()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Heal() // a test failing during a partition: the unmount needs the server
		if err := fusefs.Unmount(dir, fsrv, 10*time.Second); err != nil {
			t.Errorf("unmount: %v", err)
		}
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := v.Sync(sctx); err != nil {
			t.Errorf("sync after unmount: %v", err)
		}
		scancel()
		stop()
		closeFS()
	})
	return &testMount{export: export, dir: dir, proxy: p, srv: fsrv}
}

// signalledCall runs call on a thread of its own and sends that thread
// SIGUSR1 (handled: the call is interrupted, the process goes on) every 50 ms
// until call returns, for at most wait. It returns call's result, or ok false
// if call was still blocked at the end (it then finishes in the background and
// its result arrives on late).
func signalledCall(t *testing.T, wait time.Duration, call func() (int, error)) (n int, err error, ok bool, late <-chan error) {
	t.Helper()
	sigs := make(chan os.Signal, 64)
	signal.Notify(sigs, syscall.SIGUSR1)
	defer signal.Stop(sigs)
	type result struct {
		n   int
		err error
	}
	tids := make(chan int, 1)
	results := make(chan result, 1)
	go func() { // ends when call returns
		runtime.LockOSThread() // the signals are for this thread; never unlocked: the thread ends with it
		tids <- unix.Gettid()
		n, err := call()
		results <- result{n, err}
	}()
	tid := <-tids
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		select {
		case r := <-results:
			return r.n, r.err, true, nil
		case <-tick.C:
			if err := unix.Tgkill(os.Getpid(), tid, syscall.SIGUSR1); err != nil && err != unix.ESRCH {
				t.Fatalf("tgkill: %v", err)
			}
		case <-deadline.C:
			errs := make(chan error, 1)
			go func() { r := <-results; errs <- r.err }() // ends when call returns
			return 0, nil, false, errs
		}
	}
}

// TestInterruptedReadDeadServer: a read(2) blocked on a server that does not
// answer returns EINTR when the process gets a signal (the FUSE interrupt
// reaches the request), and the mount keeps working once the server answers
// again; both modes (snfs: the file is cached, not yet read: the read fills
// the cache from the server). The file is opened O_DIRECT so that the read is the reader's own
// FUSE request (a read through the page cache waits on the kernel's
// read-ahead, which no signal but SIGKILL interrupts, whatever the mount does).
func TestInterruptedReadDeadServer(t *testing.T) {
	for _, mode := range []string{"nfs", "snfs"} {
		t.Run(mode, func(t *testing.T) {
			m := newTestMount(t, mode, vfs.Config{})
			want := bytes.Repeat([]byte("snfs"), 2048)
			if err := os.WriteFile(filepath.Join(m.export, "f"), want, 0o644); err != nil {
				t.Fatal(err)
			}
			fd, err := unix.Open(filepath.Join(m.dir, "f"), unix.O_RDONLY|unix.O_DIRECT, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			buf := make([]byte, 4096)

			m.proxy.Partition(0)
			_, err, ok, late := signalledCall(t, 10*time.Second, func() (int, error) { return unix.Pread(fd, buf, 0) })
			if !ok {
				m.proxy.Heal()
				t.Fatalf("read blocked on a server not answering: not interrupted by signals for 10 s (after the server answered: %v)", <-late)
			}
			if err != unix.EINTR {
				m.proxy.Heal()
				t.Fatalf("interrupted read: %v; want EINTR", err)
			}

			m.proxy.Heal()
			n, err := unix.Pread(fd, buf, 0)
			if err != nil || !bytes.Equal(buf[:n], want[:4096]) {
				t.Fatalf("read after the server answers again: %d bytes, %v", n, err)
			}
		})
	}
}

// TestInterruptedWriteDeadServer: a write(2) that waits for the server (its
// file's dirty data is at the limit: it must be sent first) returns EINTR
// when the process gets a signal while the server does not answer, and takes
// none of its data: after the server answers again, and the file is closed,
// the server's file has what was written before and after, not the
// interrupted write's bytes.
func TestInterruptedWriteDeadServer(t *testing.T) {
	const limit = 64 << 10
	m := newTestMount(t, "nfs", vfs.Config{DirtyLimit: limit})
	fd, err := unix.Open(filepath.Join(m.dir, "f"), unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fail := func(format string, args ...any) {
		t.Helper()
		m.proxy.Heal() // the close sends the file's data
		unix.Close(fd)
		t.Fatalf(format, args...)
	}
	first := bytes.Repeat([]byte{'a'}, limit) // the limit reached
	if n, err := unix.Pwrite(fd, first, 0); err != nil || n != len(first) {
		fail("first write: %d, %v", n, err)
	}

	// A write of the limit's size: whether the dirty data is sent before or
	// after taking it, it waits for the server.
	m.proxy.Partition(0)
	lost := bytes.Repeat([]byte{'x'}, limit)
	n, err, ok, late := signalledCall(t, 10*time.Second, func() (int, error) { return unix.Pwrite(fd, lost, 2*limit) })
	if !ok {
		m.proxy.Heal()
		err := <-late
		fail("write waiting for a server not answering: not interrupted by signals for 10 s (after the server answered: %v)", err)
	}
	if err != unix.EINTR {
		fail("interrupted write: %d, %v; want EINTR", n, err)
	}

	m.proxy.Heal()
	second := bytes.Repeat([]byte{'b'}, 100)
	if n, err := unix.Pwrite(fd, second, limit); err != nil || n != len(second) {
		fail("write after the server answers again: %d, %v", n, err)
	}
	if err := unix.Close(fd); err != nil {
		t.Fatalf("close: %v", err)
	}
	got, err := os.ReadFile(filepath.Join(m.export, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if want := append(append([]byte(nil), first...), second...); !bytes.Equal(got, want) {
		t.Fatalf("the server's file: %d bytes (ending %q); want %d bytes of the writes before and after, none of the interrupted one's", len(got), got[len(got)-min(len(got), 8):], len(want))
	}
}

// TestInterruptedSetattrFinishes: a request that changes the server's state
// is not abandoned once begun: an fchmod(2) (a SETATTR; on an open file, so
// no lookup, which a signal may interrupt, comes first) waiting for a server
// that does not answer goes on waiting through the process's signals and
// succeeds once the server answers (abandoned, the application would not know
// whether the server applied it).
func TestInterruptedSetattrFinishes(t *testing.T) {
	m := newTestMount(t, "nfs", vfs.Config{})
	if err := os.WriteFile(filepath.Join(m.export, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(filepath.Join(m.dir, "f"), unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	m.proxy.Partition(0)
	_, err, ok, late := signalledCall(t, time.Second, func() (int, error) { return 0, unix.Fchmod(fd, 0o600) })
	m.proxy.Heal()
	if ok {
		t.Fatalf("fchmod returned during the partition, under signals: %v", err)
	}
	if err := <-late; err != nil {
		t.Fatalf("fchmod after the server answered again: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(m.export, "f")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the server's file: %v, %v; want mode 0600", fi, err)
	}
}

// TestInterruptedFsyncdirFinishes: an fsync(2) of a directory whose changes
// the mount made locally under a write-back permit is not abandoned once
// begun: waiting for a server that does not answer, it goes on through the
// process's signals and succeeds once the server answers, the change then
// on the server. It used to be abandoned at the first interrupt (EINTR),
// and under load (Go's preemption signals) the data pushed after the log
// was left unsent by an fsync that then succeeded when repeated
// (TestMountSNFSPermitsDataCopyCalls: REINTEGRATE twice, SETATTRs missing).
func TestInterruptedFsyncdirFinishes(t *testing.T) {
	m := newTestMount(t, "snfs-permits", vfs.Config{})
	if err := os.Mkdir(filepath.Join(m.export, "d"), 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadDir(filepath.Join(m.dir, "d")); err != nil { // the listing under its promise
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(m.dir, "d", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(m.export, "d", "sub")); !os.IsNotExist(err) {
		t.Fatalf("d/sub on the server before the fsync: %v; the test needs it made under the permit", err)
	}
	fd, err := unix.Open(filepath.Join(m.dir, "d"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	m.proxy.Partition(0)
	_, err, ok, late := signalledCall(t, time.Second, func() (int, error) { return 0, unix.Fsync(fd) })
	m.proxy.Heal()
	if ok {
		t.Fatalf("the directory's fsync returned during the partition, under signals: %v", err)
	}
	if err := <-late; err != nil {
		t.Fatalf("the directory's fsync after the server answered again: %v", err)
	}
	if fi, err := os.Lstat(filepath.Join(m.export, "d", "sub")); err != nil || !fi.IsDir() {
		t.Fatalf("the server's d/sub after the fsync: %v, %v", fi, err)
	}
}
