package tests

// The tests of permits whose files made locally keep their data locally
// (--permit-data=on, experimental: docs/mount.md "The data of a regular
// file made locally stays local"); their counterparts without it, in
// mount_snfs_permits_mkdir_test.go and mount_snfs_permits_open_test.go,
// check the default.

import (
	"fmt"
	"os"
	"testing"
	"time"

	"snfs/metrics"
	"snfs/mount/cachemgr"
	"snfs/server"
	"snfs/state/clientfile"
)

// leasedEnv is keptEnv whose server's callback timeout is a minute, for
// the tests that count the calls a mount's steps cost: its name cache's
// lease (half the callback timeout since a call was answered) then lasts
// the test, whose counts took in the NULL that renews it after 2.5 s
// without a call (a step with no call takes that long on a loaded
// machine: CI). No callback goes unanswered in these tests: the longer
// timeout changes nothing else.
func leasedEnv(t *testing.T) (*env, *metrics.Registry) {
	t.Helper()
	return keptEnv(t, func(c *server.Config) { c.Table.CallbackTimeout = time.Minute })
}

// TestMountSNFSPermitsDataCreateLocal: with --permits=on, 1,000 create, close
// and unlink of a file in a listed directory cost fewer than 20 calls, no
// CREATE or REMOVE among them; a file made and kept is seen by the mount at
// once (empty), reaches the server at the directory's fsync; data written
// to a file made locally stays local, and another mount reads it once its
// change in the directory recalled the permit.
func TestMountSNFSPermitsDataCreateLocal(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, reg := leasedEnv(t)
	if err := os.MkdirAll(e.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	m := newPermitDataMountKept(t, e, "permits-data-create") // no reintegration by age meanwhile (the loop takes seconds on a loaded machine)
	if _, err := os.ReadDir(m.path("d")); err != nil {
		t.Fatal(err)
	}
	before := allServerCalls(t, reg)
	byProc := serverCallsByProc(t, reg)
	const n = 1000
	for k := range n {
		p := m.path(fmt.Sprintf("d/f%d", k%7))
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.OpenFile(m.path("d/kept"), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	if k, err := f.Read(make([]byte, 8)); k != 0 {
		t.Errorf("a read of the new file: %d bytes, %v", k, err)
	}
	f.Close()
	calls := allServerCalls(t, reg) - before
	after := serverCallsByProc(t, reg)
	diff := map[string]float64{}
	for p, v := range after {
		if v != byProc[p] {
			diff[p] = v - byProc[p]
		}
	}
	t.Logf("calls: %v", diff)
	if d := diff["CREATE"] + diff["REMOVE"]; d != 0 {
		t.Errorf("%v CREATE/REMOVE calls under the permit", d)
	}
	if calls >= 20 {
		t.Errorf("%d create/close/unlink cost %v calls: %v; want fewer than 20", n, calls, diff)
	}
	if _, err := os.Lstat(e.path("d/kept")); !os.IsNotExist(err) {
		t.Errorf("d/kept on the server before the fsync: %v (not made locally?)", err)
	}
	if fi, err := os.Lstat(m.path("d/kept")); err != nil || fi.Size() != 0 || fi.Mode().Perm() != 0o640 || !fi.Mode().IsRegular() {
		t.Errorf("d/kept on the mount: %v, %v", fi, err)
	}
	// Data written to a file made locally: kept locally (docs/mount.md
	// "The data of a regular file made locally stays local").
	if err := os.WriteFile(m.path("d/data"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(m.path("d/data")); err != nil || string(got) != "hello" {
		t.Errorf("d/data on the mount: %q, %v", got, err)
	}
	if _, err := os.Lstat(e.path("d/kept")); !os.IsNotExist(err) {
		t.Errorf("d/kept on the server after a write to d/data: %v (the log sent?)", err)
	}
	// Another mount's change recalls the permit: the log and the data
	// are in when it returns.
	b := newSNFSMount(t, e, "permits-data-create-b", "", time.Hour)
	if err := os.WriteFile(b.path("d/fromb"), []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(b.path("d/data")); err != nil || string(got) != "hello" {
		t.Errorf("another mount reads d/data: %q, %v", got, err)
	}
	if err := os.Remove(b.path("d/fromb")); err != nil {
		t.Fatal(err)
	}
	dir, err := os.Open(m.path("d"))
	if err != nil {
		t.Fatal(err)
	}
	if err := dir.Sync(); err != nil {
		t.Fatalf("fsync of the directory: %v", err)
	}
	dir.Close()
	if left, err := os.ReadDir(e.path("d")); err != nil || len(left) != 2 {
		t.Errorf("the server's d: %v, %v; want data and kept", left, err)
	}
}

// TestMountSNFSPermitsDataCopyCalls: a copy of files into a directory held
// under a permit (Andrew's Copy phase: create, write, close, one file after
// another) costs no call: the files' data stays in the mount's local data
// store, and reads back (on the mount, and after being opened again for
// writing) with no call either. The directory's fsync sends the log with
// the files' data and times in it (CML_STORE records), one REINTEGRATE,
// nothing more: the new files' attributes come with its reply (no GETATTR
// of them), the directory's cached entry is pointed at the real handle (no
// listing of the directory again), and the directory's attributes after
// the batch come with the reply too. Every file then reads back from
// another mount, and keeps on this one the inode number it was made with.
func TestMountSNFSPermitsDataCopyCalls(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, reg := leasedEnv(t)
	if err := os.MkdirAll(e.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	m := newPermitDataMountClose(t, e, "permits-data-copy", "", clientfile.UntilRecalled)
	if !cachemgr.SetLogPolicy(m.v, time.Hour, 1<<20) {
		t.Fatal("no modification log")
	}
	if _, err := os.ReadDir(m.path("d")); err != nil {
		t.Fatal(err)
	}
	// The first file: the permit, and the directory's attributes once.
	if err := os.WriteFile(m.path("d/first"), []byte("first"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := serverCallsByProc(t, reg)
	const n = 40
	for k := range n {
		if err := os.WriteFile(m.path(fmt.Sprintf("d/f%02d", k)), []byte(fmt.Sprintf("data %d", k)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	after := serverCallsByProc(t, reg)
	diff := map[string]float64{}
	for p, v := range after {
		if v != before[p] {
			diff[p] = v - before[p]
		}
	}
	t.Logf("calls for %d files: %v", n, diff)
	if diff["LISTDIR"] != 0 || diff["LOOKUP"] != 0 || diff["GETATTR"] != 0 {
		t.Errorf("%d files copied in cost LISTDIR %v, LOOKUP %v, GETATTR %v; want none",
			n, diff["LISTDIR"], diff["LOOKUP"], diff["GETATTR"])
	}
	for p, v := range diff {
		t.Errorf("%d files copied in cost %v %s calls; want none", n, v, p)
	}
	// Reading back what the mount wrote (Andrew's ReadAll) costs nothing:
	// the local data.
	before = serverCallsByProc(t, reg)
	for k := range n {
		name := fmt.Sprintf("d/f%02d", k)
		want := fmt.Sprintf("data %d", k)
		if got, err := os.ReadFile(m.path(name)); err != nil || string(got) != want {
			t.Errorf("the mount reads %s: %q, %v", name, got, err)
		}
	}
	// A file made locally, closed, then opened again by name for writing,
	// written and read back: local too.
	for k := range 4 {
		name := m.path(fmt.Sprintf("d/r%d", k))
		f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		if err := os.WriteFile(name, []byte("again"), 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(name); err != nil || string(got) != "again" {
			t.Errorf("the mount reads d/r%d: %q, %v", k, got, err)
		}
	}
	for p, v := range callsSince(t, reg, before) {
		t.Errorf("reading back %d files, and making, writing and reading 4 more, cost %v %s calls; want none", n, v, p)
	}
	for _, name := range []string{"first", "f00", "r0"} {
		if _, err := os.Stat(e.path("d/" + name)); !os.IsNotExist(err) {
			t.Errorf("d/%s on the server before the directory's fsync: %v", name, err)
		}
	}
	// The directory's fsync: one REINTEGRATE, the files' data and times
	// in it (CML_STORE records: permitstore.go).
	before = serverCallsByProc(t, reg)
	syncDir(t, m.path("d"))
	diff = callsSince(t, reg, before)
	t.Logf("calls of the reintegration of %d files: %v", n+5, diff)
	if diff["REINTEGRATE"] != 1 || len(diff) != 1 {
		t.Errorf("the reintegration of %d files cost %v; want 1 REINTEGRATE", n+5, diff)
	}
	for k := range n {
		name := fmt.Sprintf("d/f%02d", k)
		want := fmt.Sprintf("data %d", k)
		if got, err := os.ReadFile(e.path(name)); err != nil || string(got) != want {
			t.Errorf("the server's %s: %q, %v", name, got, err)
		}
	}
	ents, err := os.ReadDir(m.path("d"))
	if err != nil || len(ents) != n+5 {
		t.Fatalf("the mount lists %d entries, %v; want %d", len(ents), err, n+5)
	}
	// The directory's attributes on the mount are the server's after the
	// last batch (its reply's).
	if mfi, err := os.Stat(m.path("d")); err != nil {
		t.Error(err)
	} else if sfi, err := os.Stat(e.path("d")); err != nil {
		t.Error(err)
	} else if !mfi.ModTime().Equal(sfi.ModTime()) || mfi.Size() != sfi.Size() {
		t.Errorf("d on the mount: mtime %v size %d; on the server: %v, %d", mfi.ModTime(), mfi.Size(), sfi.ModTime(), sfi.Size())
	}
	// The mount's inode numbers are those the files were made with, kept
	// while the mount knows them (st_ino must not change under a live file).
	var names []string
	for _, en := range ents {
		if _, err := os.Stat(e.path("d/" + en.Name())); err != nil {
			t.Errorf("the server's d/%s: %v", en.Name(), err)
		}
		names = append(names, en.Name())
	}
	checkMadeInos(t, m, "d", names)
	b := newSNFSMount(t, e, "permits-data-copy-b", "", time.Hour)
	for k := range n {
		name := fmt.Sprintf("d/f%02d", k)
		want := fmt.Sprintf("data %d", k)
		if got, err := os.ReadFile(b.path(name)); err != nil || string(got) != want {
			t.Errorf("another mount reads %s: %q, %v", name, got, err)
		}
	}
	for k := range 4 {
		if got, err := os.ReadFile(b.path(fmt.Sprintf("d/r%d", k))); err != nil || string(got) != "again" {
			t.Errorf("another mount reads d/r%d: %q, %v", k, got, err)
		}
	}
}

// TestMountSNFSPermitsDataOpenShared: a file made locally and still open,
// written locally (its data in the local store: no call), then made on the
// server by the recall another mount's change in its directory makes (its
// data written before the recall's answer): the other mount's open of it
// reads that data, and is concurrent write sharing with the creator's
// open (which goes on on the real file): what the creator writes next is
// read by the other mount at once (with an hour's write-back delay it
// would otherwise stay in its cache).
func TestMountSNFSPermitsDataOpenShared(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, reg := keptEnv(t, nil)
	if err := os.MkdirAll(e.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	a := newPermitDataMount(t, e, "permits-data-open-a", "")
	if _, err := os.ReadDir(a.path("d")); err != nil {
		t.Fatal(err)
	}
	// The directory's permit first (one REINTEGRATE per created file).
	if err := os.WriteFile(a.path("d/first"), []byte("first"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(a.path("d/f"), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := os.Lstat(e.path("d/f")); !os.IsNotExist(err) {
		t.Fatalf("d/f on the server before its first write: %v (not made locally?)", err)
	}
	before := serverCallsByProc(t, reg)
	if _, err := f.WriteAt([]byte("AAAA"), 0); err != nil {
		t.Fatal(err)
	}
	after := serverCallsByProc(t, reg)
	for p, v := range after {
		if v != before[p] {
			t.Errorf("the first write of a file made locally cost %v %s calls; want none", v-before[p], p)
		}
	}

	b := newSNFSMount(t, e, "permits-data-open-b", "", time.Hour)
	if err := os.WriteFile(b.path("d/fromb"), []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := os.OpenFile(b.path("d/f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	buf := make([]byte, 8)
	if k, err := g.ReadAt(buf, 0); k < 4 || string(buf[:4]) != "AAAA" {
		t.Fatalf("the other mount reads %q (%v); want the creator's AAAA, written back by the callback its open made", buf[:k], err)
	}
	if _, err := f.WriteAt([]byte("BBBB"), 4); err != nil {
		t.Fatal(err)
	}
	if k, err := g.ReadAt(buf, 0); k != 8 || string(buf) != "AAAABBBB" {
		t.Fatalf("the other mount reads %q (%v) after the creator's second write; want AAAABBBB: write sharing not detected, the creator still caches", buf[:k], err)
	}
}
