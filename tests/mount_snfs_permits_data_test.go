package tests

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"snfs/metrics"
	"snfs/mount/cachemgr"
)

// The data of files made locally under a write-back permit, online, is
// kept in the mount's local data store and written to the server right
// after the reintegration that makes the files (docs/mount.md "The
// mount's side (--permits=on)").

// callsSince are the server's calls by procedure since before
// (serverCallsByProc), those that changed.
func callsSince(t *testing.T, reg *metrics.Registry, before map[string]float64) map[string]float64 {
	t.Helper()
	diff := map[string]float64{}
	for p, v := range serverCallsByProc(t, reg) {
		if v != before[p] {
			diff[p] = v - before[p]
		}
	}
	return diff
}

// syncDir is an fsync of the directory p.
func syncDir(t *testing.T, p string) {
	t.Helper()
	d, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Fatalf("fsync of %s: %v", p, err)
	}
}

// provDataFiles writes, through path p (a function of a name), the files
// of provDataWant with prefix pre: written in one go, in pieces with a
// reopen and an append, truncated, large (more than one WRITE), empty.
func provDataFiles(t *testing.T, p func(string) string, pre string) map[string][]byte {
	t.Helper()
	rnd := rand.New(rand.NewSource(int64(len(pre))))
	big := make([]byte, 3<<20+7)
	rnd.Read(big)
	want := map[string][]byte{
		pre + "small": []byte("small file"),
		pre + "big":   big,
		pre + "empty": {},
	}
	for _, n := range []string{pre + "small", pre + "big", pre + "empty"} {
		if err := os.WriteFile(p("d/"+n), want[n], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Written, closed, opened again and appended to, then truncated and
	// extended.
	n := pre + "pieces"
	if err := os.WriteFile(p("d/"+n), []byte("first part, "), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p("d/"+n), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("appended, and cut")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Truncate(p("d/"+n), 20); err != nil {
		t.Fatal(err)
	}
	f, err = os.OpenFile(p("d/"+n), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("|end"), 24); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	want[n] = append([]byte("first part, appended"), 0, 0, 0, 0, '|', 'e', 'n', 'd')
	return want
}

// checkFiles checks that path p (a function of a name) reads want's files.
func checkFiles(t *testing.T, who string, read func(string) ([]byte, error), want map[string][]byte) {
	t.Helper()
	for n, w := range want {
		got, err := read("d/" + n)
		if err != nil || !bytes.Equal(got, w) {
			t.Errorf("%s reads d/%s: %d bytes, %v; want %d bytes (%q...)", who, n, len(got), err, len(w), w[:min(len(w), 12)])
		}
	}
}

// TestMountSNFSPermitsDataRecall: files written under A's permit, their
// data in A's local store and nothing on the server, read by another
// mount, and by a libnfs client, right after each made a file in the
// directory (the change recalls A's permit: A reintegrates and writes the
// data before it answers, and the change returns after): every byte,
// large files included, with the mtimes the holder showed.
func TestMountSNFSPermitsDataRecall(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	cat := requireTool(t, "nfs-cat")
	e := newEnv(t, "rw,no_root_squash")
	permitsPre(t, e.path)
	a := newPermitDataMountKept(t, e, "permits-data-recall-a")
	b := newSNFSMount(t, e, "permits-data-recall-b", "", time.Hour)
	if _, err := os.ReadDir(a.path("d")); err != nil {
		t.Fatal(err)
	}
	want := provDataFiles(t, a.path, "x")
	mtimes := map[string]time.Time{}
	for n := range want {
		if _, err := os.Stat(e.path("d/" + n)); !os.IsNotExist(err) {
			t.Fatalf("d/%s on the server before the recall: %v (not made locally?)", n, err)
		}
		fi, err := os.Stat(a.path("d/" + n))
		if err != nil {
			t.Fatal(err)
		}
		mtimes[n] = mtimeOf(fi)
	}
	// A change recalls the permit (docs/protocol.md section 21.4), and
	// returns once A's log and data are in.
	if err := os.WriteFile(b.path("d/fromb"), []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	checkFiles(t, "another mount", func(n string) ([]byte, error) { return os.ReadFile(b.path(n)) }, want)
	checkFiles(t, "the server", func(n string) ([]byte, error) { return os.ReadFile(e.path(n)) }, want)
	for n, mt := range mtimes {
		if fi, err := os.Stat(e.path("d/" + n)); err != nil || !mtimeOf(fi).Equal(mt) {
			t.Errorf("the server's d/%s: %v, %v; want the mtime the mount showed, %v", n, fi, err, mt)
		}
	}
	// Again, the reader a libnfs client.
	want = provDataFiles(t, a.path, "y")
	for n := range want {
		if _, err := os.Stat(e.path("d/" + n)); !os.IsNotExist(err) {
			t.Fatalf("d/%s on the server before the recall: %v (not made locally?)", n, err)
		}
	}
	op := requireLibnfsOp(t)
	c := command(op, "write", libnfsURL(e, e.dir+"/d/fromlibnfs"), "0", "create")
	c.Stdin = bytes.NewReader([]byte("x"))
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("nfs-op write: %v\n%s", err, out)
	}
	checkFiles(t, "libnfs", func(n string) ([]byte, error) {
		return command(cat, libnfsURL(e, e.dir+"/"+n)).Output()
	}, want)
	checkFiles(t, "the holder", func(n string) ([]byte, error) { return os.ReadFile(a.path(n)) }, want)
}

// TestMountSNFSPermitsDataKilled: a mount killed with SIGKILL after files
// written locally were closed, or fsynced and left open: the remount
// reintegrates its log and writes their data; the server has every byte.
func TestMountSNFSPermitsDataKilled(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	s := newServeProc(t)
	permitsPre(t, s.path)
	a := startMount(t, s, "", "", "--permits=on", "--permit-data=on")
	if _, err := os.ReadDir(a.path("d")); err != nil {
		t.Fatal(err)
	}
	want := provDataFiles(t, a.path, "k")
	f, err := os.OpenFile(a.path("d/open"), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("fsynced, still open")); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	want["open"] = []byte("fsynced, still open")
	for n := range want {
		if _, err := os.Stat(s.path("d/" + n)); !os.IsNotExist(err) {
			t.Fatalf("d/%s on the server before the kill: %v (not made locally?)", n, err)
		}
	}
	a.kill9()
	b := startMount(t, s, a.dir, a.cacheDir, "--permits=on", "--permit-data=on")
	checkFiles(t, "the server after the remount", func(n string) ([]byte, error) { return os.ReadFile(s.path(n)) }, want)
	checkFiles(t, "the remount", func(n string) ([]byte, error) { return os.ReadFile(b.path(n)) }, want)
	if ents, err := os.ReadDir(filepath.Join(a.cacheDir, "offline")); err != nil || len(ents) != 0 {
		t.Errorf("local data files left after the remount: %v, %v", ents, err)
	}
}

// TestMountSNFSPermitsDataGone: a file written, renamed and removed before
// the log is sent costs no call, and its data none at the reintegration
// that follows; a file renamed over another made locally has its own data on
// the server (in the batch), the one it replaced no data written; no local
// data file is left behind.
func TestMountSNFSPermitsDataGone(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, reg := keptEnv(t, nil)
	permitsPre(t, e.path)
	cacheDir := diskTempDir(t, "snfs-cache-")
	m := newPermitDataMount(t, e, "permits-data-gone", cacheDir)
	if !cachemgr.SetLogPolicy(m.v, time.Hour, 1<<20) {
		t.Fatal("no modification log")
	}
	if _, err := os.ReadDir(m.path("d")); err != nil {
		t.Fatal(err)
	}
	createClosed(t, m.path("d/first")) // the permit
	syncDir(t, m.path("d"))
	before := serverCallsByProc(t, reg)
	for k := range 20 {
		p := m.path(fmt.Sprintf("d/t%d", k))
		if err := os.WriteFile(p, bytes.Repeat([]byte("temporary "), 1000), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(p, p+".moved"); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(p + ".moved"); err != nil {
			t.Fatal(err)
		}
	}
	syncDir(t, m.path("d"))
	// Their records are sent (the log does not know whether the names
	// renamed to were free on the server: Optimize keeps such a RENAME),
	// their data is not, and nothing goes through the server. (A loaded
	// machine may end the name cache's lease meanwhile: a call or two
	// more, never a WRITE.)
	diff := callsSince(t, reg, before)
	total := 0.0
	for _, v := range diff {
		total += v
	}
	for _, p := range []string{"WRITE", "SETATTR", "COMMIT", "CREATE", "REMOVE", "RENAME"} {
		if diff[p] != 0 {
			t.Errorf("20 files written, renamed and removed cost %v %s calls; want none (%v)", diff[p], p, diff)
		}
	}
	if diff["REINTEGRATE"] == 0 || total > 5 {
		t.Errorf("20 files written, renamed and removed cost %v; want their log sent, a few calls in all", diff)
	}
	// Renamed over a file made locally.
	if err := os.WriteFile(m.path("d/old"), []byte("the old file"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m.path("d/new"), []byte("the new file"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(m.path("d/new"), m.path("d/old")); err != nil {
		t.Fatal(err)
	}
	before = serverCallsByProc(t, reg)
	syncDir(t, m.path("d"))
	diff = callsSince(t, reg, before)
	// The new file's data goes in the batch (a CML_STORE record), the
	// old one's nowhere: one REINTEGRATE, no WRITE.
	if diff["REINTEGRATE"] != 1 || len(diff) != 1 {
		t.Errorf("a file renamed over another made locally: %v; want 1 REINTEGRATE and nothing else", diff)
	}
	if got, err := os.ReadFile(e.path("d/old")); err != nil || string(got) != "the new file" {
		t.Errorf("the server's d/old: %q, %v", got, err)
	}
	if got, err := os.ReadFile(m.path("d/old")); err != nil || string(got) != "the new file" {
		t.Errorf("the mount's d/old: %q, %v", got, err)
	}
	// No data file left behind: those of the files removed and of the
	// one renamed over went with their names.
	if ents, err := os.ReadDir(filepath.Join(cacheDir, "offline")); err != nil || len(ents) != 0 {
		var names []string
		for _, en := range ents {
			names = append(names, en.Name())
		}
		t.Errorf("local data files left: %v, %v", names, err)
	}
}

// TestMountSNFSPermitsDataConcurrent: writers writing, reopening,
// appending to and reading files made locally while the log is sent again
// and again (a directory's fsync) and their data pushed: each file ends
// with what its writer wrote, on the mount and on the server.
func TestMountSNFSPermitsDataConcurrent(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	permitsPre(t, e.path)
	m := newPermitDataMountKept(t, e, "permits-data-concurrent")
	if _, err := os.ReadDir(m.path("d")); err != nil {
		t.Fatal(err)
	}
	const writers, files = 4, 15
	stop := make(chan struct{})
	syncerDone := make(chan struct{})
	go func() {
		defer close(syncerDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if d, err := os.Open(m.path("d")); err == nil {
				d.Sync()
				d.Close()
			}
		}
	}()
	var wg sync.WaitGroup
	want := make([]map[string][]byte, writers)
	for w := range writers {
		want[w] = map[string][]byte{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range files {
				n := fmt.Sprintf("w%d-%d", w, k)
				p := m.path("d/" + n)
				data := bytes.Repeat([]byte(n+" "), 100*(k+1))
				if err := os.WriteFile(p, data, 0o644); err != nil {
					t.Error(err)
					return
				}
				f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := f.Write([]byte("tail")); err != nil {
					t.Error(err)
				}
				f.Close()
				data = append(data, "tail"...)
				if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, data) {
					t.Errorf("the writer reads d/%s back: %d bytes, %v; want %d", n, len(got), err, len(data))
				}
				want[w][n] = data
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-syncerDone
	syncDir(t, m.path("d"))
	for w := range writers {
		checkFiles(t, "the mount", func(n string) ([]byte, error) { return os.ReadFile(m.path(n)) }, want[w])
		checkFiles(t, "the server", func(n string) ([]byte, error) { return os.ReadFile(e.path(n)) }, want[w])
	}
}

// TestMountSNFSPermitsDataTimes: a file made locally, written, its times
// set (utimes, as cp -p and tar do after the data) and its mode changed,
// all locally: after the reintegration the server has its data, its mode
// and the times set, not the time its data was written there.
func TestMountSNFSPermitsDataTimes(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, reg := keptEnv(t, nil)
	permitsPre(t, e.path)
	m := newPermitDataMountKept(t, e, "permits-data-times")
	if _, err := os.ReadDir(m.path("d")); err != nil {
		t.Fatal(err)
	}
	createClosed(t, m.path("d/first")) // the permit
	mt := time.Date(2017, 6, 5, 4, 3, 2, 100000000, time.UTC)
	before := serverCallsByProc(t, reg)
	if err := os.WriteFile(m.path("d/f"), []byte("data, then times"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(m.path("d/f"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(m.path("d/f"), mt, mt); err != nil {
		t.Fatal(err)
	}
	for p, v := range callsSince(t, reg, before) {
		t.Errorf("writing a file made locally and setting its mode and times cost %v %s calls; want none", v, p)
	}
	syncDir(t, m.path("d"))
	fi, err := os.Stat(e.path("d/f"))
	if err != nil {
		t.Fatal(err)
	}
	if !mtimeOf(fi).Equal(mt) || fi.Mode().Perm() != 0o640 || fi.Size() != int64(len("data, then times")) {
		t.Errorf("d/f on the server: mtime %v mode %v size %d; want %v, 0640, %d", mtimeOf(fi), fi.Mode().Perm(), fi.Size(), mt, len("data, then times"))
	}
	if fi, err := os.Stat(m.path("d/f")); err != nil || !mtimeOf(fi).Equal(mt) {
		t.Errorf("d/f on the mount: %v, %v; want mtime %v", fi, err, mt)
	}
}
