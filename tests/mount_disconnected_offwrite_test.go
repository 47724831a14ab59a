package tests

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Offline opens for writing of files the server made that the mount had
// only read (docs/mount.md, "What is served offline"; cachemgr's
// offlinewrite.go): granted locally when the file's data is wholly and
// validly cached (a read open kept past its last close), their OPEN owed
// until reconnection, where the dirty data is reintegrated with a check of
// its base against the server's file.

// offwriteFiles makes work/app, work/trunc, work/cut, work/path and work/stat on the
// server and returns their contents.
func offwriteFiles(t *testing.T, s *srvProc) map[string][]byte {
	t.Helper()
	if err := os.Mkdir(s.path("work"), 0o777); err != nil {
		t.Fatal(err)
	}
	first := map[string][]byte{}
	for k, n := range []string{"app", "trunc", "stat", "cut", "path"} {
		first[n] = randBytes(uint64(5101+k), 40000+7000*k)
		if err := os.WriteFile(s.path("work/"+n), first[n], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return first
}

// offwriteRead reads app, trunc, cut and path through m (kept open for reading:
// the cache holds them whole) and stats stat (its name and attributes
// known, its data not cached).
func offwriteRead(t *testing.T, m *mntProc, first map[string][]byte) {
	t.Helper()
	for _, n := range []string{"app", "trunc", "cut", "path"} {
		if got := mustRead(t, m.path("work/"+n)); !bytes.Equal(got, first[n]) {
			t.Fatalf("read of %s through the mount: %d bytes, want %d", n, len(got), len(first[n]))
		}
	}
	if _, err := os.Stat(m.path("work/stat")); err != nil {
		t.Fatal(err)
	}
}

// offwriteSetup is offwriteFiles, a mount (--disconnected=auto),
// offwriteRead, and the mount offline on request.
func offwriteSetup(t *testing.T, s *srvProc, extra ...string) (*mntProc, map[string][]byte) {
	t.Helper()
	first := offwriteFiles(t, s)
	m := startMount(t, s, "", "", append([]string{"--disconnected=auto", "--disconnect-after=2s", "--log-level=debug"}, extra...)...)
	offwriteRead(t, m, first)
	goOfflineReq(t, m)
	return m, first
}

// offwriteEdit, offline: appends to app, rewrites trunc with an O_TRUNC
// open, cuts cut to 1000 bytes as truncate(1) does (an open for writing and
// ftruncate), cuts path to 777 bytes with truncate(2) of its path (no open
// for writing), checks the mount reads them back, and that an open for writing of
// stat (not cached) fails EHOSTDOWN. It returns the files' new contents.
func offwriteEdit(t *testing.T, m *mntProc, first map[string][]byte) map[string][]byte {
	t.Helper()
	more := randBytes(5111, 3000)
	f, err := os.OpenFile(m.path("work/app"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatalf("open for appending offline of a file only read: %v", err)
	}
	if _, err := f.Write(more); err != nil {
		t.Fatalf("append offline: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close offline: %v", err)
	}
	rewritten := randBytes(5112, 12345)
	f, err = os.OpenFile(m.path("work/trunc"), os.O_RDWR|os.O_TRUNC, 0)
	if err != nil {
		t.Fatalf("O_TRUNC open offline of a file only read: %v", err)
	}
	if _, err := f.Write(rewritten); err != nil {
		t.Fatalf("write offline: %v", err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync offline: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close offline: %v", err)
	}
	f, err = os.OpenFile(m.path("work/cut"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("open for writing offline of a file only read: %v", err)
	}
	if err := f.Truncate(1000); err != nil {
		t.Fatalf("ftruncate offline: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close offline: %v", err)
	}
	if err := os.Truncate(m.path("work/path"), 777); err != nil {
		t.Fatalf("truncate(2) offline of a file only read: %v", err)
	}
	want := map[string][]byte{
		"app":   append(append([]byte(nil), first["app"]...), more...),
		"trunc": rewritten,
		"cut":   first["cut"][:1000],
		"path":  first["path"][:777],
		"stat":  first["stat"],
	}
	for _, n := range []string{"app", "trunc", "cut", "path"} {
		if got := mustRead(t, m.path("work/"+n)); !bytes.Equal(got, want[n]) {
			t.Fatalf("offline read back of %s: %d bytes, want %d", n, len(got), len(want[n]))
		}
	}
	if f, err := os.OpenFile(m.path("work/stat"), os.O_WRONLY|os.O_APPEND, 0); err == nil {
		f.Close()
		t.Fatalf("open for writing offline of a file whose data is not cached succeeded")
	} else if !errors.Is(err, syscall.EHOSTDOWN) {
		t.Fatalf("open for writing offline of a file whose data is not cached: %v; want EHOSTDOWN", err)
	}
	return want
}

// waitMountReads waits until m reads want[n] for each name in work.
func waitMountReads(t *testing.T, m *mntProc, want map[string][]byte, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for n, w := range want {
		for {
			got, err := os.ReadFile(m.path("work/" + n))
			if err == nil && bytes.Equal(got, w) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s reads %d bytes of %s (%v); want %d", m.dir, len(got), n, err, len(w))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// TestMountDisconnectedWriteOnlyRead: offline, an append to a file the
// mount had only read and an O_TRUNC rewrite of another succeed (their
// data was whole in the cache), and are read back; a file whose data is not
// cached still fails EHOSTDOWN. Back online the server and a second mount
// (which had read the files before) see exactly the bytes written, and no
// conflict is recorded.
func TestMountDisconnectedWriteOnlyRead(t *testing.T) {
	t.Parallel()
	s := newServeProc(t, "--grace", "2s")
	m, first := offwriteSetup(t, s)
	m2 := startMount(t, s, "", "")
	waitMountReads(t, m2, first, 10*time.Second)
	want := offwriteEdit(t, m, first)
	goOnlineReq(t, m)
	waitExport(t, m, s.path("work"), want, 60*time.Second)
	waitMountReads(t, m2, want, 30*time.Second)
	if c := conflictLines(m); len(c) != 0 {
		t.Fatalf("conflicts recorded: %q; want none", c)
	}
}

// TestMountDisconnectedWriteOnlyReadConflict: as above, and meanwhile a
// second mount rewrites app (the file appended to offline: the mount's
// cache holds its first bytes clean and the appended ones dirty). Back
// online, the server keeps the second mount's bytes, the first mount's
// whole file (its first bytes and what it appended) is kept beside them as
// a conflict copy listed by `snfs conflicts` ("disconnected"), and trunc,
// which nobody else changed, is written back with no conflict; so is cut,
// which the second mount opened for writing and closed unchanged (the
// first mount fenced for it), and the first mount reads the second's later
// rewrite of it, and the second's app.
func TestMountDisconnectedWriteOnlyReadConflict(t *testing.T) {
	t.Parallel()
	s := newServeProc(t, "--grace", "2s", "--callback-timeout", "2s")
	m, first := offwriteSetup(t, s)
	m2 := startMount(t, s, "", "")
	want := offwriteEdit(t, m, first)
	other := randBytes(5121, 23456)
	if err := os.WriteFile(m2.path("work/app"), other, 0o644); err != nil {
		t.Fatalf("the second mount's rewrite of app: %v", err)
	}
	// cut, written offline too, is opened for writing by the second mount
	// and closed unchanged: the server's callback to the first fails (it is
	// fenced for cut), but nothing conflicts.
	if f, err := os.OpenFile(m2.path("work/cut"), os.O_WRONLY, 0); err != nil {
		t.Fatal(err)
	} else if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	ours := want["app"]
	goOnlineReq(t, m)
	deadline := time.Now().Add(60 * time.Second)
	for {
		copies, _ := filepath.Glob(s.path("work/app.snfs-conflict-*"))
		var c []byte
		if len(copies) == 1 {
			c, _ = os.ReadFile(copies[0])
		}
		app, _ := os.ReadFile(s.path("work/app"))
		tr, _ := os.ReadFile(s.path("work/trunc"))
		cut, _ := os.ReadFile(s.path("work/cut"))
		if len(copies) == 1 && bytes.Equal(c, ours) && bytes.Equal(app, other) && bytes.Equal(tr, want["trunc"]) && bytes.Equal(cut, want["cut"]) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after reconnection: conflict copies of app %v (%d bytes, want the mount's %d, equal %v); app %d bytes (want the second mount's %d, equal %v); trunc %d bytes (want %d, equal %v); cut %d bytes (want %d)\n%s",
				copies, len(c), len(ours), bytes.Equal(c, ours), len(app), len(other), bytes.Equal(app, other),
				len(tr), len(want["trunc"]), bytes.Equal(tr, want["trunc"]), len(cut), len(want["cut"]), tail(m.logPath, 80))
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitConflictListed(t, m.cacheDir, deadline, "app.snfs-conflict-", "disconnected")
	if c := conflictLines(m); len(c) != 1 {
		t.Fatalf("conflicts recorded: %q; want one, app's", c)
	}
	waitMountReads(t, m2, map[string][]byte{"app": other, "trunc": want["trunc"], "cut": want["cut"]}, 30*time.Second)
	// The first mount is called back about cut again: a later change by the
	// second is read, not the first's cached copy.
	later := randBytes(5122, 3333)
	if err := os.WriteFile(m2.path("work/cut"), later, 0o644); err != nil {
		t.Fatal(err)
	}
	waitMountReads(t, m, map[string][]byte{"cut": later, "app": other}, 10*time.Second)
}

// TestMountDisconnectedWriteOnlyReadKilled: the offline edits are closed
// (durable in the cache directory), then the mount is killed (-9) while
// offline. A mount started on its cache directory, the server reachable,
// writes them back: the server has exactly the bytes, and no conflict is
// recorded (the data's base is the server's file as the first mount read
// it).
func TestMountDisconnectedWriteOnlyReadKilled(t *testing.T) {
	t.Parallel()
	s := newServeProc(t, "--grace", "2s")
	m, first := offwriteSetup(t, s)
	want := offwriteEdit(t, m, first)
	m.kill9()
	for _, n := range []string{"app", "trunc"} {
		if got := mustRead(t, s.path("work/"+n)); !bytes.Equal(got, first[n]) {
			t.Fatalf("the server's %s changed before the remount", n)
		}
	}
	m2 := startMount(t, s, "", m.cacheDir, "--disconnected=auto", "--disconnect-after=2s", "--log-level=debug")
	waitExport(t, m2, s.path("work"), want, 60*time.Second)
	if c := conflictLines(m2); len(c) != 0 {
		t.Fatalf("conflicts recorded: %q; want none", c)
	}
	waitMountReads(t, m2, want, 10*time.Second)
}

// TestMountDisconnectedWriteOnlyReadPartition: the mount goes offline
// because the server is unreachable (a partition), the files it had only
// read are edited offline and closed, and the mount is killed (-9) while
// the partition lasts. A mount started on its cache directory, with the
// server reachable, writes them back: the server has exactly the bytes, no
// conflict (the first mount, still registered, is fenced for the files as
// the new one OPENs them).
func TestMountDisconnectedWriteOnlyReadPartition(t *testing.T) {
	t.Parallel()
	s := newServeProc(t, "--grace", "2s", "--callback-timeout", "2s")
	p := newProxy(t, s.addr())
	first := offwriteFiles(t, s)
	m := newMnt(t, "", "")
	m.metrics = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	m.launch(s, p.Port(), "--writeback-delay", "1h", "--log-level", "debug", "--metrics", m.metrics,
		"--disconnected=auto", "--disconnect-after=2s")
	t.Cleanup(func() {
		p.Heal()
		if t.Failed() {
			t.Logf("log of the mount on %s (tail):\n%s", m.dir, tail(m.logPath, 80))
		}
	})
	t.Cleanup(m.umount)
	offwriteRead(t, m, first)
	p.Partition(0)
	waitMetric(t, m, "snfs_client_disconnected", 1, 30*time.Second)
	want := offwriteEdit(t, m, first)
	m.kill9()
	m2 := startMount(t, s, "", m.cacheDir, "--disconnected=auto", "--disconnect-after=2s", "--log-level=debug")
	waitExport(t, m2, s.path("work"), want, 60*time.Second)
	if c := conflictLines(m2); len(c) != 0 {
		t.Fatalf("conflicts recorded: %q; want none", c)
	}
	waitMountReads(t, m2, want, 10*time.Second)
}
