package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"snfs/metrics"
	snfsmount "snfs/mount"
	"snfs/mount/cachemgr"
	"snfs/mount/cml"
	"snfs/mount/fusefs"
	"snfs/nfs3"
	"snfs/snfs1"

	"github.com/hanwen/go-fuse/v2/posixtest"
)

// Write-back permits, the mount's side (docs/mount.md "The client
// modification log"; --permits=on).

// newPermitsMount mounts e's export in snfs mode with --permits=on, cache
// directory cacheDir ("": a fresh one), as client name.
func newPermitsMount(t *testing.T, e *env, name, cacheDir string) *snfsMount {
	t.Helper()
	return newPermitsMountClose(t, e, name, cacheDir, 0)
}

// newPermitsMountClose is newPermitsMount with opens kept closeDelay after
// their last close (clientfile.UntilRecalled: until recalled, as `snfs
// mount` keeps them by default).
func newPermitsMountClose(t *testing.T, e *env, name, cacheDir string, closeDelay time.Duration) *snfsMount {
	t.Helper()
	return newSNFSMountWith(t, e, name, "", snfsmount.Config{Name: name, CacheDir: cacheDir, WriteBackDelay: time.Hour,
		CloseDelay: closeDelay, Permits: true}, fusefs.Options{})
}

// newPermitDataMount is newPermitsMount with the local data of files made
// locally (--permit-data=on, experimental).
func newPermitDataMount(t *testing.T, e *env, name, cacheDir string) *snfsMount {
	t.Helper()
	return newPermitDataMountClose(t, e, name, cacheDir, 0)
}

// newPermitDataMountClose is newPermitsMountClose with --permit-data=on.
func newPermitDataMountClose(t *testing.T, e *env, name, cacheDir string, closeDelay time.Duration) *snfsMount {
	t.Helper()
	return newSNFSMountWith(t, e, name, "", snfsmount.Config{Name: name, CacheDir: cacheDir, WriteBackDelay: time.Hour,
		CloseDelay: closeDelay, Permits: true, PermitData: true}, fusefs.Options{})
}

// newPermitDataMountKept is newPermitsMountKept with --permit-data=on.
func newPermitDataMountKept(t *testing.T, e *env, name string) *snfsMount {
	t.Helper()
	m := newPermitDataMount(t, e, name, "")
	if !cachemgr.SetLogPolicy(m.v, time.Hour, 1<<20) {
		t.Fatal("no permits")
	}
	return m
}

// TestMountSNFSPermitsRestartReplay: a mount killed with records in its
// modification log (written here into its cache directory as the mount
// writes them) is mounted again with the same name: before it serves, it
// gets the permits of the log's directories and reintegrates the log, a
// directory made in it and a file made in that directory included; the
// log is then empty, and `snfs status` shows the log in use and the permit
// held.
func TestMountSNFSPermitsRestartReplay(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D := permitEnv(t, "old")
	cacheDir := diskTempDir(t, "snfs-cache-")
	l, err := cml.Open(filepath.Join(cacheDir, "cml"), cml.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	mode := uint32(0o644)
	dmode := uint32(0o755)
	dir := snfs1.ObjRef{FH: D}
	if _, err := l.Append(snfs1.CMLRecord{Op: snfs1.CMLCreate, Dir: dir, Name: "a", Attr: nfs3.Sattr{Mode: &mode}}); err != nil {
		t.Fatal(err)
	}
	sub, err := l.Append(snfs1.CMLRecord{Op: snfs1.CMLMkdir, Dir: dir, Name: "sub", Attr: nfs3.Sattr{Mode: &dmode}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(snfs1.CMLRecord{Op: snfs1.CMLCreate, Dir: snfs1.ObjRef{Prov: sub}, Name: "b", Attr: nfs3.Sattr{Mode: &mode}}); err != nil {
		t.Fatal(err)
	}
	// With its base, as the mount logs it: the restarted mount checks the
	// name before it sends the record (docs/mount.md "A permit lost before
	// the log is in"); without one, it would keep the remove as a conflict.
	base := []cml.Base{{Dir: D, Name: "old", FH: e.lookup(D, "old")}}
	if _, err := l.AppendLazyBased(snfs1.CMLRecord{Op: snfs1.CMLUnlink, Dir: dir, Name: "old"}, base); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	m := newPermitsMount(t, e, "permits-replay:"+cacheDir, cacheDir)
	// No wait: the log was reintegrated before the mount served.
	for _, p := range []string{"d/a", "d/sub/b"} {
		if _, err := os.Lstat(e.path(p)); err != nil {
			t.Errorf("the export after the remount: %v", err)
		}
	}
	if _, err := os.Lstat(e.path("d/old")); !os.IsNotExist(err) {
		t.Errorf("d/old after the remount reintegrated its UNLINK: %v", err)
	}
	st, ok := cachemgr.StatusOf(m.v, 0)
	if !ok || !st.ModLogInUse || !st.PermitsInUse {
		t.Fatalf("status: %+v", st)
	}
	if st.ModLog.Records != 0 {
		t.Errorf("status: %d records left in the log", st.ModLog.Records)
	}
	if len(st.Permits) < 2 {
		t.Errorf("status: permits held %+v; want d's and the new d/sub's", st.Permits)
	}
	// The mount sees what it logged.
	if _, err := os.Lstat(m.path("d/sub/b")); err != nil {
		t.Error(err)
	}
}

// serverCallsByProc counts the server's calls by procedure name.
func serverCallsByProc(t *testing.T, reg *metrics.Registry) map[string]float64 {
	t.Helper()
	fams, err := reg.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != "snfs_server_rpc_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "proc" {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// TestMountSNFSPermitsRemoveLocal: with --permits=on, removing 1,000 files
// (and an empty directory) of a listed directory costs fewer than 20 calls
// (the permit, a few batches of the log), none of them a REMOVE; the
// changes are on the server only after the directory's fsync, and the
// mount sees them at once.
func TestMountSNFSPermitsRemoveLocal(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, reg := keptEnv(t, nil)
	const n = 1000
	if err := os.MkdirAll(e.path("d/empty"), 0o777); err != nil {
		t.Fatal(err)
	}
	for k := range n {
		if err := os.WriteFile(e.path(fmt.Sprintf("d/f%04d", k)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m := newPermitsMount(t, e, "permits-remove", "")
	ents, err := os.ReadDir(m.path("d"))
	if err != nil || len(ents) != n+1 {
		t.Fatalf("the listing: %d entries, %v", len(ents), err)
	}
	if ents, err := os.ReadDir(m.path("d/empty")); err != nil || len(ents) != 0 {
		t.Fatalf("the listing of d/empty: %d entries, %v", len(ents), err)
	}
	before := allServerCalls(t, reg)
	byProc := serverCallsByProc(t, reg)
	for k := range n {
		if err := os.Remove(m.path(fmt.Sprintf("d/f%04d", k))); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(m.path("d/empty")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(e.path("d/f0000")); err != nil {
		t.Errorf("d/f0000 is gone from the server before the directory's fsync: the remove was not made locally (%v)", err)
	}
	if ents, err := os.ReadDir(m.path("d")); err != nil || len(ents) != 0 {
		t.Errorf("the mount lists %d entries after removing all: %v", len(ents), err)
	}
	if _, err := os.Lstat(m.path("d/f0001")); !os.IsNotExist(err) {
		t.Errorf("the mount after removing d/f0001: %v", err)
	}
	dir, err := os.Open(m.path("d"))
	if err != nil {
		t.Fatal(err)
	}
	if err := dir.Sync(); err != nil {
		t.Fatalf("fsync of the directory: %v", err)
	}
	dir.Close()
	calls := allServerCalls(t, reg) - before
	after := serverCallsByProc(t, reg)
	if d := after["REMOVE"] - byProc["REMOVE"] + after["RMDIR"] - byProc["RMDIR"]; d != 0 {
		t.Errorf("%v REMOVE/RMDIR calls under the permit", d)
	}
	diff := map[string]float64{}
	for p, v := range after {
		if v != byProc[p] {
			diff[p] = v - byProc[p]
		}
	}
	t.Logf("calls: %v", diff)
	if calls >= 20 {
		t.Errorf("removing %d files cost %v calls: %v; want fewer than 20", n, calls, diff)
	}
	left, err := os.ReadDir(e.path("d"))
	if err != nil || len(left) != 0 {
		t.Errorf("the server's d after the fsync: %d entries, %v", len(left), err)
	}
}

// TestMountSNFSPermitsRemoveRecall: names removed locally under a permit
// are gone for another mount once it changes the directory (the recall:
// the holder reintegrates before the other's change is made), and the
// holder's later removes go through the server.
func TestMountSNFSPermitsRemoveRecall(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	const n = 30
	if err := os.MkdirAll(e.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	for k := range n {
		if err := os.WriteFile(e.path(fmt.Sprintf("d/f%02d", k)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a := newPermitsMount(t, e, "permits-recall-a", "")
	b := newSNFSMount(t, e, "permits-recall-b", "", time.Hour)
	if _, err := os.ReadDir(a.path("d")); err != nil {
		t.Fatal(err)
	}
	for k := range n / 2 {
		if err := os.Remove(a.path(fmt.Sprintf("d/f%02d", k))); err != nil {
			t.Fatal(err)
		}
	}
	if got := cachemgr.StatsOf(a.v).LocalChanges.Load(); got != n/2 {
		t.Fatalf("%d changes made locally; want %d", got, n/2)
	}
	// B's change recalls A's permit; B then lists the directory.
	if err := os.WriteFile(b.path("d/new"), []byte("b"), 0o644); err != nil {
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
	for k := range n {
		name := fmt.Sprintf("f%02d", k)
		if names[name] != (k >= n/2) {
			t.Errorf("B lists %s: %v; want %v", name, names[name], k >= n/2)
		}
	}
	if !names["new"] {
		t.Error("B does not list its own new file")
	}
	if st, _ := cachemgr.StatusOf(a.v, 0); st.ModLog.Records != 0 {
		t.Errorf("A's log holds %d records after the recall", st.ModLog.Records)
	}
	// A holds the permit again at its next change (asked again: the recall
	// is over); B's next change recalls it again.
	if err := os.Remove(a.path(fmt.Sprintf("d/f%02d", n-1))); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b.path("d/new2"), []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	ents, err = os.ReadDir(b.path("d"))
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range ents {
		if en.Name() == fmt.Sprintf("f%02d", n-1) {
			t.Errorf("B lists d/%s after A removed it and B changed d", en.Name())
		}
	}
}

// TestMountSNFSPermitsKilledHolder: an `snfs mount --permits=on` process
// that removed files locally under a permit is killed with SIGKILL, its log
// on disk; the remount on the same mount point (the same client name) and
// cache directory gets the permit again and reintegrates the log before it
// serves: every remove is on the server, and nothing else went.
func TestMountSNFSPermitsKilledHolder(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	s := newServeProc(t)
	const n = 40
	if err := os.MkdirAll(s.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	for k := range n {
		if err := os.WriteFile(s.path(fmt.Sprintf("d/f%02d", k)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a := startMount(t, s, "", "", "--permits=on")
	if ents, err := os.ReadDir(a.path("d")); err != nil || len(ents) != n {
		t.Fatalf("the listing: %d entries, %v", len(ents), err)
	}
	for k := range n / 2 {
		if err := os.Remove(a.path(fmt.Sprintf("d/f%02d", k))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Lstat(s.path("d/f00")); err != nil {
		t.Fatalf("d/f00 left the server before the kill: the remove was not made locally (%v)", err)
	}
	a.kill9()
	b := startMount(t, s, a.dir, a.cacheDir, "--permits=on")
	if v := scrape(t, b.metrics, "snfs_client_permits_held"); v != 1 {
		t.Errorf("snfs_client_permits_held after the remount = %v; want 1 (d's, asked for the log)", v)
	}
	if v := scrape(t, b.metrics, "snfs_client_cml_records"); v != 0 {
		t.Errorf("snfs_client_cml_records after the remount = %v; want 0", v)
	}
	for k := range n {
		_, err := os.Lstat(s.path(fmt.Sprintf("d/f%02d", k)))
		if removed := k < n/2; removed != os.IsNotExist(err) {
			t.Errorf("d/f%02d on the server after the remount: %v; want removed %v", k, err, removed)
		}
	}
}

// TestMountSNFSPosixPermits is TestMountSNFSPosix with --permits=on: the
// removes of listed directories' entries are made locally under permits.
func TestMountSNFSPosixPermits(t *testing.T) {
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
			m := newPermitsMount(t, e, "posix-permits", "")
			posixtest.All[name](t, m.dir)
		})
	}
}

// TestMountSNFSPosixPermitData is TestMountSNFSPosixPermits with
// --permit-data=on (experimental): files made locally keep their data
// locally. Link and RenameOverwriteDestNoExist compare the inode numbers of
// a file before and after the LINK or the RENAME to another directory that
// resolves it (docs/mount.md "What changes at the reintegration").
func TestMountSNFSPosixPermitData(t *testing.T) {
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
			m := newPermitDataMount(t, e, "posix-permit-data", "")
			posixtest.All[name](t, m.dir)
		})
	}
}

// TestMountSNFSPermitsRenameLocal: with --permits=on, renames within a
// listed directory (one over an existing file) are made locally: no RENAME
// call, the server unchanged until the directory's fsync, the mount seeing
// the new names at once; another mount sees them after its own change of
// the directory (the recall).
func TestMountSNFSPermitsRenameLocal(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, reg := keptEnv(t, nil)
	if err := os.MkdirAll(e.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	for k := range 20 {
		if err := os.WriteFile(e.path(fmt.Sprintf("d/f%02d", k)), []byte(fmt.Sprint(k)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a := newPermitsMount(t, e, "permits-rename-a", "")
	if _, err := os.ReadDir(a.path("d")); err != nil {
		t.Fatal(err)
	}
	before := serverCallsByProc(t, reg)
	for k := range 10 {
		if err := os.Rename(a.path(fmt.Sprintf("d/f%02d", k)), a.path(fmt.Sprintf("d/g%02d", k))); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Rename(a.path("d/f10"), a.path("d/f11")); err != nil { // over an existing file
		t.Fatal(err)
	}
	if _, err := os.Lstat(e.path("d/f00")); err != nil {
		t.Errorf("d/f00 left the server before the fsync: the rename was not made locally (%v)", err)
	}
	if b, err := os.ReadFile(a.path("d/g03")); err != nil || string(b) != "3" {
		t.Errorf("the mount reads d/g03: %q, %v", b, err)
	}
	if b, err := os.ReadFile(a.path("d/f11")); err != nil || string(b) != "10" {
		t.Errorf("the mount reads d/f11: %q, %v; want f10's", b, err)
	}
	if _, err := os.Lstat(a.path("d/f10")); !os.IsNotExist(err) {
		t.Errorf("the mount after renaming d/f10 away: %v", err)
	}
	b := newSNFSMount(t, e, "permits-rename-b", "", time.Hour)
	if err := os.WriteFile(b.path("d/new"), []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(b.path("d"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, en := range ents {
		got = append(got, en.Name())
	}
	want := []string{"f11", "f12", "f13", "f14", "f15", "f16", "f17", "f18", "f19",
		"g00", "g01", "g02", "g03", "g04", "g05", "g06", "g07", "g08", "g09", "new"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("B lists %v; want %v", got, want)
	}
	if data, err := os.ReadFile(e.path("d/f11")); err != nil || string(data) != "10" {
		t.Errorf("the server's d/f11: %q, %v; want f10's", data, err)
	}
	if n := serverCallsByProc(t, reg)["RENAME"] - before["RENAME"]; n != 0 {
		t.Errorf("%v RENAME calls under the permit", n)
	}
}

// TestMountSNFSPermitsRecallMidBurst: another mount's change of the
// directory (a recall) in the middle of a burst of local removes loses none
// of them and none of its own: after the burst and the holder's fsync, the
// server and both mounts list exactly the other's new file and the names
// never removed.
func TestMountSNFSPermitsRecallMidBurst(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	const n, removed = 300, 250
	if err := os.MkdirAll(e.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	for k := range n {
		if err := os.WriteFile(e.path(fmt.Sprintf("d/f%03d", k)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a := newPermitsMount(t, e, "permits-burst-a", "")
	b := newSNFSMount(t, e, "permits-burst-b", "", time.Hour)
	if _, err := os.ReadDir(a.path("d")); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	half := make(chan struct{})
	go func() {
		for k := range removed {
			if k == removed/3 {
				close(half)
			}
			if err := os.Remove(a.path(fmt.Sprintf("d/f%03d", k))); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	<-half
	if err := os.WriteFile(b.path("d/theirs"), []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	dir, err := os.Open(a.path("d"))
	if err != nil {
		t.Fatal(err)
	}
	if err := dir.Sync(); err != nil {
		t.Fatal(err)
	}
	dir.Close()
	want := []string{}
	for k := removed; k < n; k++ {
		want = append(want, fmt.Sprintf("f%03d", k))
	}
	want = append(want, "theirs")
	for who, path := range map[string]string{"the server": e.path("d"), "A": a.path("d"), "B": b.path("d")} {
		ents, err := os.ReadDir(path)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, en := range ents {
			got = append(got, en.Name())
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s lists %d names %v...; want %d", who, len(got), got[:min(len(got), 5)], len(want))
		}
	}
}
