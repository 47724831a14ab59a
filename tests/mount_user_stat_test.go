package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"snfs/mount/fusefs"
)

// TestStatUserMount: snfs stat on a mount made by a user other than root,
// through the real binary. The mount's stats socket is in that user's
// $XDG_RUNTIME_DIR/snfs: the user reads it there; root (another user) is
// told whose mount it is; a mount made without XDG_RUNTIME_DIR has none, and
// snfs stat says so. Before, the last two said "its mount process is older
// than snfs stat MOUNTPOINT; remount it", which remounting did not cure.
func TestStatUserMount(t *testing.T) {
	// Serial (no t.Parallel): it changes /dev/fuse's mode.
	requireFUSE(t)
	if _, err := exec.LookPath("setpriv"); err != nil {
		requireInCI(t, "setpriv not installed (util-linux)")
	}
	if _, err := fusefs.FusermountPath(); err != nil {
		requireInCI(t, "fusermount3 not installed (Debian's fuse3)")
	}
	bin := filepath.Join(cliMountDir(t, "snfs-userbin-"), "snfs")
	copyFile(t, snfsBinary(t), bin)
	os.Chmod(filepath.Dir(bin), 0o755)
	os.Chmod(bin, 0o755)
	e := newEnv(t, "rw,root_squash")
	spec := "127.0.0.1:" + e.dir
	port := fmt.Sprint(e.port())
	home, run := nobodyDir(t, "snfs-home-"), nobodyDir(t, "snfs-run-")

	var st syscall.Stat_t
	if err := syscall.Stat("/dev/fuse", &st); err != nil {
		t.Fatal(err)
	}
	mode := os.FileMode(st.Mode & 0o7777)
	t.Cleanup(func() { os.Chmod("/dev/fuse", mode) })
	if err := os.Chmod("/dev/fuse", 0o666); err != nil {
		t.Fatal(err)
	}
	dir := nobodyDir(t, "snfs-ustat-")
	detachAll(t, dir)

	for _, xdg := range []string{run, ""} {
		env := []string{"HOME=" + home, "XDG_CACHE_HOME=", "XDG_RUNTIME_DIR=" + xdg}
		out, code := runNobody(t, asNobody(env, bin, "mount", "--nfs-port", port, "--mount-port", port, spec, dir))
		if code != 0 || withoutMountedLine(out) != "" {
			t.Fatalf("snfs mount as nobody (XDG_RUNTIME_DIR=%q): exit %d, %q", xdg, code, out)
		}
		out, code = runNobody(t, asNobody(env, bin, "stat", dir))
		if xdg != "" {
			if code != 0 || !regexp.MustCompile(`(?m)^\s+nfs\s+3\s+FSINFO\s+1\s`).MatchString(out) {
				t.Fatalf("snfs stat as nobody with XDG_RUNTIME_DIR: exit %d, %q", code, out)
			}
		} else {
			want := "snfs: the snfs mount on " + dir + " has no stats socket here (/run/snfs/" + strings.ReplaceAll(strings.TrimPrefix(dir, "/"), "/", "%") + ".stats.sock): " +
				"a user's mount serves it in $XDG_RUNTIME_DIR/snfs, and XDG_RUNTIME_DIR is not set; set it, here and for snfs mount " +
				"(a mount made without it has none: remount it)\n"
			if code != 1 || out != want {
				t.Fatalf("snfs stat as nobody without XDG_RUNTIME_DIR: exit %d, %q; want exit 1, %q", code, out, want)
			}
		}
		out, code = runIn(t, bin, "/", "stat", dir)
		want := "snfs: the snfs mount on " + dir + " is uid 65534's: its stats socket is in that user's $XDG_RUNTIME_DIR/snfs; run snfs stat as that user\n"
		if code != 1 || out != want {
			t.Fatalf("snfs stat as root on nobody's mount: exit %d, %q; want exit 1, %q", code, out, want)
		}
		if out, code := runNobody(t, asNobody(env, bin, "umount", dir)); code != 0 || out != "" {
			t.Fatalf("snfs umount as nobody: exit %d, %q", code, out)
		}
	}
}
