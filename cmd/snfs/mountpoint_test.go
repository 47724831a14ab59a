package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestParseMountinfo: the mounts on one directory, bottom first, with
// mountinfo's octal escapes undone (a mount point with a space).
func TestParseMountinfo(t *testing.T) {
	const mi = `22 1 0:21 / /proc rw,nosuid - proc proc rw
40 27 0:39 / /var/tmp/my\040mnt rw,nosuid,nodev,relatime shared:1 - fuse.snfs 127.0.0.1:/srv/a\040b rw,user_id=0
41 40 0:40 / /var/tmp/my\040mnt rw,nosuid,nodev,relatime - fuse.snfs 127.0.0.1:/srv/c rw,user_id=0
42 27 0:41 / /var/tmp/my rw - ext4 /dev/vdb rw
`
	got, err := parseMountinfo(strings.NewReader(mi), "/var/tmp/my mnt")
	if err != nil {
		t.Fatal(err)
	}
	want := []mountEntry{
		{dir: "/var/tmp/my mnt", fsType: "fuse.snfs", source: "127.0.0.1:/srv/a b"},
		{dir: "/var/tmp/my mnt", fsType: "fuse.snfs", source: "127.0.0.1:/srv/c"},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if s := unescapeMountinfo(`a\134b\04`); s != `a\b\04` {
		t.Errorf("unescape: %q", s)
	}
}

// TestResolveMountPoint: relative, with trailing slashes and through a
// symbolic link, a mount point resolves to the path the kernel lists.
func TestResolveMountPoint(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	real := filepath.Join(base, "mnt")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("mnt", filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	t.Chdir(base)
	for _, p := range []string{"mnt", "mnt/", "./mnt//", "link", "link/", filepath.Join(base, "link"), "../" + filepath.Base(base) + "/mnt"} {
		if got, err := resolveMountPoint(p); err != nil || got != real {
			t.Errorf("resolveMountPoint(%q) = %q, %v; want %q", p, got, err, real)
		}
	}
	if _, err := resolveMountPoint("missing"); !os.IsNotExist(err) {
		t.Errorf("resolveMountPoint(missing): %v, want not exist", err)
	}
}
