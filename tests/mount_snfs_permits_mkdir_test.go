package tests

import (
	"fmt"
	"os"
	"testing"
	"time"

	"snfs/mount/cachemgr"
	"snfs/state/clientfile"
)

// Directories made locally under write-back permits (docs/mount.md "The
// mount's side"; --permits=on): provisional directories.

// TestMountSNFSPermitsMkdirLocal: with --permits=on, 1,000 mkdir/rmdir
// pairs in a listed directory cost fewer than 20 calls, none of them an
// MKDIR or RMDIR (the pairs cancel in the log); directories made and kept
// are seen by the mount at once (empty, listed in their parent), reach the
// server at the parent's fsync, and a change inside one (which resolves it
// to the real directory first) works.
func TestMountSNFSPermitsMkdirLocal(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, reg := leasedEnv(t)
	if err := os.MkdirAll(e.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	m := newPermitsMountKept(t, e, "permits-mkdir") // no reintegration by age meanwhile (the loop takes seconds on a loaded machine)
	if _, err := os.ReadDir(m.path("d")); err != nil {
		t.Fatal(err)
	}
	before := allServerCalls(t, reg)
	byProc := serverCallsByProc(t, reg)
	const n = 1000
	for k := range n {
		p := m.path(fmt.Sprintf("d/x%d", k%7))
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []string{"d/sub1", "d/sub2"} {
		if err := os.Mkdir(m.path(s), 0o750); err != nil {
			t.Fatal(err)
		}
	}
	calls := allServerCalls(t, reg) - before
	after := serverCallsByProc(t, reg)
	diff := map[string]float64{}
	for p, v := range after {
		if v != byProc[p] {
			diff[p] = v - byProc[p]
		}
	}
	t.Logf("calls: %v", diff)
	if d := diff["MKDIR"] + diff["RMDIR"]; d != 0 {
		t.Errorf("%v MKDIR/RMDIR calls under the permit", d)
	}
	if calls >= 20 {
		t.Errorf("%d mkdir/rmdir pairs cost %v calls: %v; want fewer than 20", n, calls, diff)
	}
	if got := cachemgr.StatsOf(m.v).LocalChanges.Load(); got != 2*n+2 {
		t.Errorf("%d changes made locally; want %d", got, 2*n+2)
	}
	// The mount sees its directories; the server does not yet.
	if _, err := os.Lstat(e.path("d/sub1")); !os.IsNotExist(err) {
		t.Errorf("d/sub1 on the server before the fsync: %v (not made locally?)", err)
	}
	fi, err := os.Lstat(m.path("d/sub1"))
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o750 {
		t.Fatalf("d/sub1 on the mount: %v, %v", fi, err)
	}
	if ents, err := os.ReadDir(m.path("d/sub1")); err != nil || len(ents) != 0 {
		t.Errorf("the listing of d/sub1: %d entries, %v", len(ents), err)
	}
	if _, err := os.Lstat(m.path("d/sub1/nothing")); !os.IsNotExist(err) {
		t.Errorf("a lookup in the new d/sub1: %v", err)
	}
	ents, err := os.ReadDir(m.path("d"))
	if err != nil || len(ents) != 2 {
		t.Errorf("the listing of d: %v, %v; want sub1 and sub2", ents, err)
	}
	// A change inside a provisional directory resolves it: the log goes
	// first, then the change goes to the server in the real directory.
	if err := os.WriteFile(m.path("d/sub2/f"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(e.path("d/sub2/f")); err != nil {
		t.Errorf("d/sub2/f on the server: %v", err)
	}
	if b, err := os.ReadFile(m.path("d/sub2/f")); err != nil || string(b) != "data" {
		t.Errorf("d/sub2/f on the mount: %q, %v", b, err)
	}
	dir, err := os.Open(m.path("d"))
	if err != nil {
		t.Fatal(err)
	}
	if err := dir.Sync(); err != nil {
		t.Fatalf("fsync of the directory: %v", err)
	}
	dir.Close()
	for _, s := range []string{"d/sub1", "d/sub2"} {
		fi, err := os.Lstat(e.path(s))
		if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o750 {
			t.Errorf("%s on the server after the fsync: %v, %v", s, fi, err)
		}
	}
	if left, err := os.ReadDir(e.path("d")); err != nil || len(left) != 2 {
		t.Errorf("the server's d: %v, %v; want sub1 and sub2 only", left, err)
	}
	// The mount's view after the reintegration: the real directories.
	if _, err := os.Lstat(m.path("d/sub1")); err != nil {
		t.Error(err)
	}
	if err := os.Remove(m.path("d/sub1")); err != nil {
		t.Errorf("rmdir of d/sub1 once reintegrated: %v", err)
	}
}

// TestMountSNFSPermitsMkdirRecall: a directory made locally under A's
// permit is on the server, and listed by another mount, once that mount's
// change of the parent recalled the permit (docs/protocol.md section 21.4);
// A then uses the real directory.
func TestMountSNFSPermitsMkdirRecall(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	if err := os.MkdirAll(e.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	a := newPermitsMount(t, e, "permits-mkdir-recall-a", "")
	b := newSNFSMount(t, e, "permits-mkdir-recall-b", "", time.Hour)
	if _, err := os.ReadDir(a.path("d")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(a.path("d/new"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(a.path("d/gone"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(a.path("d/gone")); err != nil {
		t.Fatal(err)
	}
	if got := cachemgr.StatsOf(a.v).LocalChanges.Load(); got != 3 {
		t.Fatalf("%d changes made locally; want 3", got)
	}
	if err := os.WriteFile(b.path("d/fromb"), []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(b.path("d"))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, en := range ents {
		names[en.Name()] = true
	}
	if !names["new"] || names["gone"] || !names["fromb"] || len(names) != 2 {
		t.Errorf("B lists %v; want new and fromb", names)
	}
	if fi, err := os.Stat(b.path("d/new")); err != nil || !fi.IsDir() {
		t.Errorf("B's d/new: %v, %v", fi, err)
	}
	// A's name now leads to the real directory, which A changes through
	// the server, and B sees that.
	if err := os.WriteFile(a.path("d/new/froma"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(b.path("d/new/froma")); err != nil || string(got) != "a" {
		t.Errorf("B reads d/new/froma: %q, %v", got, err)
	}
}

// TestMountSNFSPermitsKilledMkdir: a mount killed with SIGKILL after making
// directories and files locally: the remount reintegrates its log before it
// serves, and the directories and files it kept are on the server (the
// directories it removed are not).
func TestMountSNFSPermitsKilledMkdir(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	s := newServeProc(t)
	if err := os.MkdirAll(s.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	a := startMount(t, s, "", "", "--permits=on")
	if _, err := os.ReadDir(a.path("d")); err != nil {
		t.Fatal(err)
	}
	const n = 20
	for k := range n {
		if err := os.Mkdir(a.path(fmt.Sprintf("d/n%02d", k)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for k := range n / 2 {
		if err := os.Remove(a.path(fmt.Sprintf("d/n%02d", k))); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"d/c0", "d/c1"} {
		f, err := os.OpenFile(a.path(name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	for _, name := range []string{fmt.Sprintf("d/n%02d", n-1), "d/c0"} {
		if _, err := os.Lstat(s.path(name)); !os.IsNotExist(err) {
			t.Fatalf("%s on the server before the kill: %v (not made locally?)", name, err)
		}
	}
	a.kill9()
	b := startMount(t, s, a.dir, a.cacheDir, "--permits=on")
	if v := scrape(t, b.metrics, "snfs_client_cml_records"); v != 0 {
		t.Errorf("snfs_client_cml_records after the remount = %v; want 0", v)
	}
	for k := range n {
		fi, err := os.Lstat(s.path(fmt.Sprintf("d/n%02d", k)))
		if kept := k >= n/2; kept != (err == nil && fi.IsDir()) {
			t.Errorf("d/n%02d on the server after the remount: %v; want kept %v", k, err, kept)
		}
	}
	for _, name := range []string{"d/c0", "d/c1"} {
		if fi, err := os.Lstat(s.path(name)); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s on the server after the remount: %v, %v", name, fi, err)
		}
	}
	if ents, err := os.ReadDir(b.path("d")); err != nil || len(ents) != n/2+2 {
		t.Errorf("the remount lists %d entries in d, %v; want %d", len(ents), err, n/2+2)
	}
}

// TestMountSNFSPermitsCreateLocal: with --permits=on, 1,000 create, close
// and unlink of a file in a listed directory cost fewer than 20 calls, no
// CREATE or REMOVE among them; a file made and kept is seen by the mount at
// once (empty), reaches the server at the directory's fsync; data written
// to a file made locally resolves it (the log first, then the real file's
// open), and another mount reads that data.
func TestMountSNFSPermitsCreateLocal(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, reg := leasedEnv(t)
	if err := os.MkdirAll(e.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	m := newPermitsMountKept(t, e, "permits-create") // no reintegration by age meanwhile (the loop takes seconds on a loaded machine)
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
	// Data written to a file made locally.
	if err := os.WriteFile(m.path("d/data"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(m.path("d/data")); err != nil || string(got) != "hello" {
		t.Errorf("d/data on the mount: %q, %v", got, err)
	}
	if _, err := os.Lstat(e.path("d/kept")); err != nil {
		t.Errorf("d/kept on the server after a write resolved d/data: %v", err)
	}
	b := newSNFSMount(t, e, "permits-create-b", "", time.Hour)
	if got, err := os.ReadFile(b.path("d/data")); err != nil || string(got) != "hello" {
		t.Errorf("another mount reads d/data: %q, %v", got, err)
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

// TestMountSNFSPermitsCopyCalls: a copy of files into a directory held
// under a permit (Andrew's Copy phase: create, write, close, one file after
// another) costs, per file, the reintegration its first write makes, whose
// CREATE goes as CML_CREATE_OPEN and gives the real file's open (kept past
// its close, as `snfs mount` keeps opens by default), nothing more: no OPEN,
// and the new file's attributes
// come with the REINTEGRATE reply (no GETATTR of it), the directory's cached
// entry is pointed at the real handle (no listing of the directory again),
// and the directory's attributes after the batch come with the reply too (no
// GETATTR of it at the next path walk). Every file reads back, on the mount
// with no call (the creator's access is known) and from another; on the
// mount, each keeps the inode number it was made with.
func TestMountSNFSPermitsCopyCalls(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, reg := leasedEnv(t)
	if err := os.MkdirAll(e.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	m := newPermitsMountClose(t, e, "permits-copy", "", clientfile.UntilRecalled)
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
	// One REINTEGRATE a file: its CREATE goes as CML_CREATE_OPEN, whose
	// open the write that resolved the file takes (no OPEN).
	if diff["REINTEGRATE"] != n {
		t.Errorf("%d files copied in cost REINTEGRATE %v; want %d", n, diff["REINTEGRATE"], n)
	}
	for p, v := range diff {
		switch {
		case p != "REINTEGRATE":
			t.Errorf("%d files copied in cost %v %s calls", n, v, p)
		}
	}
	ents, err := os.ReadDir(m.path("d"))
	if err != nil || len(ents) != n+1 {
		t.Fatalf("the mount lists %d entries, %v; want %d", len(ents), err, n+1)
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
	// Reading back what the mount wrote (Andrew's ReadAll) costs nothing:
	// the creator's access was recorded as the file was resolved.
	before = serverCallsByProc(t, reg)
	for k := range n {
		name := fmt.Sprintf("d/f%02d", k)
		want := fmt.Sprintf("data %d", k)
		if got, err := os.ReadFile(m.path(name)); err != nil || string(got) != want {
			t.Errorf("the mount reads %s: %q, %v", name, got, err)
		}
	}
	after = serverCallsByProc(t, reg)
	for p, v := range after {
		if v != before[p] {
			t.Errorf("reading back %d files cost %v %s calls", n, v-before[p], p)
		}
	}
	// A file made locally, closed, then opened again by name for writing
	// (the second open resolves it: not through its provisional open),
	// written and read back: its creator's access is known too.
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
	}
	before = serverCallsByProc(t, reg)
	for k := range 4 {
		if got, err := os.ReadFile(m.path(fmt.Sprintf("d/r%d", k))); err != nil || string(got) != "again" {
			t.Errorf("the mount reads d/r%d: %q, %v", k, got, err)
		}
	}
	after = serverCallsByProc(t, reg)
	for p, v := range after {
		if v != before[p] {
			t.Errorf("reading back 4 files made, closed and opened again cost %v %s calls", v-before[p], p)
		}
	}
	b := newSNFSMount(t, e, "permits-copy-b", "", time.Hour)
	for k := range n {
		name := fmt.Sprintf("d/f%02d", k)
		want := fmt.Sprintf("data %d", k)
		if got, err := os.ReadFile(b.path(name)); err != nil || string(got) != want {
			t.Errorf("another mount reads %s: %q, %v", name, got, err)
		}
	}
}
