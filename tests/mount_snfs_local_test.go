package tests

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"snfs/metrics"
	"snfs/mount/cachemgr"
	"snfs/mount/fusefs"
	"snfs/server"
)

// Files changed on the server machine by local processes (issue 22, item 2):
// the server is in this process, so the local process that changes or reads
// the export directly is a child (cp, cat): the server tells its own changes
// from everyone else's by process.

// localWrite replaces the contents of path (in the export) with data, written
// by a child process (cp truncates and rewrites the file in place: the same
// inode, as an editor saving in place or a log rotation by copy does).
func localWrite(t *testing.T, path string, data []byte) {
	t.Helper()
	src := filepath.Join(diskTempDir(t, "snfs-local-"), "src")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := command("cp", src, path).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
}

// localRead reads path (in the export) by a child process (cat).
func localRead(t *testing.T, path string) []byte {
	t.Helper()
	out, err := command("cat", path).Output()
	if err != nil {
		t.Fatalf("cat %s: %v", path, err)
	}
	return out
}

// TestMountSNFSLocalChange: a file an snfs-mode mount has read (and caches)
// is rewritten in the export by a local process (100,000 × A replaced by
// 150,000 × C): the mount's next open reads the new bytes.
func TestMountSNFSLocalChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	a := newSNFSMount(t, e, "A", "", time.Hour)
	old := bytes.Repeat([]byte("A"), 100000)
	if err := os.WriteFile(e.path("f"), old, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, a.path("f")); !bytes.Equal(got, old) {
		t.Fatalf("first read: %s", byteRuns(got))
	}
	want := bytes.Repeat([]byte("C"), 150000)
	localWrite(t, e.path("f"), want)
	if got := mustRead(t, a.path("f")); !bytes.Equal(got, want) {
		t.Fatalf("after the local rewrite the mount reads %s; want 150000 × C", byteRuns(got))
	}
}

// TestMountSNFSLocalChangeOpen: the same with the file held open in the
// mount across the change: the server calls the mount back (INVALIDATE) and
// a read on the same descriptor sees the new bytes without a reopen.
func TestMountSNFSLocalChangeOpen(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	a := newSNFSMount(t, e, "A", "", time.Hour)
	old := bytes.Repeat([]byte("A"), 100000)
	if err := os.WriteFile(e.path("f"), old, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(a.path("f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 200000)
	if n, err := f.ReadAt(buf, 0); n != len(old) || !bytes.Equal(buf[:n], old) {
		t.Fatalf("first read: %d bytes (%v)", n, err)
	}
	want := bytes.Repeat([]byte("C"), 150000)
	localWrite(t, e.path("f"), want)
	var got []byte
	if !waitFor(10*time.Second, func() bool {
		n, _ := f.ReadAt(buf, 0)
		got = buf[:n]
		return bytes.Equal(got, want)
	}) {
		t.Fatalf("the open file reads %s 10 s after the local rewrite; want 150000 × C", byteRuns(got))
	}
	if st := cachemgr.StatsOf(a.v); st.Callbacks.Load() == 0 {
		t.Error("the mount was not called back")
	}
}

// TestMountSNFSLocalChangeRemount: the mount reads the file and is
// unmounted; a local process rewrites it; the mount, mounted again on the
// same cache directory, reads the new bytes.
func TestMountSNFSLocalChangeRemount(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	dir := diskTempDir(t, "snfs-mnt-")
	cacheDir := diskTempDir(t, "snfs-cache-")
	old := bytes.Repeat([]byte("A"), 100000)
	if err := os.WriteFile(e.path("f"), old, 0o644); err != nil {
		t.Fatal(err)
	}
	a := newSNFSMountAt(t, e, "A", dir, cacheDir, time.Hour)
	if got := mustRead(t, a.path("f")); !bytes.Equal(got, old) {
		t.Fatalf("first read: %s", byteRuns(got))
	}
	a.unmount(t)
	want := bytes.Repeat([]byte("C"), 150000)
	localWrite(t, e.path("f"), want)
	b := newSNFSMountAt(t, e, "A", dir, cacheDir, time.Hour)
	if got := mustRead(t, b.path("f")); !bytes.Equal(got, want) {
		t.Fatalf("after the remount the mount reads %s; want 150000 × C", byteRuns(got))
	}
}

// counterValue is the value of the unlabelled counter name (0 if absent).
func counterValue(t *testing.T, reg *metrics.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			total := 0.0
			for _, m := range f.GetMetric() {
				total += m.GetCounter().GetValue()
			}
			return total
		}
	}
	return 0
}

// TestMountSNFSOwnWritesNotLocal: the server's own writes (two mounts
// sharing a file, write-backs and all) are not taken for a local process's
// changes: no file is counted changed outside the protocol, and no INVALIDATE
// is sent; a local process's write is.
func TestMountSNFSOwnWritesNotLocal(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	reg := metrics.New()
	e.restartWith(func(c *server.Config) { c.Metrics, c.Observer = reg, reg })
	a := newSNFSMount(t, e, "A", "", time.Hour)
	b := newSNFSMount(t, e, "B", "", time.Hour)
	for i := range 3 {
		want := randBytes(uint64(60+i), 70000+i*1000)
		if err := os.WriteFile(a.path("f"), want, 0o644); err != nil {
			t.Fatal(err)
		}
		if got := mustRead(t, b.path("f")); !bytes.Equal(got, want) {
			t.Fatalf("round %d: B reads %d bytes, not A's %d", i, len(got), len(want))
		}
		if err := os.WriteFile(b.path("f"), want[:1000], 0o644); err != nil {
			t.Fatal(err)
		}
		if got := mustRead(t, a.path("f")); !bytes.Equal(got, want[:1000]) {
			t.Fatalf("round %d: A reads %d bytes, not B's 1000", i, len(got))
		}
	}
	e.srv.DrainChanges()
	if n := counterValue(t, reg, "snfs_server_consist_local_changes_total"); n != 0 {
		t.Errorf("%v local changes counted for the server's own writes; want 0", n)
	}
	if n := metricValue(t, reg, "snfs_server_consist_callbacks_total", "mode", "INVALIDATE"); n != 0 {
		t.Errorf("%v INVALIDATE callbacks for the server's own writes; want 0", n)
	}
	localWrite(t, e.path("f"), []byte("local"))
	e.srv.DrainChanges()
	if n := counterValue(t, reg, "snfs_server_consist_local_changes_total"); n == 0 {
		t.Error("a local process's write was not counted")
	}
	if got := mustRead(t, a.path("f")); string(got) != "local" {
		t.Fatalf("A reads %q after the local write", got)
	}
}

// TestMountSNFSLocalReadDirty: a file a mount wrote and closed (its data only
// in the mount's cache, write-back delay 1 h), read on the server machine by
// a local process (cat), gives the mount's bytes: the local open broke the
// server's lease, the mount wrote back, then the open went on.
func TestMountSNFSLocalReadDirty(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	// f and g made on the server first: the test is about the dirty data
	// of files the server has. Under a write-back permit (the default) a
	// file the mount creates is in its log, not on the server, until
	// reintegrated, and a read elsewhere recalls nothing (docs/protocol.md
	// section 21.4).
	for _, n := range []string{"f", "g"} {
		if err := os.WriteFile(e.path(n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a := newSNFSMount(t, e, "A", "", time.Hour)
	want := randBytes(71, 150000)
	if err := os.WriteFile(a.path("f"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	if n := exportSize(t, e.path("f")); n != 0 {
		t.Fatalf("the export's file before the local read: %d bytes; want it empty (delayed write-back)", n)
	}
	if got := localRead(t, e.path("f")); !bytes.Equal(got, want) {
		t.Fatalf("cat on the server reads %d bytes; want the mount's %d", len(got), len(want))
	}
	if st := cachemgr.StatsOf(a.v); st.WriteBacks.Load() == 0 {
		t.Error("the mount did not write back")
	}
	// Again, the file open for writing in the mount while the local process
	// appends to it: the mount's bytes first, then the local line, seen by the
	// mount too.
	f, err := os.OpenFile(a.path("g"), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(want[:5000]); err != nil {
		t.Fatal(err)
	}
	if out, err := command("sh", "-c", "echo local >> "+e.path("g")).CombinedOutput(); err != nil {
		t.Fatalf("local append: %v: %s", err, out)
	}
	wantG := append(append([]byte(nil), want[:5000]...), "local\n"...)
	if got := localRead(t, e.path("g")); !bytes.Equal(got, wantG) {
		t.Fatalf("the export's g after the local append: %s", byteRuns(got))
	}
	f.Close()
	if got := mustRead(t, a.path("g")); !bytes.Equal(got, wantG) {
		t.Fatalf("the mount reads g as %s after the local append", byteRuns(got))
	}
}

// exportSize is the size of path in the export: a peek at what the server
// has that, unlike a read, does not open the file. An open by a process on
// the server machine (this test's own included, the server being in this
// process) breaks the server's lease and has the mounts write back first, so
// tests that check that data is not written back yet look at sizes and times
// only.
func exportSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// exportHas is how many bytes of path the export has (see exportSize): 0
// also when it has no such file, as for a file a mount made under a
// write-back permit (the default) and has not reintegrated yet: the tests
// that check that a mount's data is not on the server yet, whichever way
// the mount made the file.
func exportHas(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// exportStamp is path's size and modification time in the export (see
// exportSize): unchanged while no write of a mount's reached the server.
func exportStamp(t *testing.T, path string) [2]int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return [2]int64{st.Size(), st.ModTime().UnixNano()}
}

// TestMountSNFSLocalReadSilentClient: the mount that holds the file dirty
// stops answering (SIGSTOP): a local process's open waits for the callback
// deadline, no longer; the client is fenced and the open reads what the
// server has.
func TestMountSNFSLocalReadSilentClient(t *testing.T) {
	// Serial (no t.Parallel): it bounds a duration.
	e := newEnv(t, "rw,no_root_squash")
	reg := metrics.New()
	e.restartWith(func(c *server.Config) {
		c.Metrics, c.Observer = reg, reg
		c.Table.CallbackTimeout = 2 * time.Second
	})
	requireFUSE(t)
	dir := diskTempDir(t, "snfs-mnt-")
	cacheDir := diskTempDir(t, "snfs-cache-")
	cmd := command(os.Args[0], "-test.run=^TestMountSNFSChild$", "-test.v")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with the test binary
	cmd.Env = append(os.Environ(), "SNFS_MOUNT_CHILD="+strings.Join([]string{e.addr, e.cfg.Exports[0].Path, dir, cacheDir}, "|"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		if err := fusefs.Unmount(dir, nil, 5*time.Second); err != nil {
			t.Logf("unmount of the dead mount: %v", err)
		}
	})
	awaitMountReady(t, out)
	// f made on the server first: the test is about the dirty data of a
	// file the server has (a file the mount creates under a write-back
	// permit, the default, is not on the server until reintegrated).
	if err := os.WriteFile(e.path("f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), randBytes(81, 100000), 0o644); err != nil {
		t.Fatal(err)
	}
	if n := exportSize(t, e.path("f")); n != 0 {
		t.Fatalf("the export has %d bytes before the local read; want none (delayed write-back)", n)
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Signal(syscall.SIGCONT)
	start := time.Now()
	got := localRead(t, e.path("f"))
	took := time.Since(start)
	if len(got) != 0 {
		t.Errorf("the local read got %d bytes from a silent client", len(got))
	}
	if took < time.Second || took > 10*time.Second {
		t.Errorf("the local open took %v; want about the callback deadline (2 s)", took)
	}
	if n := counterValue(t, reg, "snfs_server_consist_fencings_total"); n == 0 {
		t.Error("the silent client was not fenced")
	}
}

// TestMountSNFSLocalChangeServerDown: a file the mount read (and caches) is
// rewritten by a local process while the server is down: after the restart
// the mount reads the new bytes (the file has no entry in the new table: its
// next OPEN takes a fresh version).
func TestMountSNFSLocalChangeServerDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	a := newSNFSMount(t, e, "A", "", time.Hour)
	old := bytes.Repeat([]byte("A"), 100000)
	if err := os.WriteFile(e.path("f"), old, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, a.path("f")); !bytes.Equal(got, old) {
		t.Fatalf("first read: %s", byteRuns(got))
	}
	addr := e.addr
	e.stop()
	e.nfs = nil
	want := bytes.Repeat([]byte("C"), 150000)
	localWrite(t, e.path("f"), want)
	e.start(addr)
	var got []byte
	if !waitFor(20*time.Second, func() bool {
		got, _ = os.ReadFile(a.path("f"))
		return bytes.Equal(got, want)
	}) {
		t.Fatalf("after the restart the mount reads %s; want 150000 × C", byteRuns(got))
	}
}

// TestMountSNFSLocalChangeNoNotifier: TestMountSNFSLocalChange on a server
// without change notifications (as where fanotify is unavailable): the OPEN
// compares the file's change attribute with the one the last OPEN saw, and a
// local rewrite gives a new version all the same. A rewrite of the same size
// within one tick of the clock is what this cannot see.
func TestMountSNFSLocalChangeNoNotifier(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	e.restartWith(func(c *server.Config) { c.NoChangeNotifier = true })
	a := newSNFSMount(t, e, "A", "", time.Hour)
	old := bytes.Repeat([]byte("A"), 100000)
	if err := os.WriteFile(e.path("f"), old, 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if got := mustRead(t, a.path("f")); !bytes.Equal(got, old) {
			t.Fatalf("read %d before the change: %s", i, byteRuns(got))
		}
	}
	want := bytes.Repeat([]byte("C"), 150000)
	localWrite(t, e.path("f"), want)
	if got := mustRead(t, a.path("f")); !bytes.Equal(got, want) {
		t.Fatalf("after the local rewrite the mount reads %s; want 150000 × C", byteRuns(got))
	}
	// The mount's own writes are not taken for a local change: its cache of
	// what it wrote stays valid across a close and an open.
	mine := randBytes(91, 50000)
	if err := os.WriteFile(a.path("f"), mine, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, a.path("f")); !bytes.Equal(got, mine) {
		t.Fatalf("the mount reads back %s, not its own write", byteRuns(got))
	}
}
