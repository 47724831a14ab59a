package tests

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"snfs/metrics"
	"snfs/mount/cachemgr"
	"snfs/server"

	"github.com/hanwen/go-fuse/v2/posixtest"
)

// newSNFSMountDelayed is newSNFSMount with delayed close on (closeDelay).
func newSNFSMountDelayed(t *testing.T, e *env, name string, wbDelay, closeDelay time.Duration) *snfsMount {
	t.Helper()
	return newSNFSMountOpts(t, e, name, wbDelay, closeDelay, true)
}

// metricValue is the sum of the samples of the metric family name whose
// label has value.
func metricValue(t *testing.T, reg *metrics.Registry, name, label, value string) float64 {
	t.Helper()
	fams, err := reg.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}

// waitFor polls cond for up to d.
func waitFor(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// TestMountSNFSDelayedClose: open, close, open, close of one file within the
// close delay costs one OPEN and, once the delay has passed, one CLOSE.
func TestMountSNFSDelayedClose(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	reg := metrics.New()
	e.restartWith(func(c *server.Config) { c.Metrics, c.Observer = reg, reg })
	want := randBytes(61, 10000)
	if err := os.WriteFile(e.path("f"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	a := newSNFSMountDelayed(t, e, "A", time.Hour, 1500*time.Millisecond)
	opens0, closes0 := serverCalls(t, reg, "OPEN"), serverCalls(t, reg, "CLOSE")
	st := cachemgr.StatsOf(a.v)
	if got := mustRead(t, a.path("f")); !bytes.Equal(got, want) {
		t.Fatal("first read: different bytes")
	}
	// RELEASE is asynchronous: wait for it to have kept the open.
	if !waitFor(5*time.Second, func() bool { return st.DelayedCloses.Load() == 1 }) {
		t.Fatalf("delayed closes: %d; want 1", st.DelayedCloses.Load())
	}
	if got := mustRead(t, a.path("f")); !bytes.Equal(got, want) {
		t.Fatal("second read: different bytes")
	}
	if !waitFor(5*time.Second, func() bool { return st.DelayedCloses.Load() == 2 }) {
		t.Fatalf("delayed closes: %d; want 2", st.DelayedCloses.Load())
	}
	if n := st.DelayedReopens.Load(); n != 1 {
		t.Errorf("reopens that took over a delayed close: %d; want 1", n)
	}
	if n := serverCalls(t, reg, "OPEN") - opens0; n != 1 {
		t.Errorf("OPENs: %v; want 1", n)
	}
	if n := serverCalls(t, reg, "CLOSE") - closes0; n != 0 {
		t.Errorf("CLOSEs within the delay: %v; want 0", n)
	}
	if !waitFor(10*time.Second, func() bool { return serverCalls(t, reg, "CLOSE")-closes0 >= 1 }) {
		t.Fatal("no CLOSE after the delay")
	}
	time.Sleep(300 * time.Millisecond)
	if n := serverCalls(t, reg, "CLOSE") - closes0; n != 1 {
		t.Errorf("CLOSEs after the delay: %v; want 1", n)
	}
	if n := serverCalls(t, reg, "OPEN") - opens0; n != 1 {
		t.Errorf("OPENs: %v; want 1", n)
	}
}

// TestMountSNFSDelayedCloseUnmount: unmount sends the pending CLOSE.
func TestMountSNFSDelayedCloseUnmount(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	reg := metrics.New()
	e.restartWith(func(c *server.Config) { c.Metrics, c.Observer = reg, reg })
	if err := os.WriteFile(e.path("f"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := newSNFSMountDelayed(t, e, "A", time.Hour, time.Hour)
	closes0 := serverCalls(t, reg, "CLOSE")
	mustRead(t, a.path("f"))
	st := cachemgr.StatsOf(a.v)
	if !waitFor(5*time.Second, func() bool { return st.DelayedCloses.Load() == 1 }) {
		t.Fatalf("delayed closes: %d; want 1", st.DelayedCloses.Load())
	}
	if n := serverCalls(t, reg, "CLOSE") - closes0; n != 0 {
		t.Errorf("CLOSEs before unmount: %v; want 0", n)
	}
	a.unmount(t)
	if n := serverCalls(t, reg, "CLOSE") - closes0; n != 1 {
		t.Errorf("CLOSEs after unmount: %v; want 1", n)
	}
}

// TestMountSNFSDelayedCloseCallback: A wrote a file and holds only a delayed
// close of it; B opens it for writing: A writes back and answers
// CB_TREAT_AS_CLOSED, and B's OPEN is granted caching (B's write stays in
// B's cache, not on the server).
func TestMountSNFSDelayedCloseCallback(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	reg := metrics.New()
	e.restartWith(func(c *server.Config) { c.Metrics, c.Observer = reg, reg })
	serverFiles(t, e, "f")
	a := newSNFSMountDelayed(t, e, "A", time.Hour, time.Hour)
	b := newSNFSMount(t, e, "B", "", time.Hour)
	dataA := randBytes(62, 50000)
	if err := os.WriteFile(a.path("f"), dataA, 0o644); err != nil {
		t.Fatal(err)
	}
	st := cachemgr.StatsOf(a.v)
	if !waitFor(5*time.Second, func() bool { return st.DelayedCloses.Load() == 1 }) {
		t.Fatalf("delayed closes: %d; want 1", st.DelayedCloses.Load())
	}
	tac0 := metricValue(t, reg, "snfs_server_consist_callback_outcomes_total", "outcome", "TREAT_AS_CLOSED")
	f, err := os.OpenFile(b.path("f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(dataA))
	if _, err := f.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, dataA) {
		t.Fatal("B reads different bytes than A wrote")
	}
	if n := metricValue(t, reg, "snfs_server_consist_callback_outcomes_total", "outcome", "TREAT_AS_CLOSED") - tac0; n < 1 {
		t.Errorf("TREAT_AS_CLOSED callback outcomes: %v; want >= 1", n)
	}
	if n := st.TreatedAsClosed.Load(); n != 1 {
		t.Errorf("A's callbacks answered TREAT_AS_CLOSED: %d; want 1", n)
	}
	// B caches: its write stays in its cache directory.
	dataB := randBytes(63, 4096)
	stamp := exportStamp(t, e.path("f"))
	if _, err := f.WriteAt(dataB, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if exportStamp(t, e.path("f")) != stamp {
		t.Error("B's write reached the server at once: its OPEN was not granted caching")
	}
	if n := b.v.Stats().Writes.Load(); n != 0 {
		t.Errorf("B sent %d WRITEs; want 0 (caching)", n)
	}
}

// TestMountSNFSPosixDelayedClose is TestMountSNFSPosix with delayed close on.
func TestMountSNFSPosixDelayedClose(t *testing.T) {
	// Serial (no t.Parallel): posixtest's FdLeak counts the process's open descriptors.
	requireFUSE(t)
	names := make([]string, 0, len(posixtest.All))
	for n := range posixtest.All {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			if why, ok := knownSNFSFailure(name); ok {
				t.Skip("known failure: " + why)
			}
			e := newEnv(t, "rw,no_root_squash")
			m := newSNFSMountDelayed(t, e, "posix", time.Hour, 2*time.Second)
			posixtest.All[name](t, m.dir)
		})
	}
}

// TestMountSNFSFsxDelayedClose: the random tester on an snfs-mode mount with
// delayed close on (its reopens take over delayed closes), each check
// comparing, after an fsync, the export's file with the model.
func TestMountSNFSFsxDelayedClose(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	serverFiles(t, e, "fsx.dat")
	m := newSNFSMountDelayed(t, e, "fsx", time.Hour, 2*time.Second)
	ops := fsxOps(t)
	c := fsxChildConfig{Cfg: fsxConfig(filepath.Join(m.dir, "fsx.dat"), ops, fsxSeed(t, 5)),
		Compare: []string{e.path("fsx.dat")}}
	fsxCheck(t, c, func() { t.Error("unexpected restart request") })
	st := cachemgr.StatsOf(m.v)
	t.Logf("delayed closes %d, reopens without OPEN %d", st.DelayedCloses.Load(), st.DelayedReopens.Load())
}
