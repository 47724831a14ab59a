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

	"snfs/mount/fusefs"
)

// TestMountUserAllowOther: a user's mount with -o allow_other, through the
// real binary as nobody. Without user_allow_other in /etc/fuse.conf it is
// refused before mounting with the reason (fusermount3 would refuse it
// with "fusermount exited with code 256"); with it, the mount is
// allow_other and root reads it. Before, -o allow_other was accepted and
// dropped: the mount was nobody's alone and root got EACCES. The test sets
// /etc/fuse.conf and /dev/fuse's mode and puts both back.
func TestMountUserAllowOther(t *testing.T) {
	// Serial (no t.Parallel): it changes /dev/fuse's mode and /etc/fuse.conf.
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
	if err := os.WriteFile(e.path("f"), []byte("for all"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := "127.0.0.1:" + e.dir
	port := fmt.Sprint(e.port())
	home, run := nobodyDir(t, "snfs-home-"), nobodyDir(t, "snfs-run-")
	env := []string{"HOME=" + home, "XDG_CACHE_HOME=", "XDG_RUNTIME_DIR=" + run}

	var st syscall.Stat_t
	if err := syscall.Stat("/dev/fuse", &st); err != nil {
		t.Fatal(err)
	}
	mode := os.FileMode(st.Mode & 0o7777)
	t.Cleanup(func() { os.Chmod("/dev/fuse", mode) })
	if err := os.Chmod("/dev/fuse", 0o666); err != nil {
		t.Fatal(err)
	}
	const conf = "/etc/fuse.conf"
	old, err := os.ReadFile(conf)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if old == nil {
			os.Remove(conf)
		} else {
			os.WriteFile(conf, old, 0o644)
		}
	})
	var without []string
	for _, l := range strings.Split(string(old), "\n") {
		if strings.TrimSpace(l) != "user_allow_other" {
			without = append(without, l)
		}
	}
	if err := os.WriteFile(conf, []byte(strings.Join(without, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}

	dir := nobodyDir(t, "snfs-uao-")
	detachAll(t, dir)
	mountArgs := []string{"mount", "-o", "allow_other", "--nfs-port", port, "--mount-port", port, spec, dir}
	out, code := runNobody(t, asNobody(env, bin, mountArgs...))
	want := "snfs: -o allow_other: fusermount3 lets a user's mount be used by other users only with user_allow_other in /etc/fuse.conf; " +
		"add that line (as root), or mount without allow_other (the mount is then for you alone)\n"
	if code != 1 || out != want {
		t.Fatalf("snfs mount -o allow_other as nobody, no user_allow_other: exit %d, %q; want exit 1, %q", code, out, want)
	}
	if n := mountsOn(t, dir); n != 0 {
		t.Fatalf("the refused mount left %d mounts on %s", n, dir)
	}

	if err := os.WriteFile(conf, []byte(strings.Join(append(without, "user_allow_other", ""), "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code = runNobody(t, asNobody(env, bin, mountArgs...))
	if code != 0 || withoutMountedLine(out) != "" {
		t.Fatalf("snfs mount -o allow_other as nobody, with user_allow_other: exit %d, %q", code, out)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(b) != "for all" {
		t.Fatalf("root reads nobody's allow_other mount: %q, %v", b, err)
	}
	if out, code := runNobody(t, asNobody(env, bin, "umount", dir)); code != 0 || out != "" {
		t.Fatalf("snfs umount as nobody: exit %d, %q", code, out)
	}
}
