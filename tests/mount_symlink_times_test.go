package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestMountSymlinkTimes: a symlink's own times are set with SETATTR on the
// link's handle, not its target's: `cp -a` of a tree with symlinks (a
// dangling one too) keeps their times, and `touch -h` sets them (both
// modes). Both failed with EOPNOTSUPP ("preserving times for 'link'").
func TestMountSymlinkTimes(t *testing.T) {
	t.Parallel()
	for _, bin := range []string{"cp", "touch"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skip("needs " + bin + " (coreutils)")
		}
	}
	src := diskTempDir(t, "snfs-src-")
	if err := os.MkdirAll(filepath.Join(src, "tree", "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "tree", "d", "f"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	linkTime := time.Unix(1000000000, 123000000)
	for name, target := range map[string]string{"link": "d/f", "dangling": "nowhere"} {
		l := filepath.Join(src, "tree", name)
		if err := os.Symlink(target, l); err != nil {
			t.Fatal(err)
		}
		ts := []unix.Timespec{unix.NsecToTimespec(linkTime.UnixNano()), unix.NsecToTimespec(linkTime.UnixNano())}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, l, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Fatal(err)
		}
	}
	lmtime := func(p string) time.Time {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		return time.Unix(st.Mtim.Unix())
	}
	for _, mode := range []string{"nfs", "snfs"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, "rw,no_root_squash")
			mnt := mountDirOf(t, e, mode)
			if out, err := command("cp", "-a", filepath.Join(src, "tree"), filepath.Join(mnt, "copy")).CombinedOutput(); err != nil {
				t.Fatalf("cp -a: %v\n%s", err, out)
			}
			if mode == "snfs" {
				// The copy was made under write-back permits: on the
				// server once the directory's fsync sent the log.
				syncDir(t, filepath.Join(mnt, "copy"))
			}
			for _, name := range []string{"link", "dangling"} {
				for _, p := range []string{filepath.Join(mnt, "copy", name), e.path("copy/" + name)} {
					if got := lmtime(p); !got.Equal(linkTime) {
						t.Errorf("%s: mtime %v; want %v (cp -a's)", p, got, linkTime)
					}
				}
			}
			targetBefore := lmtime(filepath.Join(mnt, "copy", "d", "f"))
			l := filepath.Join(mnt, "copy", "link")
			if out, err := command("touch", "-h", "-d", "@1200000000", l).CombinedOutput(); err != nil {
				t.Fatalf("touch -h: %v\n%s", err, out)
			}
			want := time.Unix(1200000000, 0)
			for _, p := range []string{l, e.path("copy/link")} {
				if got := lmtime(p); !got.Equal(want) {
					t.Errorf("%s after touch -h: mtime %v; want %v", p, got, want)
				}
			}
			if got := lmtime(filepath.Join(mnt, "copy", "d", "f")); !got.Equal(targetBefore) {
				t.Errorf("touch -h changed the link's target: mtime %v, was %v", got, targetBefore)
			}
		})
	}
}
