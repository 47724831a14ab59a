package tests

import (
	"os"
	"syscall"
	"testing"
	"time"

	"snfs/mount/cachemgr"
)

// TestMountSNFSPermitsLocalAttrs: the attributes a change made locally
// under a write-back permit changes besides the entries are what POSIX
// says, as the server would have made them (pjdfstest's open/00.t,
// mkdir/00.t, link/00.t, unlink/00.t, rename/23.t with --permits=on):
// the parent directory's mtime and ctime after a create, mkdir, link,
// unlink, rmdir or rename in it; its link count after a mkdir and an
// rmdir; the link count and ctime of a file that loses one of its names
// (unlink, rename over it), also after a chmod of it went through the
// server (whose reply gives the server's count: the log goes first).
// Before, the directory kept its old times and count until the
// reintegration, and the file its old count.
func TestMountSNFSPermitsLocalAttrs(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	if err := os.MkdirAll(e.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	a := newPermitDataMount(t, e, "permits-local-attrs", "") // the default mount
	if _, err := os.ReadDir(a.path("d")); err != nil {
		t.Fatal(err)
	}
	stat := func(p string) syscall.Stat_t {
		t.Helper()
		var st syscall.Stat_t
		if err := syscall.Lstat(a.path(p), &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	ts := func(s syscall.Timespec) time.Time { return time.Unix(s.Unix()) }
	local0 := cachemgr.StatsOf(a.v).LocalChanges.Load()
	// changed runs op and checks that d's mtime and ctime moved past what
	// they were before it, and that its link count is then links.
	changed := func(what string, links uint64, op func() error) {
		t.Helper()
		before := stat("d")
		time.Sleep(10 * time.Millisecond) // the clock moves past before's times
		if err := op(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		after := stat("d")
		if !ts(after.Mtim).After(ts(before.Mtim)) || !ts(after.Ctim).After(ts(before.Ctim)) {
			t.Errorf("after %s: d's mtime %v, ctime %v; want both after %v, %v", what,
				ts(after.Mtim), ts(after.Ctim), ts(before.Mtim), ts(before.Ctim))
		}
		if after.Nlink != links {
			t.Errorf("after %s: d's link count %d; want %d", what, after.Nlink, links)
		}
	}
	changed("a create", 2, func() error { return os.WriteFile(a.path("d/f"), []byte("f"), 0o644) })
	changed("a mkdir", 3, func() error { return os.Mkdir(a.path("d/s"), 0o755) })
	changed("an rmdir", 2, func() error { return os.Remove(a.path("d/s")) })
	changed("a link", 2, func() error { return os.Link(a.path("d/f"), a.path("d/g")) })
	if st := stat("d/f"); st.Nlink != 2 {
		t.Errorf("d/f after the link: %d links; want 2", st.Nlink)
	}
	// A chmod of the file goes through the server (not covered by d's
	// permit), and its reply's link count must count the link made here.
	if err := os.Chmod(a.path("d/g"), 0o600); err != nil {
		t.Fatal(err)
	}
	if st := stat("d/f"); st.Nlink != 2 || st.Mode&0o777 != 0o600 {
		t.Errorf("d/f after a chmod through the server: %d links, mode %o; want 2, 600", st.Nlink, st.Mode&0o777)
	}
	before := stat("d/g")
	changed("an unlink", 2, func() error { return os.Remove(a.path("d/f")) })
	if st := stat("d/g"); st.Nlink != 1 || !ts(st.Ctim).After(ts(before.Ctim)) {
		t.Errorf("d/g after the unlink of d/f: %d links, ctime %v; want 1, after %v", st.Nlink, ts(st.Ctim), ts(before.Ctim))
	}
	if err := os.Link(a.path("d/g"), a.path("d/h")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(a.path("d/n"), []byte("n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before = stat("d/h")
	changed("a rename over a linked file", 2, func() error { return os.Rename(a.path("d/n"), a.path("d/g")) })
	if st := stat("d/h"); st.Nlink != 1 || !ts(st.Ctim).After(ts(before.Ctim)) {
		t.Errorf("d/h after a rename over d/g: %d links, ctime %v; want 1, after %v", st.Nlink, ts(st.Ctim), ts(before.Ctim))
	}
	if got := cachemgr.StatsOf(a.v).LocalChanges.Load() - local0; got < 8 {
		t.Errorf("%d changes made locally; want at least 8 (the test is about those)", got)
	}
	// What the mount showed is what the server has once it is sent (the
	// times: the server's, of the reintegration).
	syncDir(t, a.path("d"))
	for n, links := range map[string]uint64{"d": 2, "d/g": 1, "d/h": 1} {
		var st syscall.Stat_t
		if err := syscall.Lstat(e.path(n), &st); err != nil || st.Nlink != links {
			t.Errorf("the server's %s: %d links (%v); want %d", n, st.Nlink, err, links)
		}
	}
}

// TestMountSNFSPermitsRemoveOpenLinks: testRemoveOpenLinks under write-back
// permits (--permit-data=on, the default): a file made locally, linked
// (resolved first, then the link made locally), opened for writing by its
// new name, its first name removed while open. The OPEN's reply gave the
// server's link count (one: the LINK not yet sent), the removal then hid
// the file as if it were its last name, and its close dropped the data
// written through the open: the server and the mount had "one". The OPEN
// now sends the log first (permittimes.go).
func TestMountSNFSPermitsRemoveOpenLinks(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	a := newPermitDataMount(t, e, "permits-remove-open-links", "")
	testRemoveOpenLinks(t, a.dir, e.dir)
}
