package tests

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"snfs/consist"
	"snfs/metrics"
	snfsmount "snfs/mount"
	"snfs/mount/cachemgr"
	"snfs/mount/fusefs"
	"snfs/nfs3"
	"snfs/server"
	"snfs/state/clientfile"
)

// Opens kept until recalled (docs/protocol.md 10, docs/mount.md "Opens kept
// until recalled"; issue 26 item 2).

// newSNFSMountKept mounts e's export in snfs mode with opens kept until
// recalled, at most keptOpens files (0: no bound), a cache directory of at
// most cacheSize bytes (0: no bound) and no passthrough (every reopen reaches
// the mount, which counts it).
func newSNFSMountKept(t *testing.T, e *env, name string, keptOpens int, cacheSize int64) *snfsMount {
	t.Helper()
	return newSNFSMountWith(t, e, name, "", snfsmount.Config{CacheSize: cacheSize, WriteBackDelay: time.Hour,
		CloseDelay: clientfile.UntilRecalled, KeptOpens: keptOpens}, fusefs.Options{})
}

// allServerCalls is the number of calls of every program and procedure the
// server served.
func allServerCalls(t *testing.T, reg *metrics.Registry) float64 {
	t.Helper()
	fams, err := reg.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range fams {
		if f.GetName() == "snfs_server_rpc_total" {
			for _, m := range f.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

// keptEnv is an env whose server counts its calls in reg.
func keptEnv(t *testing.T, tweak func(*server.Config)) (*env, *metrics.Registry) {
	e := newEnv(t, "rw,no_root_squash")
	reg := metrics.New()
	e.restartWith(func(c *server.Config) {
		c.Metrics, c.Observer = reg, reg
		if tweak != nil {
			tweak(c)
		}
	})
	return e, reg
}

// waitKept waits until m's releases have kept n opens (RELEASE is
// asynchronous to close(2)).
func waitKept(t *testing.T, m *snfsMount, n uint64) {
	t.Helper()
	st := cachemgr.StatsOf(m.v)
	if !waitFor(5*time.Second, func() bool { return st.DelayedCloses.Load() >= n }) {
		t.Fatalf("kept opens: %d; want %d", st.DelayedCloses.Load(), n)
	}
}

// TestMountSNFSKeptReopen: a file the mount wrote, and one it read, are
// reopened (read, and the created one written) many times, long after the
// old close delay, with no OPEN and no CLOSE; a write open of the file kept
// only for reading needs the server (one OPEN).
func TestMountSNFSKeptReopen(t *testing.T) {
	t.Parallel()
	e, reg := keptEnv(t, nil)
	want := randBytes(261, 20000)
	if err := os.WriteFile(e.path("read"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	serverFiles(t, e, "created")
	a := newSNFSMountKept(t, e, "A", 0, 0)
	created := randBytes(262, 30000)
	if err := os.WriteFile(a.path("created"), created, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, a.path("read")); !bytes.Equal(got, want) {
		t.Fatal("first read: different bytes")
	}
	waitKept(t, a, 2)
	time.Sleep(2500 * time.Millisecond) // past the old close delay (2 s)
	opens0, closes0, all0 := serverCalls(t, reg, "OPEN"), serverCalls(t, reg, "CLOSE"), allServerCalls(t, reg)
	st := cachemgr.StatsOf(a.v)
	reopens0 := st.DelayedReopens.Load()
	const rounds = 20
	// Each reopen waits for the release before it (RELEASE reaches the
	// mount after close(2) returns): an open while the previous one is
	// still open is not a reopen of a kept open.
	kept := st.DelayedCloses.Load()
	for k := range rounds {
		if got := mustRead(t, a.path("read")); !bytes.Equal(got, want) {
			t.Fatalf("round %d: the kept file reads different bytes", k)
		}
		kept++
		waitKept(t, a, kept)
		if got := mustRead(t, a.path("created")); !bytes.Equal(got, created) {
			t.Fatalf("round %d: the created file reads different bytes", k)
		}
		kept++
		waitKept(t, a, kept)
		f, err := os.OpenFile(a.path("created"), os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte{byte(k)}, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		created[0] = byte(k)
		kept++
		waitKept(t, a, kept)
	}
	if !waitFor(5*time.Second, func() bool { return st.DelayedReopens.Load()-reopens0 == 3*rounds }) {
		t.Errorf("opens that took a kept open over: %d; want %d", st.DelayedReopens.Load()-reopens0, 3*rounds)
	}
	if n := serverCalls(t, reg, "OPEN") - opens0; n != 0 {
		t.Errorf("OPENs for %d reopens of kept files: %v; want 0", 3*rounds, n)
	}
	if n := serverCalls(t, reg, "CLOSE") - closes0; n != 0 {
		t.Errorf("CLOSEs: %v; want 0", n)
	}
	t.Logf("server calls of any kind during %d reopens: %v", 3*rounds, allServerCalls(t, reg)-all0)

	// A write open of the file kept for reading: an OPEN_WRITE.
	f, err := os.OpenFile(a.path("read"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if n := serverCalls(t, reg, "OPEN") - opens0; n != 1 {
		t.Errorf("OPENs for a write open of a file kept for reading: %v; want 1", n)
	}
}

// TestMountSNFSKeptWriteShare: A keeps a file it wrote (its data only in A's
// cache); B opens it for writing: A is called back, writes back and hands
// the kept open back, so B reads A's bytes and caches; B writes; A, reopening
// later, reads B's bytes. The same with the stock NFSv3 client's WRITE and a
// process on the server writing the exported file (protocol.md section 14).
func TestMountSNFSKeptWriteShare(t *testing.T) {
	t.Parallel()
	e, reg := keptEnv(t, nil)
	serverFiles(t, e, "f", "plain", "local")
	a := newSNFSMountKept(t, e, "A", 0, 0)
	b := newSNFSMount(t, e, "B", "", time.Hour)
	data := map[string][]byte{}
	for k, name := range []string{"f", "plain", "local"} {
		data[name] = randBytes(uint64(263+k), 50000)
		if err := os.WriteFile(a.path(name), data[name], 0o644); err != nil {
			t.Fatal(err)
		}
		waitKept(t, a, uint64(k+1))
		if n := exportSize(t, e.path(name)); n != 0 {
			t.Fatalf("the export has %d bytes of A's %s; want none yet (cached)", n, name)
		}
	}
	st := cachemgr.StatsOf(a.v)
	f, err := os.OpenFile(b.path("f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	dataA := data["f"]
	got := make([]byte, len(dataA))
	if _, err := f.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, dataA) {
		t.Fatal("B reads different bytes than A wrote")
	}
	if n := st.TreatedAsClosed.Load(); n != 1 {
		t.Errorf("A's callbacks answered CB_TREAT_AS_CLOSED: %d; want 1", n)
	}
	dataB := randBytes(266, 4096)
	if _, err := f.WriteAt(dataB, 100); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	copy(dataA[100:], dataB)
	opens0 := serverCalls(t, reg, "OPEN")
	if got := mustRead(t, a.path("f")); !bytes.Equal(got, dataA) {
		t.Fatal("A, reopening after B's write, reads different bytes than B's")
	}
	if n := serverCalls(t, reg, "OPEN") - opens0; n < 1 {
		t.Errorf("A's reopen after handing its kept open back sent %v OPENs; want one", n)
	}

	// The stock NFSv3 client writes: A's kept open is called back first
	// (A writes back before the WRITE is applied: the bytes around it are
	// A's).
	ctx := context.Background()
	fh := e.lookup(e.root, "plain")
	plain := []byte("written by a plain NFSv3 client")
	if _, err := e.nfs.Write(ctx, fh, 10, plain, nfs3.FileSync); err != nil {
		t.Fatal(err)
	}
	copy(data["plain"][10:], plain)
	if got := mustRead(t, a.path("plain")); !bytes.Equal(got, data["plain"]) {
		t.Fatal("A, reopening after a plain NFSv3 WRITE, reads different bytes")
	}
	if n := st.TreatedAsClosed.Load(); n != 2 {
		t.Errorf("A's callbacks answered CB_TREAT_AS_CLOSED: %d; want 2", n)
	}

	// A process on the server writes the exported file (section 14.1).
	local := []byte("written on the server")
	lf, err := os.OpenFile(e.path("local"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lf.WriteAt(local, 2000); err != nil {
		t.Fatal(err)
	}
	if err := lf.Close(); err != nil {
		t.Fatal(err)
	}
	copy(data["local"][2000:], local)
	if got := mustRead(t, e.path("local")); !bytes.Equal(got, data["local"]) {
		t.Fatal("the process on the server reads different bytes than A wrote and it wrote")
	}
	if !waitFor(5*time.Second, func() bool { return bytes.Equal(mustRead(t, a.path("local")), data["local"]) }) {
		t.Fatal("A does not read what a process on the server wrote")
	}
	if n := st.TreatedAsClosed.Load(); n != 3 {
		t.Errorf("A's callbacks answered CB_TREAT_AS_CLOSED: %d; want 3", n)
	}
}

// TestMountSNFSKeptRestart: the server restarts while A keeps opens of a
// file it wrote (not written back) and of a file it read: the reclaim
// reports them, A's reopens after it cost no OPEN, the dirty data reaches
// the server, and B's write open still calls A back first.
func TestMountSNFSKeptRestart(t *testing.T) {
	t.Parallel()
	e, reg := keptEnv(t, nil)
	want := randBytes(265, 10000)
	if err := os.WriteFile(e.path("read"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	serverFiles(t, e, "dirty")
	a := newSNFSMountKept(t, e, "A", 0, 0)
	dirty := randBytes(266, 30000)
	if err := os.WriteFile(a.path("dirty"), dirty, 0o644); err != nil {
		t.Fatal(err)
	}
	mustRead(t, a.path("read"))
	waitKept(t, a, 2)
	reg = metrics.New() // the restarted server registers its metrics again
	e.restartWith(func(c *server.Config) { c.Metrics, c.Observer = reg, reg })
	os.Stat(a.path("other")) // the next call reconnects; its REGISTER shows the restart
	st := cachemgr.StatsOf(a.v)
	// Written back after the reclaim (a look at the exported file now
	// would be a local process's open: a callback, section 14.1).
	if !waitFor(20*time.Second, func() bool { return st.WriteBacks.Load() >= 1 }) {
		t.Fatal("the dirty data was not written back to the restarted server")
	}
	if n := st.Reclaimed.Load(); n < 2 {
		t.Errorf("files reclaimed: %d; want 2", n)
	}
	opens0 := serverCalls(t, reg, "OPEN")
	if got := mustRead(t, a.path("read")); !bytes.Equal(got, want) {
		t.Fatal("the kept file reads different bytes after the restart")
	}
	if got := mustRead(t, a.path("dirty")); !bytes.Equal(got, dirty) {
		t.Fatal("the kept dirty file reads different bytes after the restart")
	}
	if n := serverCalls(t, reg, "OPEN") - opens0; n != 0 {
		t.Errorf("OPENs of reclaimed kept files: %v; want 0", n)
	}
	waitKept(t, a, 4)
	if got := mustRead(t, e.path("dirty")); !bytes.Equal(got, dirty) {
		t.Fatal("the server's file does not hold what A wrote before the restart")
	}
	// The reclaimed kept write open is the server's: B's write open calls
	// A back, and B reads what A wrote after the restart.
	more := randBytes(267, 3000)
	f, err := os.OpenFile(a.path("dirty"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(more, 500); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	copy(dirty[500:], more)
	b := newSNFSMount(t, e, "B", "", time.Hour)
	g, err := os.OpenFile(b.path("dirty"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(dirty))
	if _, err := g.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	g.Close()
	if !bytes.Equal(got, dirty) {
		t.Fatal("B reads different bytes than A wrote after the restart")
	}
}

// TestMountSNFSKeptBound: with a bound of 3 files, the 4th and 5th kept
// files give the least recently kept back with CLOSE; a removed file's kept
// open goes too.
func TestMountSNFSKeptBound(t *testing.T) {
	t.Parallel()
	e, reg := keptEnv(t, nil)
	serverFiles(t, e, numbered("f", 5)...)
	a := newSNFSMountKept(t, e, "A", 3, 0)
	st := cachemgr.StatsOf(a.v)
	for k := range 5 {
		if err := os.WriteFile(a.path(fmt.Sprint("f", k)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		waitKept(t, a, uint64(k+1))
	}
	// Given back at the end of the RELEASE that went over the bound, after
	// that release counted its own open kept.
	waitFor(5*time.Second, func() bool { return serverCalls(t, reg, "CLOSE") >= 2 })
	time.Sleep(100 * time.Millisecond)
	if n := st.KeptGivenBack.Load(); n != 2 {
		t.Errorf("files given back over the bound: %d; want 2", n)
	}
	if n := serverCalls(t, reg, "CLOSE"); n != 2 {
		t.Errorf("CLOSEs: %v; want 2 (f0 and f1)", n)
	}
	// f0 was given back: its reopen OPENs; f4's does not.
	opens0 := serverCalls(t, reg, "OPEN")
	mustRead(t, a.path("f4"))
	if n := serverCalls(t, reg, "OPEN") - opens0; n != 0 {
		t.Errorf("reopen of the most recently kept file: %v OPENs; want 0", n)
	}
	mustRead(t, a.path("f0"))
	if n := serverCalls(t, reg, "OPEN") - opens0; n != 1 {
		t.Errorf("reopen of a file given back: %v OPENs; want 1", n)
	}
	// f0 kept again went over the bound: f2 was given back; f3, f4, f0
	// are kept.
	waitKept(t, a, 7)
	if !waitFor(5*time.Second, func() bool { return serverCalls(t, reg, "CLOSE") == 3 }) || st.KeptGivenBack.Load() != 3 {
		t.Fatalf("after f0 kept again: %v CLOSEs, %d given back; want 3, 3", serverCalls(t, reg, "CLOSE"), st.KeptGivenBack.Load())
	}
	if err := os.Remove(a.path("f3")); err != nil {
		t.Fatal(err)
	}
	if n := st.KeptGivenBack.Load(); n != 4 {
		t.Errorf("files given back after f3's removal: %d; want 4", n)
	}
	if n := serverCalls(t, reg, "CLOSE"); n != 4 {
		t.Errorf("CLOSEs after f3's removal: %v; want 4", n)
	}
}

// TestMountSNFSKeptEvicted: a file whose cached data the cache directory
// evicts gives its kept open back (the write-back loop's next tick).
func TestMountSNFSKeptEvicted(t *testing.T) {
	t.Parallel()
	e, reg := keptEnv(t, nil)
	const size = 100 << 10
	for k := range 4 {
		if err := os.WriteFile(e.path(fmt.Sprint("f", k)), randBytes(uint64(270+k), size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a := newSNFSMountKept(t, e, "A", 0, 2*size+size/2)
	st := cachemgr.StatsOf(a.v)
	for k := range 4 {
		mustRead(t, a.path(fmt.Sprint("f", k)))
		waitKept(t, a, uint64(k+1))
	}
	// The cache holds at most two of them: f0 and f1 were evicted.
	if !waitFor(10*time.Second, func() bool { return st.KeptGivenBack.Load() >= 2 }) {
		t.Fatalf("files given back at eviction: %d; want 2", st.KeptGivenBack.Load())
	}
	if n := serverCalls(t, reg, "CLOSE"); n < 2 {
		t.Errorf("CLOSEs: %v; want 2", n)
	}
	opens0 := serverCalls(t, reg, "OPEN")
	mustRead(t, a.path("f3"))
	if n := serverCalls(t, reg, "OPEN") - opens0; n != 0 {
		t.Errorf("reopen of a file still cached: %v OPENs; want 0", n)
	}
}

// TestMountSNFSKeptRelinquish: a server table of 8 entries fills with A's
// kept opens; the server asks A to RELINQUISH idle ones, and A answers
// CB_TREAT_AS_CLOSED (after writing back): A goes on opening new files.
func TestMountSNFSKeptRelinquish(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	// Idle by the server's clock, which the test moves forward instead of
	// waiting.
	clock := new(consist.OffsetClock)
	e, _ := keptEnv(t, func(c *server.Config) {
		c.Table.MaxEntries, c.Table.RelinquishIdle = 8, 100*time.Millisecond
		c.Clock = clock
	})
	serverFiles(t, e, numbered("f", 16)...)
	a := newSNFSMountKept(t, e, "A", 0, 0)
	st := cachemgr.StatsOf(a.v)
	for k := range 16 {
		want := randBytes(uint64(280+k), 1000)
		if err := os.WriteFile(a.path(fmt.Sprint("f", k)), want, 0o644); err != nil {
			t.Fatalf("file %d: %v", k, err)
		}
		if got := mustRead(t, a.path(fmt.Sprint("f", k))); !bytes.Equal(got, want) {
			t.Fatalf("file %d reads different bytes", k)
		}
		clock.Advance(150 * time.Millisecond) // idle past RelinquishIdle
	}
	if n := st.TreatedAsClosed.Load(); n < 1 {
		t.Errorf("A's answers CB_TREAT_AS_CLOSED: %d; want some (RELINQUISH of a full table)", n)
	}
	// Each relinquished file was written back before the answer.
	onServer := 0
	for k := range 16 {
		if len(mustRead(t, e.path(fmt.Sprint("f", k)))) == 1000 {
			onServer++
		}
	}
	if n := st.TreatedAsClosed.Load(); uint64(onServer) < n {
		t.Errorf("files written back: %d; fewer than the %d relinquished", onServer, n)
	}
}

// TestMountSNFSKeptUnmount: unmount CLOSEs every kept open (several at a
// time), each once.
func TestMountSNFSKeptUnmount(t *testing.T) {
	t.Parallel()
	e, reg := keptEnv(t, nil)
	serverFiles(t, e, numbered("f", 40)...)
	a := newSNFSMountKept(t, e, "A", 0, 0)
	const n = 40
	for k := range n {
		if err := os.WriteFile(a.path(fmt.Sprint("f", k)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	waitKept(t, a, n)
	if c := serverCalls(t, reg, "CLOSE"); c != 0 {
		t.Fatalf("CLOSEs before unmount: %v; want 0", c)
	}
	a.unmount(t)
	if c := serverCalls(t, reg, "CLOSE"); c != n {
		t.Errorf("CLOSEs after unmount: %v; want %d", c, n)
	}
}

// TestMountSNFSKeptSharedOpens: opens of a file the mount has open already
// in the same mode (another process's, or the next open arriving before the
// kernel's RELEASE of the previous one) share that open: back-to-back
// reopens and opens beside a held one send no OPEN and no CLOSE.
func TestMountSNFSKeptSharedOpens(t *testing.T) {
	t.Parallel()
	e, reg := keptEnv(t, nil)
	want := randBytes(290, 8000)
	if err := os.WriteFile(e.path("f"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	a := newSNFSMountKept(t, e, "A", 0, 0)
	mustRead(t, a.path("f"))
	waitKept(t, a, 1)
	opens0, closes0 := serverCalls(t, reg, "OPEN"), serverCalls(t, reg, "CLOSE")
	held, err := os.Open(a.path("f"))
	if err != nil {
		t.Fatal(err)
	}
	for k := range 50 {
		if got := mustRead(t, a.path("f")); !bytes.Equal(got, want) {
			t.Fatalf("read %d: different bytes", k)
		}
	}
	held.Close()
	for k := range 50 { // back to back: RELEASEs may come after the next open
		if got := mustRead(t, a.path("f")); !bytes.Equal(got, want) {
			t.Fatalf("read %d: different bytes", k)
		}
	}
	st := cachemgr.StatsOf(a.v)
	if !waitFor(5*time.Second, func() bool { return st.DelayedCloses.Load() >= 2 }) {
		t.Fatal("the open was not kept again")
	}
	if n := serverCalls(t, reg, "OPEN") - opens0; n != 0 {
		t.Errorf("OPENs: %v; want 0", n)
	}
	if n := serverCalls(t, reg, "CLOSE") - closes0; n != 0 {
		t.Errorf("CLOSEs: %v; want 0", n)
	}
	if st.SharedOpens.Load() < 50 {
		t.Errorf("shared opens: %d; want at least 50 (beside the held one)", st.SharedOpens.Load())
	}
	// Another mount's write open still calls A back: A's opens are all
	// closed by now, so it hands the kept one back.
	b := newSNFSMount(t, e, "B", "", time.Hour)
	if err := os.WriteFile(b.path("f"), []byte("B"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, a.path("f")); string(got) != "B" {
		t.Fatalf("A reads %d bytes after B's rewrite; want B's", len(got))
	}
}

// TestMountSNFSPosixKept is TestMountSNFSPosix with opens kept until
// recalled (and shared).
func TestMountSNFSPosixKept(t *testing.T) {
	// Serial (no t.Parallel): posixtest's FdLeak counts the process's open descriptors.
	runPosix(t, func(t *testing.T, e *env) string { return newSNFSMountKept(t, e, "posix", 0, 0).dir }, knownSNFSFailure)
}

// TestMountFsxSNFSKept: TestMountFsxSNFS with opens kept until recalled
// (every check's read of the export directory is a local process's open: a
// callback to the kept open, section 14.1).
func TestMountFsxSNFSKept(t *testing.T) {
	t.Parallel()
	testMountFsx(t, fsxSNFSKept, 7)
}

// TestMountFsxSNFSKeptTwoMounts: TestMountFsxSNFSTwoMounts with opens kept
// until recalled on both mounts: each check's open on the other mount
// recalls the writer's kept open.
func TestMountFsxSNFSKeptTwoMounts(t *testing.T) {
	t.Parallel()
	testMountFsxTwoMounts(t, fsxSNFSKept, 8)
}
