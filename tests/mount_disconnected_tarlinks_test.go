package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMountDisconnectedTarLinks: offline, GNU tar extracts an archive with
// hard-linked members (a file with three names, one in another directory)
// over a tree the server made (its directory "a" exists, listed by the
// mount). tar links the later members to the first (files made offline)
// and restores the existing directory's mode and times (a SETATTR of a
// directory the server made). Back online the export holds what a local
// extraction over the same tree holds: names, bytes, modes, mtimes, and
// one inode per linked file with its link count; no conflict.
func TestMountDisconnectedTarLinks(t *testing.T) {
	t.Parallel()
	tarBin, err := exec.LookPath("tar")
	if err != nil {
		t.Skip("no tar here")
	}
	src := diskTempDir(t, "snfs-tarlinks-src")
	for _, d := range []string{"a", "b"} {
		if err := os.Mkdir(filepath.Join(src, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "a/one"), randBytes(4711, 30000), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "b/two"), []byte("two's"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, l := range [][2]string{{"a/one", "a/one.hard"}, {"a/one", "b/one.hard"}, {"b/two", "b/two.hard"}} {
		if err := os.Link(filepath.Join(src, l[0]), filepath.Join(src, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Date(2003, 4, 5, 6, 7, 8, 0, time.UTC)
	for _, p := range []string{"a/one", "b/two", "a", "b"} {
		if err := os.Chtimes(filepath.Join(src, p), old, old); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(src, "a"), 0o750); err != nil {
		t.Fatal(err)
	}
	ball := filepath.Join(diskTempDir(t, "snfs-tarlinks-ball"), "links.tar")
	if out, err := command(tarBin, "-cf", ball, "-C", src, "a", "b").CombinedOutput(); err != nil {
		t.Fatalf("tar c: %v\n%s", err, out)
	}
	local := diskTempDir(t, "snfs-tarlinks-local")
	if err := os.Mkdir(filepath.Join(local, "a"), 0o777); err != nil { // as on the server
		t.Fatal(err)
	}
	if out, err := command(tarBin, "-xf", ball, "-C", local).CombinedOutput(); err != nil {
		t.Fatalf("local extraction: %v\n%s", err, out)
	}

	s := newServeProc(t, "--grace", "2s")
	if err := os.MkdirAll(s.path("work/a"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(s.path("work/a"), 0o777); err != nil {
		t.Fatal(err)
	}
	m := startMount(t, s, "", "", "--disconnected=auto", "--disconnect-after=2s", "--log-level=debug")
	for _, d := range []string{"work", "work/a"} {
		if _, err := os.ReadDir(m.path(d)); err != nil {
			t.Fatal(err)
		}
	}
	goOfflineReq(t, m)
	if out, err := command(tarBin, "-xf", ball, "-C", m.path("work")).CombinedOutput(); err != nil {
		t.Fatalf("tar x offline: %v\n%s\n%s", err, out, tail(m.logPath, 40))
	}
	if d := treeMeta(t, local, m.path("work")); d != "" {
		t.Fatalf("offline, the mount's tree differs from a local extraction:\n%s", d)
	}
	goOnlineReq(t, m)
	deadline := time.Now().Add(120 * time.Second)
	for {
		d := treeMeta(t, local, s.path("work"))
		if d == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after reconnection, the export's tree differs from a local extraction:\n%s\n%s", d, tail(m.logPath, 40))
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, g := range [][]string{{"a/one", "a/one.hard", "b/one.hard"}, {"b/two", "b/two.hard"}} {
		var first syscall.Stat_t
		for k, name := range g {
			var st syscall.Stat_t
			if err := syscall.Stat(s.path("work/"+name), &st); err != nil {
				t.Fatal(err)
			}
			if k == 0 {
				first = st
			}
			if st.Ino != first.Ino || int(st.Nlink) != len(g) {
				t.Fatalf("the export's %s: ino %d nlink %d; want %s's inode %d with %d links", name, st.Ino, st.Nlink, g[0], first.Ino, len(g))
			}
		}
	}
	if c := conflictLines(m); len(c) != 0 {
		t.Fatalf("conflicts recorded where nothing conflicted:\n%s", strings.Join(c, "\n"))
	}
}
