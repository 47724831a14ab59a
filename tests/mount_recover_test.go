package tests

import (
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

	"golang.org/x/sys/unix"

	"snfs/client"
	"snfs/nfs3"
)

// Recovery tests (issue 15, docs/mount.md "Recovery") with real processes:
// `snfs serve` and `snfs mount` from the command built once per test binary.

// scrape sums the samples of family with the given labels (name=value
// pairs) at http://addr/metrics; 0 if absent.
func scrape(t *testing.T, addr, family string, labels ...string) float64 {
	t.Helper()
	v, err := metricSum(addr, family, labels...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// writeDurable writes data to p and closes it: close() returned, so the
// data must not be lost.
func writeDurable(t *testing.T, p string, data []byte) {
	t.Helper()
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestMountSNFSRecoverKilled: a mount process holding dirty data (closed,
// not written back: an hour's delay) is killed with SIGKILL; a new mount
// with the same cache directory writes the data back before it serves.
func TestMountSNFSRecoverKilled(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	s := newServeProc(t)
	serverProcFiles(t, s, "precious")
	a := startMount(t, s, "", "")
	want := randBytes(61, 700000)
	writeDurable(t, a.path("precious"), want)
	if n := exportSize(t, s.path("precious")); n != 0 {
		t.Fatalf("the export has %d bytes before the kill; want none (delayed write-back)", n)
	}
	a.kill9()
	b := startMount(t, s, a.dir, a.cacheDir)
	if got := mustRead(t, s.path("precious")); !bytes.Equal(got, want) {
		t.Fatalf("after the remount the export has %d bytes, want the %d written before the kill", len(got), len(want))
	}
	if got := mustRead(t, b.path("precious")); !bytes.Equal(got, want) {
		t.Fatalf("the new mount reads %d bytes", len(got))
	}
	if n := scrape(t, b.metrics, "snfs_client_conflicts_total"); n != 0 {
		t.Errorf("snfs_client_conflicts_total = %v; want 0", n)
	}
}

// nfsRetry runs call until it answers something other than JUKEBOX.
func nfsRetry(t *testing.T, what string, call func() (nfs3.Status, error)) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := call()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if st == nfs3.OK {
			return
		}
		if st != nfs3.ErrJukebox || time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMountSNFSRecoverConflict: as TestMountSNFSRecoverKilled, but another
// client (the Go NFS client) rewrites the file while the mount is dead. The
// restarted mount leaves the server's file alone (the other client's bytes),
// saves its own version as NAME.snfs-conflict-HOST-UNIXTIME beside it, counts
// and records the conflict, and `snfs conflicts` lists it.
func TestMountSNFSRecoverConflict(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	s := newServeProc(t)
	old := randBytes(62, 50000)
	if err := os.WriteFile(s.path("shared"), old, 0o644); err != nil {
		t.Fatal(err)
	}
	a := startMount(t, s, "", "")
	ours := randBytes(63, 300000)
	writeDurable(t, a.path("shared"), ours)
	if n := exportSize(t, s.path("shared")); n != int64(len(old)) {
		t.Fatalf("the export changed before the kill (%d bytes); want the old %d", n, len(old))
	}
	a.kill9()

	theirs := randBytes(64, 120000)
	nfsRewrite(t, s, "shared", theirs)

	b := startMount(t, s, a.dir, a.cacheDir)
	if got := mustRead(t, s.path("shared")); !bytes.Equal(got, theirs) {
		t.Fatalf("the server's file has %d bytes after the remount; want the other client's %d", len(got), len(theirs))
	}
	names, _ := filepath.Glob(s.path("shared.snfs-conflict-*"))
	if len(names) != 1 {
		t.Fatalf("conflict copies in the export: %q; want one", names)
	}
	if got := mustRead(t, names[0]); !bytes.Equal(got, ours) {
		t.Fatalf("the conflict copy has %d bytes; want this client's %d", len(got), len(ours))
	}
	host, _ := os.Hostname()
	if base := filepath.Base(names[0]); !strings.HasPrefix(base, "shared.snfs-conflict-"+host+"-") {
		t.Errorf("conflict copy named %q; want shared.snfs-conflict-%s-UNIXTIME", base, host)
	}
	if n := scrape(t, b.metrics, "snfs_client_conflicts_total"); n != 1 {
		t.Errorf("snfs_client_conflicts_total = %v; want 1", n)
	}
	if got := mustRead(t, b.path("shared")); !bytes.Equal(got, theirs) {
		t.Errorf("the mount reads %d bytes of shared; want the server's %d", len(got), len(theirs))
	}
	for _, args := range [][]string{{"conflicts", "--cache-dir", a.cacheDir}, {"conflicts", b.dir}} {
		out, err := command(snfsBinary(t), args...).CombinedOutput()
		if err != nil {
			t.Fatalf("snfs %v: %v\n%s", args, err, out)
		}
		if !strings.Contains(string(out), filepath.Base(names[0])) || !strings.Contains(string(out), "shared") {
			t.Errorf("snfs %v does not list the conflict:\n%s", args, out)
		}
	}
}

// statusOrZero is status() for the tests' results.
func statusOrZero[R any](res *R, err error) (nfs3.Status, error) {
	if err != nil {
		return 0, err
	}
	switch r := any(res).(type) {
	case *nfs3.LookupRes:
		return r.Status, nil
	case *nfs3.WccRes:
		return r.Status, nil
	case *nfs3.WriteRes:
		return r.Status, nil
	}
	return 0, fmt.Errorf("status of %T", res)
}

// TestMountSNFSServerRestartReclaim: the server is killed (SIGKILL) and
// started again on the same state directory while a mount holds a file open
// and cached for reading, one open for writing with dirty data, and one
// closed with dirty data. The mount reclaims them: no byte is lost, and the
// cached file is read afterwards with no READ (its cache stayed valid).
func TestMountSNFSServerRestartReclaim(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	s := newServeProc(t, "--grace", "30s")
	cached := randBytes(71, 2<<20+17)
	if err := os.WriteFile(s.path("cached"), cached, 0o644); err != nil {
		t.Fatal(err)
	}
	serverProcFiles(t, s, "dirtyopen", "dirtyclosed")
	a := startMount(t, s, "", "")
	rf, err := os.Open(a.path("cached"))
	if err != nil {
		t.Fatal(err)
	}
	defer rf.Close()
	if got, err := io.ReadAll(rf); err != nil || !bytes.Equal(got, cached) {
		t.Fatalf("first read: %d bytes, %v", len(got), err)
	}
	wf, err := os.Create(a.path("dirtyopen"))
	if err != nil {
		t.Fatal(err)
	}
	defer wf.Close()
	open1 := randBytes(72, 400000)
	if _, err := wf.Write(open1); err != nil {
		t.Fatal(err)
	}
	closed := randBytes(73, 250000)
	writeDurable(t, a.path("dirtyclosed"), closed)
	for _, n := range []string{"dirtyopen", "dirtyclosed"} {
		if size := exportSize(t, s.path(n)); size != 0 {
			t.Fatalf("%s: the export has %d bytes before the restart; want none", n, size)
		}
	}

	s.restart()
	// The mount's next call reconnects; its REGISTER shows the restart, and
	// the reclaim is sent before anything else on the new connection.
	os.Stat(a.path("nothing"))
	deadline := time.Now().Add(30 * time.Second)
	for scrape(t, a.metrics, "snfs_client_reclaimed_files_total") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the mount did not reclaim within 30 s")
		}
		os.Stat(a.path("nothing"))
		time.Sleep(50 * time.Millisecond)
	}
	if n := scrape(t, a.metrics, "snfs_client_reclaimed_files_total"); n != 3 {
		t.Errorf("reclaimed %v files; want 3 (cached, dirtyopen, dirtyclosed)", n)
	}
	if n := scrape(t, s.metrics, "snfs_server_consist_reclaims_total"); n != 3 {
		t.Errorf("the server took %v reclaimed items; want 3", n)
	}

	// The cached file: read again through the open descriptor and a new
	// open, with the kernel's pages dropped, from the cache directory.
	dropKernelCache(t, a.path("cached"))
	if got, err := rf.ReadAt(make([]byte, len(cached)), 0); err != nil && err != io.EOF || got != len(cached) {
		t.Fatalf("read after the restart: %d bytes, %v", got, err)
	}
	if got := mustRead(t, a.path("cached")); !bytes.Equal(got, cached) {
		t.Fatalf("read after the restart: %d bytes, different", len(got))
	}
	if n := scrape(t, s.metrics, "snfs_server_rpc_total", "proc", "READ"); n != 0 {
		t.Errorf("the restarted server served %v READs; want 0 (the mount's cache stayed valid)", n)
	}
	// More data after the restart, then everything goes at unmount.
	open2 := randBytes(74, 100000)
	if _, err := wf.Write(open2); err != nil {
		t.Fatal(err)
	}
	if err := wf.Close(); err != nil {
		t.Fatal(err)
	}
	rf.Close()
	a.umount()
	if got := mustRead(t, s.path("dirtyopen")); !bytes.Equal(got, append(append([]byte{}, open1...), open2...)) {
		t.Errorf("dirtyopen: the export has %d bytes; want %d", len(got), len(open1)+len(open2))
	}
	if got := mustRead(t, s.path("dirtyclosed")); !bytes.Equal(got, closed) {
		t.Errorf("dirtyclosed: the export has %d bytes; want %d", len(got), len(closed))
	}
	if n := scrape(t, s.metrics, "snfs_server_rpc_total", "proc", "UNREGISTER"); n != 1 {
		t.Errorf("UNREGISTERs at unmount: %v; want 1", n)
	}
}

// dropKernelCache drops the kernel's cached pages of p (POSIX_FADV_DONTNEED
// on a FUSE file drops its page cache), so that reads reach the mount.
func dropKernelCache(t *testing.T, p string) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Logf("fadvise: %v", err)
	}
}

// nfsLookupExport connects the Go NFS client (a plain NFSv3 client) to s,
// mounts its export and looks up name in it, retrying while the server
// answers JUKEBOX. The caller closes the client.
func nfsLookupExport(ctx context.Context, t *testing.T, s *srvProc, name string) (*client.NFS, *nfs3.LookupRes) {
	t.Helper()
	nc, err := client.DialNFS(ctx, "tcp", s.addr())
	if err != nil {
		t.Fatal(err)
	}
	mc, err := client.DialMount(ctx, "tcp", s.mountAddr())
	if err != nil {
		nc.Close()
		t.Fatal(err)
	}
	mres, err := mc.Mnt(ctx, s.export)
	mc.Close()
	if err != nil || mres.Status != 0 {
		nc.Close()
		t.Fatalf("MNT: %v %v", err, mres.Status)
	}
	var lk *nfs3.LookupRes
	dir := mres.FH
	for _, n := range strings.Split(name, "/") { // a path: one LOOKUP a name
		nfsRetry(t, "LOOKUP", func() (nfs3.Status, error) {
			var err error
			lk, err = nc.Lookup(ctx, dir, n)
			return statusOrZero(lk, err)
		})
		dir = lk.Object
	}
	return nc, lk
}

// nfsRewrite replaces the content of export file name with data through the
// Go NFS client (a plain NFSv3 client): SETATTR size 0, then a FILE_SYNC
// WRITE, each retried while the server answers JUKEBOX (it is calling the
// mount back).
func nfsRewrite(t *testing.T, s *srvProc, name string, data []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nc, lk := nfsLookupExport(ctx, t, s, name)
	defer nc.Close()
	zero := uint64(0)
	nfsRetry(t, "SETATTR size 0", func() (nfs3.Status, error) {
		r, err := nc.Setattr(ctx, &nfs3.SetattrArgs{Object: lk.Object, New: nfs3.Sattr{Size: &zero}})
		return statusOrZero(r, err)
	})
	nfsRetry(t, "WRITE", func() (nfs3.Status, error) {
		r, err := nc.Write(ctx, lk.Object, 0, data, nfs3.FileSync)
		return statusOrZero(r, err)
	})
}

// TestMountSNFSFencedConflict: a mount holding dirty data of two files stops
// answering (SIGSTOP) for longer than the callback timeout while another
// client rewrites both: the server fences it. When it runs again it learns
// of it from an OPEN (file g: the server's attributes are not the ones its
// dirty data was written over) and from SNFS_ERR_FENCED on its write-back
// at unmount (file f). Both times the other client's bytes stay on the
// server and the mount's are saved beside them; nothing is lost.
func TestMountSNFSFencedConflict(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	s := newServeProc(t, "--callback-timeout", "1s")
	oldH := randBytes(85, 30000)
	for _, n := range []string{"f", "g", "h"} {
		if err := os.WriteFile(s.path(n), oldH, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// No delayed close: a reopen of g that took a kept open over would send
	// no OPEN, and read the cache before the mount learns of the fencing
	// (docs/mount.md: a partitioned client is not told until it asks).
	a := startMount(t, s, "", "", "--close-delay", "0")
	ours := map[string][]byte{"f": randBytes(81, 200000), "g": randBytes(82, 150000)}
	theirs := map[string][]byte{"f": randBytes(83, 90000), "g": randBytes(84, 70000)}
	for n, d := range ours {
		writeDurable(t, a.path(n), d)
	}
	oursH := randBytes(86, 60000)
	writeDurable(t, a.path("h"), oursH)
	pid := a.pid()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	cont := func() { syscall.Kill(pid, syscall.SIGCONT) }
	t.Cleanup(cont)
	for n, d := range theirs {
		nfsRewrite(t, s, n, d)
	}
	// h is only read by the other client: the mount is fenced for it too
	// (its write-back callback timed out), and the reader gets the old bytes.
	if got := nfsReadAll(t, s, "h"); !bytes.Equal(got, oldH) {
		t.Errorf("h: the other client read %d bytes; want the old %d", len(got), len(oldH))
	}
	cont()
	if got := mustRead(t, a.path("g")); !bytes.Equal(got, theirs["g"]) {
		t.Errorf("g through the fenced mount: %d bytes; want the other client's %d", len(got), len(theirs["g"]))
	}
	a.umount()
	for n := range ours {
		if got := mustRead(t, s.path(n)); !bytes.Equal(got, theirs[n]) {
			t.Errorf("%s: the server has %d bytes; want the other client's %d", n, len(got), len(theirs[n]))
		}
		copies, _ := filepath.Glob(s.path(n + ".snfs-conflict-*"))
		if len(copies) != 1 {
			t.Errorf("%s: conflict copies %q; want one", n, copies)
			continue
		}
		if got := mustRead(t, copies[0]); !bytes.Equal(got, ours[n]) {
			t.Errorf("%s: the conflict copy has %d bytes; want the mount's %d", n, len(got), len(ours[n]))
		}
	}
	// h changed nowhere else: the fenced mount's data is reintegrated
	// (SNFS_ERR_FENCED on its write-back, OPEN again, written back).
	if got := mustRead(t, s.path("h")); !bytes.Equal(got, oursH) {
		t.Errorf("h: the server has %d bytes; want the mount's %d", len(got), len(oursH))
	}
	if copies, _ := filepath.Glob(s.path("h.snfs-conflict-*")); len(copies) != 0 {
		t.Errorf("h: conflict copies %q; want none", copies)
	}
	out, err := command(snfsBinary(t), "conflicts", "--cache-dir", a.cacheDir).CombinedOutput()
	if err != nil {
		t.Fatalf("snfs conflicts: %v\n%s", err, out)
	}
	t.Logf("snfs conflicts:\n%s", out)
	if c := strings.Count(string(out), "fenced"); c != 2 {
		t.Errorf("snfs conflicts lists %d fenced conflicts; want 2:\n%s", c, out)
	}
	// f is found fenced by SNFS_ERR_FENCED on the WRITEs of a write-back (of
	// the callback the mount finds queued when it runs again, or of the
	// unmount); g the same way or, if the read's OPEN comes first, by the
	// OPEN's attributes ("seen at OPEN"): which one comes first is a race.
	if c := strings.Count(string(out), "seen at OPEN"); c > 1 {
		t.Errorf("snfs conflicts lists %d conflicts seen at OPEN; want at most 1 (g)", c)
	}
}

// nfsReadAll reads export file name through the Go NFS client (a plain
// NFSv3 client), retrying while the server answers JUKEBOX.
func nfsReadAll(t *testing.T, s *srvProc, name string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nc, lk := nfsLookupExport(ctx, t, s, name)
	defer nc.Close()
	var out []byte
	for {
		var rd *nfs3.ReadRes
		nfsRetry(t, "READ", func() (nfs3.Status, error) {
			var err error
			rd, err = nc.Read(ctx, lk.Object, uint64(len(out)), 1<<20)
			if err != nil {
				return 0, err
			}
			return rd.Status, nil
		})
		out = append(out, rd.Data...)
		if rd.EOF || len(rd.Data) == 0 {
			return out
		}
	}
}

// TestMountSNFSServerRestartRefused: a server restarted with no grace period
// (--grace 0) refuses the mount's reclaim: the mount treats every file as
// fenced and reintegrates its dirty data at once (the file is unchanged: it
// is written back), and reads its cached file again from the server.
func TestMountSNFSServerRestartRefused(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	s := newServeProc(t, "--grace", "0")
	cached := randBytes(91, 1<<20)
	if err := os.WriteFile(s.path("cached"), cached, 0o644); err != nil {
		t.Fatal(err)
	}
	serverProcFiles(t, s, "dirty")
	a := startMount(t, s, "", "")
	if got := mustRead(t, a.path("cached")); !bytes.Equal(got, cached) {
		t.Fatalf("first read: %d bytes", len(got))
	}
	want := randBytes(92, 300000)
	writeDurable(t, a.path("dirty"), want)
	s.restart()
	deadline := time.Now().Add(30 * time.Second)
	for !bytes.Equal(mustRead(t, s.path("dirty")), want) {
		if time.Now().After(deadline) {
			t.Fatal("the dirty data did not reach the restarted server within 30 s")
		}
		os.Stat(a.path("nothing")) // a call: the reconnect shows the restart
		time.Sleep(50 * time.Millisecond)
	}
	if n := scrape(t, s.metrics, "snfs_server_consist_reclaims_total"); n != 0 {
		t.Errorf("the server took %v reclaimed items with no grace period; want 0", n)
	}
	if b, _ := os.ReadFile(a.logPath); !bytes.Contains(b, []byte("refused this client's reclaim")) {
		t.Errorf("the mount's log does not say the reclaim was refused")
	}
	if copies, _ := filepath.Glob(s.path("*.snfs-conflict-*")); len(copies) != 0 {
		t.Errorf("conflict copies %q; want none (nobody else changed the file)", copies)
	}
	if got := mustRead(t, a.path("cached")); !bytes.Equal(got, cached) {
		t.Fatalf("read after the restart: %d bytes, different", len(got))
	}
	if got := mustRead(t, a.path("dirty")); !bytes.Equal(got, want) {
		t.Fatalf("dirty through the mount after the restart: %d bytes, different", len(got))
	}
}
