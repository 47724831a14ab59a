package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	snfsmount "snfs/mount"
	"snfs/mount/cachemgr"
)

// statusOf runs `snfs status --json` on the mount on dir and decodes it,
// failing the test unless it exits 0 with JSON.
func statusOf(t *testing.T, bin, dir string) snfsmount.Status {
	t.Helper()
	out, code := runIn(t, bin, "/", "status", "--json", dir)
	if code != 0 {
		t.Fatalf("snfs status --json %s: exit %d, %q", dir, code, out)
	}
	var st snfsmount.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("snfs status --json %s: %v in %q", dir, err, out)
	}
	return st
}

// statusFromSocket reads the status of root's mount on dir from its stats
// socket (/run/snfs/...stats.sock: docs/mount.md, "Metrics") in this
// process: GET /status, what snfs status reads.
func statusFromSocket(t *testing.T, dir string) snfsmount.Status {
	t.Helper()
	sock := "/run/snfs/" + strings.ReplaceAll(strings.TrimPrefix(dir, "/"), "/", "%") + ".stats.sock"
	if len(sock) >= 100 {
		t.Fatalf("%s: too long for a socket address; the mount uses a hash of its mount point instead", sock)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://mount/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st snfsmount.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("GET /status on %s: %v", sock, err)
	}
	return st
}

// waitStatus polls snfs status on dir until ok says so, for at most bound.
func waitStatus(t *testing.T, bin, dir string, bound time.Duration, what string, ok func(snfsmount.Status) bool) snfsmount.Status {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		st := statusOf(t, bin, dir)
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("snfs status %s: not %s within %v: %+v", dir, what, bound, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// gauges scrapes the mount's --metrics at addr: the value of each gauge.
func gauges(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for name, f := range fams {
		if ms := f.GetMetric(); len(ms) == 1 && ms[0].GetGauge() != nil {
			out[name] = ms[0].GetGauge().GetValue()
		}
	}
	return out
}

// TestMountStatus: `snfs status` on real `snfs mount` processes over a real
// server. snfs mode: connected; a file written with delayed write-back is
// dirty (bytes, files, the oldest's age) in the status and in the gauges of
// --metrics, and clean after its fsync; with --permits=off (the delayed
// write-back of a file made by CREATE_OPEN: with permits, the file and its
// data go with the log, mount_snfs_permits_test.go) the permits and the log
// are shown as not in use; with the server stopped the status says disconnected
// within a bound, and connected again after it restarts, with the restart
// counted. nfs mode: data written and not yet flushed by a close is dirty,
// and the snfs-only figures are n/a (null in JSON). A directory that is no
// snfs mount gets exit 1 and an error saying so.
func TestMountStatus(t *testing.T) {
	// Serial (no t.Parallel): it bounds how long the mount takes to see
	// that its server is gone.
	requireFUSE(t)
	bin := snfsBinary(t)
	e := newEnv(t, "rw,no_root_squash")
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	m := startProcMount(t, bin, "127.0.0.1:"+e.dir, append(portArgs(e.port(), e.port()), "--mode=snfs", "--permits=off",
		"--writeback-delay=1h", "--metrics="+metricsAddr, "--cache-dir="+diskTempDir(t, "snfs-cache-"))...)

	st := statusOf(t, bin, m.dir)
	if st.Mode != snfsmount.SNFS || st.MountPoint != m.dir || st.Server != e.addr || st.Export != e.dir ||
		!st.Connection.Connected || st.SNFS == nil || st.Dirty.Bytes != 0 || st.Dirty.Files != 0 {
		t.Fatalf("a fresh snfs mount's status: %+v", st)
	}
	if s := st.SNFS; s.Permits.InUse || s.Permits.Held != 0 || s.Log.InUse || s.Log.Records != 0 || s.Conflicts.Count != 0 || s.CacheDir == "" {
		t.Fatalf("a fresh snfs mount's snfs status: %+v", s)
	}

	// Written and closed with an hour's write-back delay: in the cache
	// directory, not on the server.
	data := make([]byte, 5000)
	for i := range data {
		data[i] = byte(i)
	}
	if err := os.WriteFile(m.path("f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(e.path("f")); err != nil || fi.Size() != 0 {
		t.Fatalf("the server has f before its write-back: %v %v", fi, err)
	}
	time.Sleep(20 * time.Millisecond) // an age above 0
	st = statusOf(t, bin, m.dir)
	if st.Dirty.Bytes != 5000 || st.Dirty.Files != 1 || st.Dirty.OldestSeconds == nil || *st.Dirty.OldestSeconds <= 0 {
		t.Fatalf("status after a delayed write of 5000 bytes: %+v", st.Dirty)
	}
	g := gauges(t, metricsAddr)
	for name, want := range map[string]float64{"snfs_client_connected": 1, "snfs_client_dirty_bytes": 5000, "snfs_client_dirty_files": 1,
		"snfs_client_permits_held": 0, "snfs_client_cml_records": 0, "snfs_client_conflicts_listed": 0, "snfs_client_recovering": 0} {
		if v, ok := g[name]; !ok || v != want {
			t.Errorf("gauge %s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	if g["snfs_client_dirty_oldest_seconds"] <= 0 {
		t.Errorf("gauge snfs_client_dirty_oldest_seconds = %v, want > 0", g["snfs_client_dirty_oldest_seconds"])
	}
	out, code := runIn(t, bin, "/", "status", m.dir)
	for _, want := range []string{"connection:             connected since ", "not yet on the server:  4.9 KiB (5000 bytes) in 1 file, the oldest written ",
		"write-back permits:     none held (not in use", "modification log:       empty (not in use", "conflicts:              none"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("snfs status: exit %d, lacks %q:\n%s", code, want, out)
		}
	}

	// fsync writes it back.
	f, err := os.OpenFile(m.path("f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if b, err := os.ReadFile(e.path("f")); err != nil || len(b) != len(data) {
		t.Fatalf("the server's f after fsync: %d bytes, %v", len(b), err)
	}
	if st = statusOf(t, bin, m.dir); st.Dirty.Bytes != 0 || st.Dirty.Files != 0 || *st.Dirty.OldestSeconds != 0 {
		t.Fatalf("status after fsync: %+v", st.Dirty)
	}
	if g := gauges(t, metricsAddr); g["snfs_client_dirty_bytes"] != 0 || g["snfs_client_dirty_files"] != 0 {
		t.Errorf("gauges after fsync: dirty bytes %v, files %v", g["snfs_client_dirty_bytes"], g["snfs_client_dirty_files"])
	}

	// The server goes away with a file dirty: disconnected, the dirty data
	// still counted; back: connected again, the restart counted.
	if err := os.WriteFile(m.path("g"), data[:100], 0o644); err != nil {
		t.Fatal(err)
	}
	addr := e.addr
	stopped := time.Now()
	e.stop()
	st = waitStatus(t, bin, m.dir, 10*time.Second, "disconnected", func(st snfsmount.Status) bool { return !st.Connection.Connected })
	t.Logf("disconnected after %v: %q", time.Since(stopped), st.Connection.Reason)
	if st.Connection.Reason == "" || st.Connection.Since.Before(stopped) || st.Dirty.Bytes != 100 || st.Dirty.Files != 1 {
		t.Fatalf("status with the server stopped: %+v", st)
	}
	if g := gauges(t, metricsAddr); g["snfs_client_connected"] != 0 || g["snfs_client_connection_changed_timestamp_seconds"] < float64(stopped.Unix()) {
		t.Errorf("gauges with the server stopped: connected %v, changed at %v (stopped at %v)", g["snfs_client_connected"],
			g["snfs_client_connection_changed_timestamp_seconds"], stopped.Unix())
	}
	if out, code := runIn(t, bin, "/", "status", m.dir); code != 0 || !strings.Contains(out, "connection:             DISCONNECTED since ") {
		t.Errorf("snfs status with the server stopped: exit %d:\n%s", code, out)
	}
	e.nfs = nil
	e.start(addr)
	st = waitStatus(t, bin, m.dir, 30*time.Second, "connected and recovered after the server's restart", func(st snfsmount.Status) bool {
		return st.Connection.Connected && !st.Connection.Recovering && st.Connection.ServerRestarts == 1
	})
	// The recovery after a restart writes dirty files back (docs/mount.md,
	// "Recovery"): it has ended, so they are on the server.
	if b, err := os.ReadFile(e.path("g")); st.Dirty.Bytes != 0 || st.Dirty.Files != 0 || err != nil || len(b) != 100 {
		t.Errorf("after the recovery from the server's restart: status %+v, the server's g %d bytes (%v)", st.Dirty, len(b), err)
	}

	// nfs mode: a write not yet flushed by a close is dirty; snfs mode's
	// figures are n/a. The status is read without starting a process
	// while h is open: the child's close of its copy of the descriptor (at
	// exec) is a FUSE FLUSH, which writes h back.
	nfsMetrics := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	n := startProcMount(t, bin, "127.0.0.1:"+e.dir, append(portArgs(e.port(), e.port()), "--mode=nfs", "--metrics="+nfsMetrics)...)
	w, err := os.Create(n.path("h"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Write(data[:300]); err != nil {
		t.Fatal(err)
	}
	st = statusFromSocket(t, n.dir)
	if st.Mode != snfsmount.NFS || st.SNFS != nil || st.Dirty.OldestSeconds != nil || !st.Connection.Connected || st.Dirty.Bytes != 300 || st.Dirty.Files != 1 {
		t.Fatalf("nfs-mode status with 300 bytes written: %+v", st)
	}
	g = gauges(t, nfsMetrics)
	for name, want := range map[string]float64{"snfs_client_connected": 1, "snfs_client_dirty_bytes": 300, "snfs_client_dirty_files": 1} {
		if v, ok := g[name]; !ok || v != want {
			t.Errorf("nfs mode: gauge %s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	for _, name := range []string{"snfs_client_permits_held", "snfs_client_cml_records", "snfs_client_conflicts_listed", "snfs_client_dirty_oldest_seconds"} {
		if _, ok := g[name]; ok {
			t.Errorf("nfs mode has the snfs-mode gauge %s", name)
		}
	}
	out, code = runIn(t, bin, "/", "status", "--json", n.dir)
	if code != 0 || !strings.Contains(out, `"snfs": null`) || !strings.Contains(out, `"oldest_seconds": null`) {
		t.Errorf("nfs-mode snfs status --json: exit %d, want snfs and the oldest age null:\n%s", code, out)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if st = statusOf(t, bin, n.dir); st.Dirty.Bytes != 0 || st.Dirty.Files != 0 {
		t.Fatalf("nfs-mode status after close: %+v", st.Dirty)
	}
	out, code = runIn(t, bin, "/", "status", n.dir)
	for _, want := range []string{"(nfs mode)", "connection:             connected since ", "write-back permits:     n/a (nfs mode)",
		"modification log:       n/a (nfs mode)", "conflicts:              n/a (nfs mode)"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("nfs-mode snfs status: exit %d, lacks %q:\n%s", code, want, out)
		}
	}

	// Not an snfs mount.
	plain := diskTempDir(t, "snfs-notmnt-")
	out, code = runIn(t, bin, "/", "status", plain)
	if want := "snfs: " + plain + " is not an snfs mount: pass the mount point of an snfs mount\n"; code != 1 || out != want {
		t.Errorf("snfs status on a plain directory: exit %d, %q; want exit 1, %q", code, out, want)
	}
}

// TestMountStatusConflicts: the conflicts a recovery kept (as in
// TestMountSNFSRecoverConflict: the mount killed with a dirty file, which
// another client rewrites meanwhile) are counted and listed by snfs status
// and its gauge, as snfs conflicts lists them.
func TestMountStatusConflicts(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	s := newServeProc(t)
	if err := os.WriteFile(s.path("shared"), randBytes(65, 5000), 0o644); err != nil {
		t.Fatal(err)
	}
	a := startMount(t, s, "", "")
	writeDurable(t, a.path("shared"), randBytes(66, 7000))
	a.kill9()
	nfsRewrite(t, s, "shared", randBytes(67, 9000))
	b := startMount(t, s, a.dir, a.cacheDir)
	names, _ := filepath.Glob(s.path("shared.snfs-conflict-*"))
	if len(names) != 1 {
		t.Fatalf("conflict copies in the export: %q; want one", names)
	}
	bin := snfsBinary(t)
	st := statusOf(t, bin, b.dir)
	if st.SNFS == nil || st.SNFS.Conflicts.Count != 1 || len(st.SNFS.Conflicts.Newest) != 1 ||
		st.SNFS.Conflicts.Newest[0].Name != "shared" || st.SNFS.Conflicts.Newest[0].Conflict != filepath.Base(names[0]) {
		t.Fatalf("snfs status's conflicts: %+v", st.SNFS)
	}
	if n := scrape(t, b.metrics, "snfs_client_conflicts_listed"); n != 1 {
		t.Errorf("snfs_client_conflicts_listed = %v; want 1", n)
	}
	out, code := runIn(t, bin, "/", "status", b.dir)
	if want := "shared saved as " + filepath.Base(names[0]); code != 0 || !strings.Contains(out, "conflicts:              1\n") || !strings.Contains(out, want) {
		t.Errorf("snfs status: exit %d, want 1 conflict and %q:\n%s", code, want, out)
	}
}

// TestMountStatusConcurrent: the status of an snfs-mode mount served in
// this process (under the race detector) is read over and over while
// writers write files, some fsynced, and a short write-back delay writes
// the rest back: every read answers connected, with no negative figure,
// and once the writers are done and the delay has passed it shows nothing
// dirty.
func TestMountStatusConcurrent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	m := newSNFSMount(t, e, "status", "", 20*time.Millisecond)
	stop := make(chan struct{})
	var reader sync.WaitGroup
	reads, sawDirty := 0, false
	reader.Add(1)
	go func() {
		defer reader.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			st, ok := cachemgr.StatusOf(m.v, 5)
			if !ok || !st.Reach.Connected || st.DirtyBytes < 0 || st.DirtyFiles < 0 || st.DirtyOldest < 0 {
				t.Errorf("status while writing: %v %+v", ok, st)
				return
			}
			reads++
			sawDirty = sawDirty || st.DirtyBytes > 0
			time.Sleep(time.Millisecond) // a scrape's pace, not a spin: the machine is shared
		}
	}()
	var writers sync.WaitGroup
	for w := range 3 {
		writers.Add(1)
		go func() {
			defer writers.Done()
			r := rand.New(rand.NewPCG(uint64(w), 26))
			for i := range 15 {
				f, err := os.Create(filepath.Join(m.dir, fmt.Sprintf("w%d-%d", w, i)))
				if err != nil {
					t.Error(err)
					return
				}
				f.Write(randBytes(uint64(w*100+i), 1+r.IntN(64<<10)))
				if r.IntN(2) == 0 {
					f.Sync()
				}
				if err := f.Close(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	writers.Wait()
	close(stop)
	reader.Wait()
	t.Logf("%d status reads, dirty seen: %v", reads, sawDirty)
	if !sawDirty {
		t.Errorf("no status read saw dirty data in %d reads", reads)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, _ := cachemgr.StatusOf(m.v, 5)
		if st.DirtyBytes == 0 && st.DirtyFiles == 0 && st.DirtyOldest == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still dirty 10 s after the writes with a write-back delay of 20 ms: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
