package tests

import (
	"path/filepath"
	"testing"
)

// TestMountPointMissing: snfs mount and snfs umount of a directory that
// does not exist say so, as mount(8) does, through the real binary; the
// mount checks it before any call to the server. Before, both said
// "lstat PATH: no such file or directory".
func TestMountPointMissing(t *testing.T) {
	t.Parallel()
	bin := snfsBinary(t)
	parent := cliMountDir(t, "snfs-nodir-")
	missing := filepath.Join(parent, "mnt")
	want := "snfs: mount point " + missing + ": no such file or directory\n"
	for _, args := range [][]string{
		{"mount", "--nfs-port", "1", "--mount-port", "1", "127.0.0.1:/srv/share", "mnt"},
		{"umount", "mnt"},
	} {
		if out, code := runIn(t, bin, parent, args...); code != 1 || out != want {
			t.Errorf("snfs %q in %s: exit %d, %q; want exit 1, %q", args, parent, code, out, want)
		}
	}
}
