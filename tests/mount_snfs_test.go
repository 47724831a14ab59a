package tests

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"snfs/metrics"
	snfsmount "snfs/mount"
	"snfs/mount/cachemgr"
	"snfs/mount/fusefs"
	"snfs/mount/vfs"
	"snfs/server"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// snfsMount is one `snfs mount --mode=snfs` of an env's export, served in
// this process, with its own cache directory and session name.
type snfsMount struct {
	dir, cacheDir string
	v             *vfs.FS
	srv           *fuse.Server
	// cancel ends the context the mount serves requests with (nil:
	// context.Background()): the unmount's last resort (finishBounded).
	cancel context.CancelFunc
}

// newSNFSMount mounts e's export in snfs mode with cache directory cacheDir
// ("" for a fresh one) and unmounts it when the test ends (writing back,
// then a forced unmount if a normal one does not work within 10 s).
func newSNFSMount(t *testing.T, e *env, name, cacheDir string, delay time.Duration) *snfsMount {
	t.Helper()
	requireFUSE(t)
	return newSNFSMountAt(t, e, name, diskTempDir(t, "snfs-mnt-"), cacheDir, delay)
}

// newSNFSMountAt is newSNFSMount on mount point dir: the same name and dir
// are the same client for the server.
func newSNFSMountAt(t *testing.T, e *env, name, dir, cacheDir string, delay time.Duration) *snfsMount {
	t.Helper()
	return newSNFSMountWith(t, e, name, dir, snfsmount.Config{CacheDir: cacheDir, WriteBackDelay: delay},
		fusefs.Options{Passthrough: true})
}

// newSNFSMountWith is the one setup of the tests' in-process snfs mounts
// (mount.Open, as `snfs mount --mode=snfs`, then Serve): e's export on
// mount point dir ("": a fresh one) with the settings of cfg and o, and
// unmounted when the test ends (writing back, then a forced unmount if a
// normal one does not work within 10 s). Filled in: cfg's Mode, Export and
// Dir; Name if empty (name:DIR), Addr if empty (e's; a fault proxy's
// otherwise), CacheDir if empty (a fresh one), Logger if nil (quiet); o's
// FsName if empty.
func newSNFSMountWith(t *testing.T, e *env, name, dir string, cfg snfsmount.Config, o fusefs.Options) *snfsMount {
	t.Helper()
	requireFUSE(t)
	if dir == "" {
		dir = diskTempDir(t, "snfs-mnt-")
	}
	cfg.Mode, cfg.Export, cfg.Dir = snfsmount.SNFS, e.cfg.Exports[0].Path, dir
	if cfg.Name == "" {
		cfg.Name = name + ":" + dir
	}
	if cfg.Addr == "" {
		cfg.Addr = e.addr
	}
	if cfg.CacheDir == "" {
		cfg.CacheDir = diskTempDir(t, "snfs-cache-")
	}
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	m, err := openSNFSMount(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.unmount(t) })
	return m
}

// mountSNFS is newSNFSMountAt's mount without a test and its cleanup (the
// crash test's child process and the lock-cancel test's gated mount).
func mountSNFS(addr, export, name, dir, cacheDir string, delay time.Duration) (*snfsMount, error) {
	return openSNFSMount(snfsmount.Config{Mode: snfsmount.SNFS, Addr: addr, Export: export, Dir: dir,
		Name: name + ":" + dir, CacheDir: cacheDir, WriteBackDelay: delay, Logger: quietLogger()},
		fusefs.Options{Passthrough: true})
}

// openSNFSMount opens cfg (mount.Open) and serves it on cfg.Dir with o
// (FsName: 127.0.0.1:EXPORT if empty).
func openSNFSMount(cfg snfsmount.Config, o fusefs.Options) (*snfsMount, error) {
	// 30 s: a restarted mount with --permits=on replays its log first.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mt, err := snfsmount.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if o.FsName == "" {
		o.FsName = "127.0.0.1:" + cfg.Export
	}
	life, cancelLife := context.WithCancel(context.Background())
	srv, err := mt.Serve(life, o)
	if err != nil {
		cancelLife()
		mt.Close()
		return nil, err
	}
	return &snfsMount{dir: cfg.Dir, cacheDir: cfg.CacheDir, v: mt.FS, srv: srv, cancel: cancelLife}, nil
}

func (m *snfsMount) unmount(t *testing.T) {
	if m.srv == nil {
		return
	}
	busy := busyReport(m.dir, m.srv)
	if err := fusefs.Unmount(m.dir, m.srv, 10*time.Second); err != nil {
		t.Error(unmountError(err, busy))
	}
	const wait = 20 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	errs := finishBounded("write-back at unmount", func() error { return m.v.Sync(ctx) }, wait, m.cancel)
	for _, err := range errs {
		t.Error(err)
	}
	m.srv = nil
	if len(errs) > 0 && strings.Contains(errs[len(errs)-1].Error(), stillRunning) {
		return // Close would race with the Sync still running
	}
	if err := m.v.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if m.cancel != nil {
		m.cancel()
	}
}

func (m *snfsMount) path(name string) string { return filepath.Join(m.dir, name) }

// TestMountSNFSSequentialSharing: A writes and closes a file: the data is
// only in A's cache (the export does not have it). B opens and reads it: the
// server called A back, A wrote it back, B reads A's bytes.
func TestMountSNFSSequentialSharing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	serverFiles(t, e, "f")
	a := newSNFSMount(t, e, "A", "", time.Hour)
	b := newSNFSMount(t, e, "B", "", time.Hour)
	want := randBytes(11, 300000)
	if err := os.WriteFile(a.path("f"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	if n := exportHas(t, e.path("f")); n != 0 {
		t.Fatalf("the export has %d bytes after A's close; want none (delayed write-back)", n)
	}
	if got := mustRead(t, a.path("f")); !bytes.Equal(got, want) {
		t.Fatalf("A reads back %d bytes, different", len(got))
	}
	if got := mustRead(t, b.path("f")); !bytes.Equal(got, want) {
		t.Fatalf("B reads %d bytes, not A's %d", len(got), len(want))
	}
	if got := mustRead(t, e.path("f")); !bytes.Equal(got, want) {
		t.Fatalf("the export has %d bytes after B's open, not A's", len(got))
	}
	if st := cachemgr.StatsOf(a.v); st.Callbacks.Load() == 0 || st.WriteBacks.Load() == 0 {
		t.Errorf("A: %d callbacks, %d write-backs; want both", st.Callbacks.Load(), st.WriteBacks.Load())
	}
	// And back: B writes, A reads B's bytes.
	want2 := randBytes(12, 70000)
	if err := os.WriteFile(b.path("f"), want2, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, a.path("f")); !bytes.Equal(got, want2) {
		t.Fatalf("A reads %d bytes after B rewrote the file, not B's %d", len(got), len(want2))
	}
}

// TestMountSNFSWriteSharing: A has the file open writing, B open reading:
// every byte A writes is visible to B's next read.
func TestMountSNFSWriteSharing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	// shared made on the server first: the test is about concurrent write sharing of a file's data, not about
	// names. A file a mount creates under a write-back permit (the default)
	// is in its log until reintegrated, and another client's lookup does
	// not recall the permit (docs/protocol.md section 21.4;
	// TestMountSNFSSequentialSharing is about that).
	if err := os.WriteFile(e.path("shared"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	a := newSNFSMount(t, e, "A", "", time.Hour)
	b := newSNFSMount(t, e, "B", "", time.Hour)
	fa, err := os.OpenFile(a.path("shared"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	model := []byte("first bytes, cached by A")
	if _, err := fa.WriteAt(model, 0); err != nil {
		t.Fatal(err)
	}
	fb, err := os.Open(b.path("shared"))
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	check := func(step int) {
		t.Helper()
		got := make([]byte, len(model)+100)
		n, err := fb.ReadAt(got, 0)
		if err != nil && n != len(model) {
			t.Fatalf("step %d: B's read: %d bytes, %v", step, n, err)
		}
		if !bytes.Equal(got[:n], model) {
			t.Fatalf("step %d: B reads %d bytes, want %d (A's writes)", step, n, len(model))
		}
	}
	check(0)
	for step := 1; step <= 40; step++ {
		chunk := randBytes(uint64(step), 1+step*97%5000)
		off := step * 7919 % (len(model) + 1000)
		if _, err := fa.WriteAt(chunk, int64(off)); err != nil {
			t.Fatal(err)
		}
		if end := off + len(chunk); end > len(model) {
			model = append(model, make([]byte, end-len(model))...)
		}
		copy(model[off:], chunk)
		check(step)
	}
}

// TestMountSNFSTempFiles: 1,000 files created, written (64 KiB) and deleted
// within the write-back delay cost no WRITE RPC.
func TestMountSNFSTempFiles(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	reg := metrics.New()
	e.restartWith(func(c *server.Config) { c.Metrics, c.Observer = reg, reg })
	a := newSNFSMount(t, e, "A", "", time.Hour)
	data := randBytes(5, 64<<10)
	before := serverCalls(t, reg, "WRITE")
	for k := range 1000 {
		p := a.path(fmt.Sprintf("tmp%04d", k))
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if k%100 == 0 {
			if got := mustRead(t, p); !bytes.Equal(got, data) {
				t.Fatalf("file %d reads back %d bytes, different", k, len(got))
			}
		}
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	// RELEASEs are asynchronous: a file unlinked before its release was
	// hidden under a .snfs name, removed (with its cached data) at release.
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if ents, _ := os.ReadDir(e.dir); len(ents) == 0 {
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := a.v.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if n := serverCalls(t, reg, "WRITE") - before; n != 0 {
		t.Errorf("the server served %v WRITEs; want 0", n)
	}
	if n := a.v.Stats().Writes.Load(); n != 0 {
		t.Errorf("the mount sent %d WRITEs; want 0", n)
	}
	st := cachemgr.StatsOf(a.v)
	t.Logf("write-backs cancelled: %d, write-backs: %d", st.Cancelled.Load(), st.WriteBacks.Load())
	noHidden(t, e.dir)
	if ents, _ := os.ReadDir(e.dir); len(ents) != 0 {
		t.Errorf("%d names left in the export", len(ents))
	}
}

// TestMountSNFSDelayedWriteBack: with a short delay, a closed file reaches
// the server by itself; fsync writes back at once; unmount writes back.
func TestMountSNFSDelayedWriteBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	serverFiles(t, e, "late", "synced", "atunmount")
	a := newSNFSMount(t, e, "A", "", 300*time.Millisecond)
	want := randBytes(21, 100000)
	if err := os.WriteFile(a.path("late"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !bytes.Equal(mustRead(t, e.path("late")), want) {
		if time.Now().After(deadline) {
			t.Fatal("the delayed write-back did not reach the server within 10 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	b := newSNFSMount(t, e, "B", "", time.Hour)
	f, err := os.Create(b.path("synced"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(want); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, e.path("synced")); !bytes.Equal(got, want) {
		t.Fatalf("after fsync the export has %d bytes", len(got))
	}
	f.Close()
	if err := os.WriteFile(b.path("atunmount"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	b.unmount(t)
	if got := mustRead(t, e.path("atunmount")); !bytes.Equal(got, want) {
		t.Fatalf("after unmount the export has %d bytes", len(got))
	}
}

// TestMountSNFSChild is not a test: it is the mount process of
// TestMountSNFSCrash (run with SNFS_MOUNT_CHILD set).
func TestMountSNFSChild(t *testing.T) {
	t.Parallel()
	args := os.Getenv("SNFS_MOUNT_CHILD")
	if args == "" {
		t.Skip("the mount process of TestMountSNFSCrash")
	}
	f := strings.Split(args, "|") // addr|export|dir|cacheDir
	m, err := mountSNFS(f[0], f[1], "crash", f[2], f[3], time.Hour)
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println("ready")
	m.srv.Wait() // until killed
}

// TestMountSNFSCrash: a mount process writes and closes a file and is killed
// (SIGKILL) before its write-back; a new mount with the same cache directory
// writes the data back.
func TestMountSNFSCrash(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	e := newEnv(t, "rw,no_root_squash")
	dir := diskTempDir(t, "snfs-mnt-")
	cacheDir := diskTempDir(t, "snfs-cache-")
	cmd := command(os.Args[0], "-test.run=^TestMountSNFSChild$", "-test.v")
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
	want := randBytes(31, 500000)
	if err := os.WriteFile(filepath.Join(dir, "precious"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	if n := exportHas(t, e.path("precious")); n != 0 {
		t.Fatalf("the export has %d bytes before the crash; want none (delayed write-back)", n)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	killed = true
	if err := fusefs.Unmount(dir, nil, 5*time.Second); err != nil {
		t.Logf("unmount of the dead mount: %v", err)
	}
	if n := exportHas(t, e.path("precious")); n != 0 {
		t.Fatalf("the export has %d bytes after the crash; want none yet", n)
	}
	m := newSNFSMountAt(t, e, "crash", dir, cacheDir, time.Hour)
	if got := mustRead(t, e.path("precious")); !bytes.Equal(got, want) {
		t.Fatalf("after the restart the export has %d bytes, want the %d written before the crash", len(got), len(want))
	}
	if got := mustRead(t, m.path("precious")); !bytes.Equal(got, want) {
		t.Fatalf("the restarted mount reads %d bytes", len(got))
	}
}

// TestMountSNFSPosix runs go-fuse's POSIX suite against a mount in snfs
// mode, each case in a fresh export and mount (known failures as in nfs
// mode, TestMountPosix, but fallocate's: snfs mode has it, SNFS ALLOCATE).
func TestMountSNFSPosix(t *testing.T) {
	// Serial (no t.Parallel): posixtest's FdLeak counts the process's open descriptors.
	runPosix(t, func(t *testing.T, e *env) string { return newSNFSMount(t, e, "posix", "", time.Hour).dir }, knownSNFSFailure)
}

// serverCalls is the number of NFS calls of procedure proc the server served.
func serverCalls(t *testing.T, reg *metrics.Registry, proc string) float64 {
	t.Helper()
	fams, err := reg.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range fams {
		if f.GetName() != "snfs_server_rpc_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "proc" && l.GetValue() == proc {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}

// TestMountSNFSWarmRemount: a file cached by a mount is read after a remount
// with the same cache directory from the cache directory: no READ.
func TestMountSNFSWarmRemount(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	reg := metrics.New()
	e.restartWith(func(c *server.Config) { c.Metrics, c.Observer = reg, reg })
	dir := diskTempDir(t, "snfs-mnt-")
	cacheDir := diskTempDir(t, "snfs-cache-")
	want := randBytes(41, 3<<20+5)
	if err := os.WriteFile(e.path("big"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	a := newSNFSMountAt(t, e, "warm", dir, cacheDir, time.Hour)
	if got := mustRead(t, a.path("big")); !bytes.Equal(got, want) {
		t.Fatalf("cold read: %d bytes, different", len(got))
	}
	if serverCalls(t, reg, "READ") == 0 {
		t.Fatal("the cold read sent no READ")
	}
	a.unmount(t)
	reads := serverCalls(t, reg, "READ")
	b := newSNFSMountAt(t, e, "warm", dir, cacheDir, time.Hour)
	if got := mustRead(t, b.path("big")); !bytes.Equal(got, want) {
		t.Fatalf("warm read: %d bytes, different", len(got))
	}
	if n := serverCalls(t, reg, "READ") - reads; n != 0 {
		t.Errorf("the read after the remount sent %v READs; want 0", n)
	}
}

// TestMountSNFSServerRestart: dirty data held in the cache directory reaches
// a restarted server (which lost the client's records) without waiting for
// the delay, and the file is read correctly through the mount afterwards.
func TestMountSNFSServerRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	a := newSNFSMount(t, e, "A", "", time.Hour)
	want := randBytes(51, 200000)
	if err := os.WriteFile(a.path("kept"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	if n := exportHas(t, e.path("kept")); n != 0 {
		t.Fatalf("the export has %d bytes before the restart; want none", n)
	}
	e.restart()
	// The next call reconnects; its REGISTER shows the restart.
	os.Stat(a.path("other"))
	deadline := time.Now().Add(20 * time.Second)
	for !bytes.Equal(mustRead(t, e.path("kept")), want) {
		if time.Now().After(deadline) {
			t.Fatal("the dirty data did not reach the restarted server within 20 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := mustRead(t, a.path("kept")); !bytes.Equal(got, want) {
		t.Fatalf("the mount reads %d bytes after the restart", len(got))
	}
}

// awaitMountReady waits for a mount helper process to print "ready" on out
// (its stdout), and fails the test on "error: ..." or after 30 s.
func awaitMountReady(t *testing.T, out io.Reader) {
	t.Helper()
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l := sc.Text(); l == "ready" || strings.HasPrefix(l, "error:") {
				ready <- l
			}
		}
		close(ready)
	}()
	select {
	case l := <-ready:
		if l != "ready" {
			t.Fatalf("mount process: %q", l)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the mount process did not become ready")
	}
}

// serverFiles makes empty regular files named names in e's export, before
// a mount that writes them is made: the tests of a file's data path (its
// opens, callbacks, delayed write-back and close, passthrough, fsync to
// the server) are about files the server made. A file the mount itself
// made under its directory's write-back permit (`snfs mount`'s default)
// keeps its data in the cache directory until its reintegration instead,
// and its fsync makes it durable there (docs/mount.md "The data of a
// regular file made locally stays local"; its tests are the permits').
func serverFiles(t *testing.T, e *env, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := os.WriteFile(e.path(n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// numbered is prefix0 ... prefix(n-1).
func numbered(prefix string, n int) []string {
	ns := make([]string, n)
	for k := range ns {
		ns[k] = fmt.Sprint(prefix, k)
	}
	return ns
}

// serverProcFiles is serverFiles for a server process's export.
func serverProcFiles(t *testing.T, s *srvProc, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := os.WriteFile(s.path(n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
