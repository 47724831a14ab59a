package tests

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMountDisconnectedDirTimes: offline, a change of a directory's entries
// (create, mkdir, rmdir, rename, link, unlink) gives the directory the
// change's mtime and, for mkdir and rmdir, one link more or fewer, as POSIX
// says and as the mount does online under a permit: in a directory made
// offline (its ctime too) and in one the server made (listed before; its
// ctime stays the server's, the base its offline utimes are checked
// against). Tools that look at a directory's mtime to know whether to read
// it again (make of a directory target, backup and sync tools, git's
// untracked cache) must not see an offline change as none. Before, the
// directory kept the times it had (tar's, after a utimes of it). Back
// online: every change on the server, no conflict (the utimes of the
// server's directory after a change in it is not one), and the mount shows
// the server's times of that directory.
func TestMountDisconnectedDirTimes(t *testing.T) {
	t.Parallel()
	s := newServeProc(t, "--grace", "2s")
	if err := os.Mkdir(s.path("srv"), 0o777); err != nil {
		t.Fatal(err)
	}
	m := startMount(t, s, "", "", "--disconnected=auto", "--disconnect-after=2s", "--log-level=debug")
	for _, d := range []string{"", "srv"} {
		if _, err := os.ReadDir(m.path(d)); err != nil {
			t.Fatal(err)
		}
	}
	goOfflineReq(t, m)
	if err := os.Mkdir(m.path("off"), 0o755); err != nil {
		t.Fatal(err)
	}
	past := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, d := range []string{"off", "srv"} {
		dir := m.path(d)
		if err := os.WriteFile(dir+"/keep", []byte("kept"), 0o644); err != nil {
			t.Fatal(err)
		}
		st := func(what string) (time.Time, time.Time, uint64) {
			t.Helper()
			var s syscall.Stat_t
			if err := syscall.Stat(dir, &s); err != nil {
				t.Fatalf("%s: stat of %s after %s: %v", d, dir, what, err)
			}
			return time.Unix(s.Mtim.Unix()), time.Unix(s.Ctim.Unix()), s.Nlink
		}
		_, _, links0 := st("its making")
		steps := []struct {
			what  string
			do    func() error
			links uint64
		}{
			{"create", func() error { return os.WriteFile(dir+"/f", []byte("x"), 0o644) }, links0},
			{"mkdir", func() error { return os.Mkdir(dir+"/sub", 0o755) }, links0 + 1},
			{"rmdir", func() error { return os.Remove(dir + "/sub") }, links0},
			{"rename", func() error { return os.Rename(dir+"/f", dir+"/g") }, links0},
			{"link", func() error { return os.Link(dir+"/keep", dir+"/keep2") }, links0},
			{"unlink", func() error { return os.Remove(dir + "/g") }, links0},
		}
		for _, step := range steps {
			if err := os.Chtimes(dir, past, past); err != nil {
				t.Fatalf("%s: utimes offline: %v", d, err)
			}
			before := time.Now().Add(-time.Second)
			if err := step.do(); err != nil {
				t.Fatalf("%s: %s offline: %v", d, step.what, err)
			}
			mt, ct, links := st(step.what)
			if mt.Before(before) || d == "off" && ct.Before(before) {
				t.Fatalf("%s: after an offline %s, mtime %v, ctime %v; want the change's time (after %v)", d, step.what, mt, ct, before)
			}
			if links != step.links {
				t.Fatalf("%s: after an offline %s, %d links; want %d", d, step.what, links, step.links)
			}
		}
	}
	goOnlineReq(t, m)
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, e1 := os.Stat(s.path("off/keep2"))
		_, e2 := os.Stat(s.path("srv/keep2"))
		if e1 == nil && e2 == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after reconnection, the export's off/keep2 and srv/keep2: %v, %v", e1, e2)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, gone := range []string{"off/f", "off/g", "off/sub", "srv/f", "srv/g", "srv/sub"} {
		if _, err := os.Lstat(s.path(gone)); !os.IsNotExist(err) {
			t.Fatalf("after reconnection, the export's %s: %v; want it gone", gone, err)
		}
	}
	if c := conflictLines(m); len(c) != 0 {
		t.Fatalf("conflicts recorded where nothing conflicted:\n%s", strings.Join(c, "\n"))
	}
	// The mount shows the server's times of its directory once the log is in.
	deadline = time.Now().Add(30 * time.Second)
	for {
		want, err1 := os.Stat(s.path("srv"))
		got, err2 := os.Stat(m.path("srv"))
		if err1 == nil && err2 == nil && got.ModTime().Equal(want.ModTime()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after reconnection, the mount's srv: %v, %v; the server's: %v, %v", got, err2, want, err1)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
