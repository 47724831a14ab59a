package tests

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMountDisconnectedSymlink: offline, symbolic links are made in a
// directory the mount has listed and in directories made offline: GNU tar
// extracts a tree holding links (relative, into a subdirectory, to a
// directory, dangling; their owners and times restored with lchown and
// lutimes), `ln -s` makes one, and one is renamed and one removed. Offline,
// readlink answers each target; back online the export holds the tree a
// local extraction (with the same ln, mv and rm) makes: the same names,
// targets, bytes, modes, owners and mtimes, and no conflict.
func TestMountDisconnectedSymlink(t *testing.T) {
	t.Parallel()
	tarBin, err := exec.LookPath("tar")
	if err != nil {
		t.Skip("no tar here")
	}
	// The tarball: a small tree with links of every kind.
	src := diskTempDir(t, "snfs-symlink-src")
	for name, data := range map[string]string{"a": "file a\n", "sub/b": "file b\n", "sub/deep/c": "file c\n"} {
		p := filepath.Join(src, "t", name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, target := range map[string]string{"l1": "a", "sub/l2": "../a", "ldir": "sub", "sub/deep/l3": "../b",
		"dangling": "nowhere/at/all", "sub/rel": "deep/c"} {
		if err := os.Symlink(target, filepath.Join(src, "t", name)); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := command("touch", "-h", "-d", old.Format(time.RFC3339), filepath.Join(src, "t", "l1")).Run(); err != nil {
		t.Fatal(err)
	}
	tb := filepath.Join(src, "links.tar")
	if out, err := command(tarBin, "-cf", tb, "-C", src, "t").CombinedOutput(); err != nil {
		t.Fatalf("tar c: %v\n%s", err, out)
	}
	// What the same steps make on a local disk.
	changes := func(root string) error {
		if err := os.Symlink("t/sub/b", filepath.Join(root, "made")); err != nil {
			return err
		}
		if err := os.Rename(filepath.Join(root, "t/sub/l2"), filepath.Join(root, "t/sub/moved")); err != nil {
			return err
		}
		if err := os.Remove(filepath.Join(root, "t/dangling")); err != nil {
			return err
		}
		// The times those changes set depend on when they ran: set them
		// (lutimes of the new link, utimes of the changed directories).
		for _, name := range []string{"made", "t", "t/sub"} {
			if out, err := command("touch", "-h", "-d", old.Format(time.RFC3339), filepath.Join(root, name)).CombinedOutput(); err != nil {
				return fmt.Errorf("touch -h %s: %w: %s", name, err, out)
			}
		}
		return nil
	}
	local := diskTempDir(t, "snfs-symlink-local")
	if out, err := command(tarBin, "-xf", tb, "-C", local).CombinedOutput(); err != nil {
		t.Fatalf("local extraction: %v\n%s", err, out)
	}
	if err := changes(local); err != nil {
		t.Fatal(err)
	}

	s := newServeProc(t, "--grace", "2s")
	if err := os.Mkdir(s.path("work"), 0o777); err != nil {
		t.Fatal(err)
	}
	m := startMount(t, s, "", "", "--disconnected=auto", "--disconnect-after=2s", "--log-level=debug")
	if _, err := os.ReadDir(m.path("work")); err != nil { // its listing, kept offline
		t.Fatal(err)
	}
	goOfflineReq(t, m)
	if out, err := command(tarBin, "-xf", tb, "-C", m.path("work")).CombinedOutput(); err != nil {
		t.Fatalf("tar x offline: %v\n%s\n%s", err, out, tail(m.logPath, 40))
	}
	if err := changes(m.path("work")); err != nil {
		t.Fatalf("ln -s, mv, rm offline: %v\n%s", err, tail(m.logPath, 40))
	}
	if d := treeMeta(t, local, m.path("work")) + linkTargets(t, local, m.path("work")); d != "" {
		t.Fatalf("offline, the mount's tree differs from a local extraction:\n%s", d)
	}
	// Through the links, offline: the kernel follows them here.
	if got, err := os.ReadFile(m.path("work/t/ldir/deep/c")); err != nil || string(got) != "file c\n" {
		t.Fatalf("offline read through a link to a directory: %q, %v", got, err)
	}
	if v, _ := metricSum(m.metrics, "snfs_client_disconnected"); v != 1 {
		t.Fatalf("the mount came online during the test (disconnected %v)", v)
	}

	goOnlineReq(t, m)
	deadline := time.Now().Add(120 * time.Second)
	for {
		d := treeMeta(t, local, s.path("work")) + linkTargets(t, local, s.path("work"))
		if d == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after reconnection, the export's tree differs from a local extraction:\n%s\n%s", d, tail(m.logPath, 40))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if c := conflictLines(m); len(c) != 0 {
		t.Fatalf("conflicts recorded where nothing conflicted:\n%s", strings.Join(c, "\n"))
	}
	// And online, the mount reads the server's links.
	if got, err := os.Readlink(m.path("work/t/sub/moved")); err != nil || got != "../a" {
		t.Fatalf("online readlink of the moved link: %q, %v", got, err)
	}
}

// linkTargets compares the targets of the symbolic links under want with
// those of the same names under got; "" when they agree.
func linkTargets(t *testing.T, want, got string) string {
	t.Helper()
	var diffs []string
	err := filepath.WalkDir(want, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.Type()&os.ModeSymlink == 0 {
			return err
		}
		rel, _ := filepath.Rel(want, p)
		w, _ := os.Readlink(p)
		g, err := os.Readlink(filepath.Join(got, rel))
		if err != nil || g != w {
			diffs = append(diffs, rel+": target "+g+" ("+errString(err)+"), want "+w)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(diffs, "\n")
}

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// TestMountDisconnectedLink: offline, hard links of files the server made
// are made in a directory the mount has listed: the new name reads the
// file's bytes and both names report two links. Back online the export
// holds the link (one inode, two names). A link of a file that a process
// on the server removed meanwhile is refused at reconnection and kept as
// the one conflict (a real one). Two hard links of a file made offline,
// one removed again, are on the export too: one inode, two names, its
// data once.
func TestMountDisconnectedLink(t *testing.T) {
	t.Parallel()
	s := newServeProc(t, "--grace", "2s")
	if err := os.Mkdir(s.path("work"), 0o777); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"kept", "doomed"} {
		if err := os.WriteFile(s.path("work/"+name), []byte("the server's "+name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m := startMount(t, s, "", "", "--disconnected=auto", "--disconnect-after=2s", "--log-level=debug")
	if _, err := os.ReadDir(m.path("work")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"kept", "doomed"} { // their attributes and data, kept offline
		if _, err := os.ReadFile(m.path("work/" + name)); err != nil {
			t.Fatal(err)
		}
	}
	goOfflineReq(t, m)
	if err := os.Link(m.path("work/kept"), m.path("work/kept2")); err != nil {
		t.Fatalf("link offline: %v\n%s", err, tail(m.logPath, 30))
	}
	if got, err := os.ReadFile(m.path("work/kept2")); err != nil || string(got) != "the server's kept" {
		t.Fatalf("offline read of the new link: %q, %v", got, err)
	}
	for _, name := range []string{"kept", "kept2"} {
		var st syscall.Stat_t
		if err := syscall.Stat(m.path("work/"+name), &st); err != nil || st.Nlink != 2 {
			t.Fatalf("offline stat of %s: nlink %d, %v; want 2", name, st.Nlink, err)
		}
	}
	if err := os.Link(m.path("work/doomed"), m.path("work/doomed2")); err != nil {
		t.Fatalf("link offline: %v", err)
	}
	if err := os.Link(m.path("work/kept"), m.path("work/doomed")); !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("link offline over a listed name: %v; want EEXIST", err)
	}
	if err := os.WriteFile(m.path("work/new"), []byte("made offline"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Hard links of a file made offline (tar x of hard-linked members),
	// one of them removed again: the others keep the data.
	for _, name := range []string{"new2", "new3"} {
		if err := os.Link(m.path("work/new"), m.path("work/"+name)); err != nil {
			t.Fatalf("link offline of a file made offline: %v\n%s", err, tail(m.logPath, 30))
		}
	}
	if err := os.Remove(m.path("work/new3")); err != nil {
		t.Fatalf("remove offline of a link made offline: %v", err)
	}
	// The first name removed, the link keeps the file.
	if err := os.WriteFile(m.path("work/solo"), []byte("solo's"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(m.path("work/solo"), m.path("work/solo2")); err != nil {
		t.Fatalf("link offline of a file made offline: %v", err)
	}
	if err := os.Remove(m.path("work/solo")); err != nil {
		t.Fatalf("remove offline of a file made offline: %v", err)
	}
	if got, err := os.ReadFile(m.path("work/solo2")); err != nil || string(got) != "solo's" {
		t.Fatalf("offline read of solo2 after its first name's removal: %q, %v", got, err)
	}
	for _, name := range []string{"new", "new2"} {
		var st syscall.Stat_t
		if err := syscall.Stat(m.path("work/"+name), &st); err != nil || st.Nlink != 2 {
			t.Fatalf("offline stat of %s: nlink %d, %v; want 2", name, st.Nlink, err)
		}
		if got, err := os.ReadFile(m.path("work/" + name)); err != nil || string(got) != "made offline" {
			t.Fatalf("offline read of %s: %q, %v", name, got, err)
		}
	}
	if err := os.Remove(s.path("work/doomed")); err != nil { // another's change meanwhile
		t.Fatal(err)
	}
	goOnlineReq(t, m)
	waitConflictListed(t, m.cacheDir, time.Now().Add(60*time.Second), "doomed2")
	var a, b syscall.Stat_t
	if err := syscall.Stat(s.path("work/kept"), &a); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(s.path("work/kept2"), &b); err != nil || a.Ino != b.Ino || a.Nlink != 2 {
		t.Fatalf("the export's kept2: ino %d nlink %d (%v); want kept's inode %d with 2 links", b.Ino, a.Nlink, err, a.Ino)
	}
	// The data of a file made offline is written after the log (its
	// CREATE) is in: waited for.
	waitExport(t, m, s.path("work"), map[string][]byte{"kept": []byte("the server's kept"),
		"kept2": []byte("the server's kept"), "new": []byte("made offline"), "new2": []byte("made offline"), "solo2": []byte("solo's")}, 60*time.Second)
	if err := syscall.Stat(s.path("work/new"), &a); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(s.path("work/new2"), &b); err != nil || a.Ino != b.Ino || a.Nlink != 2 {
		t.Fatalf("the export's new2: ino %d nlink %d (%v); want new's inode %d with 2 links", b.Ino, a.Nlink, err, a.Ino)
	}
	if _, err := os.Lstat(s.path("work/doomed2")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the export's doomed2: %v; want none (its file was removed meanwhile)", err)
	}
	if c := conflictLines(m); len(c) != 1 {
		t.Fatalf("conflicts recorded: %q; want one, the LINK of doomed", c)
	}
}
