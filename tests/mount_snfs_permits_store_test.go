package tests

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"snfs/mount/cachemgr"
	"snfs/snfs1"
	"snfs/state/clientfile"
)

// The data of small files made locally carried in the reintegration as
// CML_STORE records (--permit-data=on; docs/mount.md "--permit-data",
// docs/protocol.md section 21.3): a copy of small files costs its
// REINTEGRATEs alone.

// storeFile is the content of the k-th file of the copy: sizes from a few
// bytes to snfs1.StoreMax, each byte depending on the file.
func storeFile(k, size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(k*31 + i*7)
	}
	return b
}

// TestMountSNFSPermitsDataStoreCopy: 20 small files (the largest
// snfs1.StoreMax bytes) copied into a directory under a permit, some with
// their times set after their data (utimes, as cp -p), then the
// directory's fsync: one REINTEGRATE, no WRITE, COMMIT or SETATTR; the
// server has every byte and the times the mount showed (set, or the last
// write's); another mount reads the data. A file one byte larger than
// snfs1.StoreMax goes by WRITE after the reintegration, as before.
func TestMountSNFSPermitsDataStoreCopy(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, reg := keptEnv(t, nil)
	if err := os.MkdirAll(e.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	m := newPermitDataMountClose(t, e, "permits-data-store", "", clientfile.UntilRecalled)
	if !cachemgr.SetLogPolicy(m.v, time.Hour, 1<<20) {
		t.Fatal("no modification log")
	}
	if _, err := os.ReadDir(m.path("d")); err != nil {
		t.Fatal(err)
	}
	createClosed(t, m.path("d/first")) // the permit
	const n = 20
	set := time.Date(2019, 3, 4, 5, 6, 7, 800000000, time.UTC)
	want := map[string][]byte{}
	for k := range n {
		name := fmt.Sprintf("f%02d", k)
		size := []int{0, 1, 100, 4096, 17000, snfs1.StoreMax}[k%6]
		want[name] = storeFile(k, size)
		if err := os.WriteFile(m.path("d/"+name), want[name], 0o644); err != nil {
			t.Fatal(err)
		}
		if k%3 == 0 {
			if err := os.Chtimes(m.path("d/"+name), set, set.Add(time.Duration(k)*time.Second)); err != nil {
				t.Fatal(err)
			}
		}
	}
	shown := map[string]time.Time{}
	for name := range want {
		fi, err := os.Stat(m.path("d/" + name))
		if err != nil {
			t.Fatal(err)
		}
		shown[name] = mtimeOf(fi)
	}
	before := serverCallsByProc(t, reg)
	syncDir(t, m.path("d"))
	diff := callsSince(t, reg, before)
	t.Logf("calls of the reintegration of %d files: %v", n+1, diff)
	if diff["REINTEGRATE"] < 1 || diff["REINTEGRATE"] > 3 || len(diff) != 1 {
		t.Errorf("the reintegration of %d small files cost %v; want 1 to 3 REINTEGRATEs and nothing else", n+1, diff)
	}
	for name, w := range want {
		got, err := os.ReadFile(e.path("d/" + name))
		if err != nil || !bytes.Equal(got, w) {
			t.Errorf("the server's d/%s: %d bytes, %v; want %d", name, len(got), err, len(w))
			continue
		}
		fi, err := os.Stat(e.path("d/" + name))
		if err != nil {
			t.Fatal(err)
		}
		if !mtimeOf(fi).Equal(shown[name]) {
			t.Errorf("the server's d/%s: mtime %v; the mount showed %v", name, mtimeOf(fi), shown[name])
		}
	}
	for k := 0; k < n; k += 3 {
		name := fmt.Sprintf("f%02d", k)
		if fi, err := os.Stat(e.path("d/" + name)); err != nil || !mtimeOf(fi).Equal(set.Add(time.Duration(k)*time.Second)) {
			t.Errorf("the server's d/%s: %v, %v; want the mtime set, %v", name, fi, err, set.Add(time.Duration(k)*time.Second))
		}
	}
	b := newSNFSMount(t, e, "permits-data-store-b", "", time.Hour)
	for name, w := range want {
		if got, err := os.ReadFile(b.path("d/" + name)); err != nil || !bytes.Equal(got, w) {
			t.Errorf("another mount reads d/%s: %d bytes, %v; want %d", name, len(got), err, len(w))
		}
	}
	// Too large for a STORE: pushed after the reintegration.
	big := storeFile(99, snfs1.StoreMax+1)
	if err := os.WriteFile(m.path("d/big"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	before = serverCallsByProc(t, reg)
	syncDir(t, m.path("d"))
	waitFor(5*time.Second, func() bool { diff = callsSince(t, reg, before); return diff["WRITE"] >= 1 })
	if diff["REINTEGRATE"] != 1 || diff["WRITE"] < 1 {
		t.Errorf("the reintegration of a file of %d bytes cost %v; want 1 REINTEGRATE and its WRITEs", len(big), diff)
	}
	if got, err := os.ReadFile(e.path("d/big")); err != nil || !bytes.Equal(got, big) {
		t.Errorf("the server's d/big: %d bytes, %v; want %d", len(got), err, len(big))
	}
}

// TestMountSNFSPermitsDataStoreBatches: small files whose data add up to
// more than snfs1.ReintegrateStoreMax go in more than one REINTEGRATE (the
// log cuts its batches by their STORE bytes too), and still no WRITE; a
// file written again after being closed is stored with its last data.
func TestMountSNFSPermitsDataStoreBatches(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, reg := keptEnv(t, nil)
	if err := os.MkdirAll(e.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	m := newPermitDataMountClose(t, e, "permits-data-store-batches", "", clientfile.UntilRecalled)
	if !cachemgr.SetLogPolicy(m.v, time.Hour, 1<<20) {
		t.Fatal("no modification log")
	}
	if _, err := os.ReadDir(m.path("d")); err != nil {
		t.Fatal(err)
	}
	createClosed(t, m.path("d/first"))
	n := snfs1.ReintegrateStoreMax/(snfs1.StoreMax-1) + 2
	want := map[string][]byte{}
	for k := range n {
		name := fmt.Sprintf("f%02d", k)
		want[name] = storeFile(k, snfs1.StoreMax-1)
		if err := os.WriteFile(m.path("d/"+name), want[name], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want["f00"] = []byte("written again")
	if err := os.WriteFile(m.path("d/f00"), want["f00"], 0o644); err != nil {
		t.Fatal(err)
	}
	before := serverCallsByProc(t, reg)
	syncDir(t, m.path("d"))
	diff := callsSince(t, reg, before)
	t.Logf("calls of the reintegration of %d files of %d bytes: %v", n+1, snfs1.StoreMax-1, diff)
	if diff["REINTEGRATE"] < 2 || diff["REINTEGRATE"] > 3 || len(diff) != 1 {
		t.Errorf("the reintegration cost %v; want 2 or 3 REINTEGRATEs and nothing else", diff)
	}
	for name, w := range want {
		if got, err := os.ReadFile(e.path("d/" + name)); err != nil || !bytes.Equal(got, w) {
			t.Errorf("the server's d/%s: %d bytes, %v; want %d", name, len(got), err, len(w))
		}
	}
}

// logHolds reports whether a file of the modification log in cacheDir
// holds b.
func logHolds(cacheDir string, b []byte) bool {
	ents, err := os.ReadDir(filepath.Join(cacheDir, "cml"))
	if err != nil {
		return false
	}
	for _, en := range ents {
		if data, err := os.ReadFile(filepath.Join(cacheDir, "cml", en.Name())); err == nil && bytes.Contains(data, b) {
			return true
		}
	}
	return false
}

// TestMountSNFSPermitsDataStoreKilled: a mount killed with SIGKILL after
// its reintegration logged its files' data as CML_STORE records and before
// the server answered (the server is down: the log's plan, records and
// data, is durable, the call unanswered): the remount sends the log again,
// the server has every byte.
func TestMountSNFSPermitsDataStoreKilled(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	s := newServeProc(t)
	permitsPre(t, s.path)
	flags := []string{"--permits=on", "--permit-data=on", "--disconnected=never"}
	a := startMount(t, s, "", "", flags...)
	if _, err := os.ReadDir(a.path("d")); err != nil {
		t.Fatal(err)
	}
	marker := []byte(fmt.Sprintf("stored in the log, then killed %d;", time.Now().UnixNano()))
	want := map[string][]byte{
		"stored":  append(append([]byte{}, marker...), storeFile(1, 30000)...),
		"small":   []byte("small"),
		"empty":   {},
		"largest": storeFile(2, snfs1.StoreMax),
	}
	for n, w := range want {
		if err := os.WriteFile(a.path("d/"+n), w, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.kill9(); err != nil {
		t.Fatal(err)
	}
	synced := make(chan struct{})
	go func() {
		defer close(synced)
		if d, err := os.Open(a.path("d")); err == nil {
			d.Sync() // fails once the mount is killed
			d.Close()
		}
	}()
	if !waitFor(30*time.Second, func() bool { return logHolds(a.cacheDir, marker) }) {
		t.Fatal("the reintegration did not log the file's data as a STORE record")
	}
	a.kill9()
	<-synced
	s.start()
	b := startMount(t, s, a.dir, a.cacheDir, flags...)
	checkFiles(t, "the server after the remount", func(n string) ([]byte, error) { return os.ReadFile(s.path(n)) }, want)
	checkFiles(t, "the remount", func(n string) ([]byte, error) { return os.ReadFile(b.path(n)) }, want)
}
