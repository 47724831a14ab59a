package tests

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"snfs/mount/cachemgr"
)

// Symbolic links and SETATTRs made locally under write-back permits
// (docs/mount.md "The mount's side"; --permits=on): a link made locally is
// a provisional object whose target the mount answers; a chmod, chown to
// its own owner and group, or utimes of an object made locally is logged
// and applied to its attributes, and collapses with the others in the
// optimiser.

// mtimeOf is fi's modification time.
func mtimeOf(fi os.FileInfo) time.Time {
	st := fi.Sys().(*syscall.Stat_t)
	return time.Unix(st.Mtim.Sec, st.Mtim.Nsec)
}

// createClosed makes the file p, mode 0644, and closes it.
func createClosed(t *testing.T, p string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// permitsLinkAndAttrs makes, in dir of mount path p (a function of a
// name), what the tests check: a symbolic link l to "target/x", a file f
// made 0644, chmod'ed 0600 then 0640, its times set twice, chown'ed to its
// own owner and group; a directory s made 0755 and chmod'ed 0700; and 100
// links and files made, changed and removed again (each set cancels).
func permitsLinkAndAttrs(t *testing.T, p func(string) string, mtime time.Time) {
	t.Helper()
	for k := range 100 {
		l, f := p(fmt.Sprintf("d/tl%d", k%5)), p(fmt.Sprintf("d/tf%d", k%5))
		if err := os.Symlink("somewhere", l); err != nil {
			t.Fatal(err)
		}
		if got, err := os.Readlink(l); err != nil || got != "somewhere" {
			t.Fatalf("readlink of a new link: %q, %v", got, err)
		}
		createClosed(t, f)
		if err := os.Chmod(f, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(f, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(l); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("target/x", p("d/l")); err != nil {
		t.Fatal(err)
	}
	createClosed(t, p("d/f"))
	if err := os.Chmod(p("d/f"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p("d/f"), mtime.Add(-time.Hour), mtime.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p("d/f"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p("d/f"), mtime, mtime); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p("d/f"), os.Getuid(), os.Getgid()); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(p("d/s"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p("d/s"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(p("d/srv"), p("d/hard")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(p("d/srv")); err != nil || fi.Sys().(*syscall.Stat_t).Nlink != 2 {
		t.Fatalf("d/srv after its link: %v, %v; want 2 links", fi, err)
	}
	if err := os.Chmod(p("d"), 0o750); err != nil {
		t.Fatal(err)
	}
}

// newPermitsMountKept is newPermitsMount whose log is sent only by the
// test (a directory's fsync, a recall): not by its age, which a loaded
// machine may reach in the middle of the test's burst.
func newPermitsMountKept(t *testing.T, e *env, name string) *snfsMount {
	t.Helper()
	m := newPermitsMount(t, e, name, "")
	if !cachemgr.SetLogPolicy(m.v, time.Hour, 1<<20) {
		t.Fatal("no permits")
	}
	return m
}

// permitsPre makes, in the export at path p, what permitsLinkAndAttrs
// needs there before the mount lists d: d, and the file d/srv.
func permitsPre(t *testing.T, p func(string) string) {
	t.Helper()
	if err := os.MkdirAll(p("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p("d/srv"), []byte("srv"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkLinkAndAttrs checks what permitsLinkAndAttrs made, as path p (a
// function of a name) shows it.
func checkLinkAndAttrs(t *testing.T, who string, p func(string) string, mtime time.Time) {
	t.Helper()
	if got, err := os.Readlink(p("d/l")); err != nil || got != "target/x" {
		t.Errorf("%s: readlink d/l: %q, %v", who, got, err)
	}
	if fi, err := os.Lstat(p("d/l")); err != nil || fi.Mode()&os.ModeSymlink == 0 || fi.Size() != int64(len("target/x")) {
		t.Errorf("%s: d/l: %v, %v", who, fi, err)
	}
	fi, err := os.Lstat(p("d/f"))
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o640 || !mtimeOf(fi).Equal(mtime) {
		t.Errorf("%s: d/f: %v, %v (mtime %v); want 0640, mtime %v", who, fi, err, mtimeOf(fi), mtime)
	}
	if fi, err := os.Lstat(p("d/s")); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Errorf("%s: d/s: %v, %v; want a directory 0700", who, fi, err)
	}
	fs, err1 := os.Lstat(p("d/srv"))
	fh, err2 := os.Lstat(p("d/hard"))
	if err1 != nil || err2 != nil || !os.SameFile(fs, fh) || fs.Sys().(*syscall.Stat_t).Nlink != 2 {
		t.Errorf("%s: d/srv %v, %v and d/hard %v, %v: want one file with 2 links", who, fs, err1, fh, err2)
	}
	if fi, err := os.Lstat(p("d")); err != nil || fi.Mode().Perm() != 0o750 {
		t.Errorf("%s: d: %v, %v; want 0750", who, fi, err)
	}
	for k := range 5 {
		for _, n := range []string{"tl", "tf"} {
			if _, err := os.Lstat(p(fmt.Sprintf("d/%s%d", n, k))); !os.IsNotExist(err) {
				t.Errorf("%s: d/%s%d, removed: %v", who, n, k, err)
			}
		}
	}
}

// TestMountSNFSPermitsSymlinkSetattrLocal: with --permits=on, symbolic
// links made, read and removed, and files made, chmod'ed, touched and
// removed, in a listed directory cost no SYMLINK, READLINK, SETATTR, CREATE
// or REMOVE, fewer than 20 calls in all for 100 rounds; what is kept is
// seen by the mount at once (the link's target, the file's last mode and
// times, the directory's mode), reaches the server at the directory's
// fsync in one REINTEGRATE (the SETATTRs collapsed), and the mount and
// another one then see it as the server has it.
func TestMountSNFSPermitsSymlinkSetattrLocal(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, reg := leasedEnv(t)
	permitsPre(t, e.path)
	m := newPermitsMountKept(t, e, "permits-symlink")
	if _, err := os.ReadDir(m.path("d")); err != nil {
		t.Fatal(err)
	}
	mtime := time.Date(2020, 5, 6, 7, 8, 9, 123456789, time.UTC)
	before := allServerCalls(t, reg)
	byProc := serverCallsByProc(t, reg)
	permitsLinkAndAttrs(t, m.path, mtime)
	calls := allServerCalls(t, reg) - before
	diff := map[string]float64{}
	for p, v := range serverCallsByProc(t, reg) {
		if v != byProc[p] {
			diff[p] = v - byProc[p]
		}
	}
	t.Logf("calls: %v", diff)
	for _, p := range []string{"SYMLINK", "READLINK", "SETATTR", "LINK", "CREATE", "REMOVE", "MKDIR", "GETATTR", "ACCESS"} {
		if diff[p] != 0 {
			t.Errorf("%v %s calls under the permit", diff[p], p)
		}
	}
	if calls >= 20 {
		t.Errorf("100 rounds cost %v calls: %v; want fewer than 20", calls, diff)
	}
	// 100 x (symlink, create, chmod, utimes, 2 unlinks), then symlink,
	// create, 2 chmods, 2 utimes, chown, mkdir, chmod, link, chmod.
	if got := cachemgr.StatsOf(m.v).LocalChanges.Load(); got != 600+11 {
		t.Errorf("%d changes made locally; want %d", got, 600+11)
	}
	for _, n := range []string{"d/l", "d/f", "d/s", "d/hard"} {
		if _, err := os.Lstat(e.path(n)); !os.IsNotExist(err) {
			t.Errorf("%s on the server before the fsync: %v (not made locally?)", n, err)
		}
	}
	checkLinkAndAttrs(t, "the mount, before the fsync", m.path, mtime)

	before = allServerCalls(t, reg)
	byProc = serverCallsByProc(t, reg)
	dir, err := os.Open(m.path("d"))
	if err != nil {
		t.Fatal(err)
	}
	if err := dir.Sync(); err != nil {
		t.Fatalf("fsync of the directory: %v", err)
	}
	dir.Close()
	diff = map[string]float64{}
	for p, v := range serverCallsByProc(t, reg) {
		if v != byProc[p] {
			diff[p] = v - byProc[p]
		}
	}
	if diff["REINTEGRATE"] != 1 || allServerCalls(t, reg)-before != 1 {
		t.Errorf("the fsync's calls: %v; want one REINTEGRATE", diff)
	}
	checkLinkAndAttrs(t, "the server", e.path, mtime)
	checkLinkAndAttrs(t, "the mount, after the fsync", m.path, mtime)
	b := newSNFSMount(t, e, "permits-symlink-b", "", time.Hour)
	checkLinkAndAttrs(t, "another mount", b.path, mtime)
	// A SETATTR of the real objects now goes through the server.
	if err := os.Chmod(m.path("d/f"), 0o604); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(e.path("d/f")); err != nil || fi.Mode().Perm() != 0o604 {
		t.Errorf("d/f on the server after a chmod of the real file: %v, %v", fi, err)
	}
}

// TestMountSNFSPermitsSymlinkRecall: a link and a changed file made locally
// under A's permit are on the server, with their target, mode and times,
// once a libnfs client's create in the directory recalled the permit (the
// create waits for A's log), and libnfs and another mount then list them.
func TestMountSNFSPermitsSymlinkRecall(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	ls := requireTool(t, "nfs-ls")
	op := requireLibnfsOp(t)
	e := newEnv(t, "rw,no_root_squash")
	permitsPre(t, e.path)
	a := newPermitsMountKept(t, e, "permits-symlink-recall-a")
	b := newSNFSMount(t, e, "permits-symlink-recall-b", "", time.Hour)
	if _, err := os.ReadDir(a.path("d")); err != nil {
		t.Fatal(err)
	}
	mtime := time.Date(2021, 1, 2, 3, 4, 5, 0, time.UTC)
	permitsLinkAndAttrs(t, a.path, mtime)
	for _, n := range []string{"d/l", "d/hard"} {
		if _, err := os.Lstat(e.path(n)); !os.IsNotExist(err) {
			t.Fatalf("%s on the server before the recall: %v (not made locally?)", n, err)
		}
	}
	if fi, err := os.Lstat(e.path("d")); err != nil || fi.Mode().Perm() != 0o777 {
		t.Fatalf("d on the server before the recall: %v, %v; want 0777 still", fi, err)
	}
	c := command(op, "write", libnfsURL(e, e.dir+"/d/fromlibnfs"), "0", "create")
	c.Stdin = bytes.NewReader([]byte("x"))
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("nfs-op write: %v\n%s", err, out)
	}
	// The create returned: the recall ended, A's log is in.
	checkLinkAndAttrs(t, "the server after the recall", e.path, mtime)
	listed := nfsLs(t, ls, libnfsURL(e, e.dir+"/d"))
	for _, n := range []string{"l", "f", "s", "srv", "hard", "fromlibnfs"} {
		if !listed[n] {
			t.Errorf("libnfs does not list %s: %v", n, listed)
		}
	}
	checkLinkAndAttrs(t, "another mount", b.path, mtime)
	checkLinkAndAttrs(t, "the holder", a.path, mtime)
}

// TestMountSNFSPermitsKilledSymlink: a mount killed with SIGKILL after
// making a link and changing a file's attributes locally: the remount
// reintegrates its log before it serves, and the server has the link, the
// file's last mode and times, the directory's mode. With
// --permit-data=on (the default) the file's local data is pushed after
// the reintegration: its times, set locally, are kept with that data for
// the restarted mount to set again (before, the push stamped the remount's
// time as its mtime).
func TestMountSNFSPermitsKilledSymlink(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	for _, data := range []string{"off", "on"} {
		t.Run("permit-data="+data, func(t *testing.T) {
			t.Parallel()
			s := newServeProc(t)
			permitsPre(t, s.path)
			a := startMount(t, s, "", "", "--permits=on", "--permit-data="+data)
			if _, err := os.ReadDir(a.path("d")); err != nil {
				t.Fatal(err)
			}
			mtime := time.Date(2019, 9, 8, 7, 6, 5, 432100000, time.UTC)
			permitsLinkAndAttrs(t, a.path, mtime)
			for _, n := range []string{"d/l", "d/f", "d/s", "d/hard"} {
				if _, err := os.Lstat(s.path(n)); !os.IsNotExist(err) {
					t.Fatalf("%s on the server before the kill: %v (not made locally?)", n, err)
				}
			}
			a.kill9()
			b := startMount(t, s, a.dir, a.cacheDir, "--permits=on", "--permit-data="+data)
			if v := scrape(t, b.metrics, "snfs_client_cml_records"); v != 0 {
				t.Errorf("snfs_client_cml_records after the remount = %v; want 0", v)
			}
			checkLinkAndAttrs(t, "the server after the remount", s.path, mtime)
			checkLinkAndAttrs(t, "the remount", b.path, mtime)
		})
	}
}

// TestMountSNFSPermitsSetattrThrough: the SETATTRs not made locally go
// through the server, right: a set-user-ID bit on a file made locally (it
// is resolved first: one REINTEGRATE), a chown of it to another owner; and
// a link's own times (utimensat with AT_SYMLINK_NOFOLLOW) are made locally
// and reach the server on the link, not its target.
func TestMountSNFSPermitsSetattrThrough(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, reg := keptEnv(t, nil)
	permitsPre(t, e.path)
	m := newPermitsMountKept(t, e, "permits-setattr-through")
	if _, err := os.ReadDir(m.path("d")); err != nil {
		t.Fatal(err)
	}
	createClosed(t, m.path("d/x"))
	byProc := serverCallsByProc(t, reg)
	if err := syscall.Chmod(m.path("d/x"), 0o4755); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(e.path("d/x")); err != nil || fi.Mode()&os.ModeSetuid == 0 {
		t.Fatalf("d/x on the server after chmod 04755: %v, %v", fi, err)
	}
	if err := os.Chown(m.path("d/x"), 1234, -1); err != nil {
		t.Fatal(err)
	}
	if got := serverCallsByProc(t, reg)["SETATTR"] - byProc["SETATTR"]; got != 2 {
		t.Errorf("%v SETATTR calls for a set-user-ID chmod and a chown to another; want 2", got)
	}
	fi, err := os.Lstat(e.path("d/x"))
	if err != nil || fi.Sys().(*syscall.Stat_t).Uid != 1234 {
		t.Fatalf("d/x on the server: %v, %v; want owner 1234", fi, err)
	}
	if fi, err := os.Lstat(m.path("d/x")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 1234 {
		t.Errorf("d/x on the mount: %v, %v; want owner 1234", fi, err)
	}
	if err := os.Symlink("d/x", m.path("d/l")); err != nil {
		t.Fatal(err)
	}
	mt := time.Date(2018, 1, 2, 3, 4, 5, 0, time.UTC)
	byProc = serverCallsByProc(t, reg)
	ts := []unix.Timespec{unix.NsecToTimespec(mt.UnixNano()), unix.NsecToTimespec(mt.UnixNano())}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, m.path("d/l"), ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
	if got := serverCallsByProc(t, reg)["SETATTR"] - byProc["SETATTR"]; got != 0 {
		t.Errorf("%v SETATTR calls for a new link's times; want 0", got)
	}
	if fi, err := os.Lstat(m.path("d/l")); err != nil || !mtimeOf(fi).Equal(mt) {
		t.Errorf("d/l on the mount: %v, %v", fi, err)
	}
	dir, err := os.Open(m.path("d"))
	if err != nil {
		t.Fatal(err)
	}
	if err := dir.Sync(); err != nil {
		t.Fatal(err)
	}
	dir.Close()
	if fi, err := os.Lstat(e.path("d/l")); err != nil || !mtimeOf(fi).Equal(mt) {
		t.Errorf("d/l on the server: %v, %v; want mtime %v", fi, err, mt)
	}
	if fi, err := os.Stat(e.path("d/x")); err != nil || mtimeOf(fi).Equal(mt) {
		t.Errorf("d/x on the server: %v, %v; the link's times went to its target", fi, err)
	}
}

// TestMountSymlinkTargetKnown: a symbolic link made through the server
// (no permits) is read back without a READLINK: the mount knows the target
// it sent, which the server stores as given.
func TestMountSymlinkTargetKnown(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, reg := keptEnv(t, nil)
	m := newSNFSMount(t, e, "symlink-target", "", time.Hour)
	if err := os.Symlink("some/where", m.path("l")); err != nil {
		t.Fatal(err)
	}
	before := serverCallsByProc(t, reg)["READLINK"]
	if got, err := os.Readlink(m.path("l")); err != nil || got != "some/where" {
		t.Fatalf("readlink: %q, %v", got, err)
	}
	if n := serverCallsByProc(t, reg)["READLINK"] - before; n != 0 {
		t.Errorf("%v READLINK calls for a link the mount made", n)
	}
	if got, err := os.Readlink(e.path("l")); err != nil || got != "some/where" {
		t.Errorf("the server's link: %q, %v", got, err)
	}
}

// TestMountSNFSPermitsSetattrDuringReintegration: files made locally and
// changed (chmod, utimes, chmod) by four writers while the directory is
// fsynced again and again (each fsync a reintegration, which settles the
// objects made so far): every SETATTR names an object its log still makes
// or one it knows the handle of, so none is refused, and the server ends
// with each file's last mode and times.
func TestMountSNFSPermitsSetattrDuringReintegration(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, _ := keptEnv(t, nil)
	permitsPre(t, e.path)
	m := newPermitsMount(t, e, "permits-setattr-race", "")
	if _, err := os.ReadDir(m.path("d")); err != nil {
		t.Fatal(err)
	}
	mtime := time.Date(2022, 3, 4, 5, 6, 7, 0, time.UTC)
	const writers, files = 4, 100
	done := make(chan error, writers)
	for w := range writers {
		go func() {
			for k := range files {
				p := m.path(fmt.Sprintf("d/w%d-%03d", w, k))
				f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
				if err == nil {
					err = f.Close()
				}
				if err == nil {
					err = os.Chmod(p, 0o600)
				}
				if err == nil {
					err = os.Chtimes(p, mtime, mtime)
				}
				if err == nil {
					err = os.Chmod(p, 0o640)
				}
				if err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	dir, err := os.Open(m.path("d"))
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	for left := writers; left > 0; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			left--
		default:
			if err := dir.Sync(); err != nil {
				t.Fatalf("fsync of the directory: %v", err)
			}
		}
	}
	if err := dir.Sync(); err != nil {
		t.Fatal(err)
	}
	if n := cachemgr.StatsOf(m.v).Conflicts.Load(); n != 0 {
		t.Errorf("%d conflicts", n)
	}
	for w := range writers {
		for k := range files {
			n := fmt.Sprintf("d/w%d-%03d", w, k)
			fi, err := os.Lstat(e.path(n))
			if err != nil || fi.Mode().Perm() != 0o640 || !mtimeOf(fi).Equal(mtime) {
				t.Fatalf("%s on the server: %v, %v; want 0640, mtime %v", n, fi, err, mtime)
			}
		}
	}
}
