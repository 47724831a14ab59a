package tests

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"snfs/mount/fusefs"
)

// Issue 23, item 6: `snfs mount` as a user other than root goes through the
// set-user-ID fusermount3 (Debian's fuse3), as sshfs and rclone do; where it
// cannot work, it says why plainly. The test runs the binary as nobody
// (setpriv), so it needs root itself.

// asNobody is a command running bin as nobody:nogroup with no supplementary
// groups and env added to the environment.
func asNobody(env []string, bin string, args ...string) *spawnCmd {
	cmd := command("setpriv", append([]string{"--reuid=nobody", "--regid=nogroup", "--clear-groups", bin}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

// runNobody runs cmd and returns its combined output and exit status.
func runNobody(t *testing.T, cmd *spawnCmd) (string, int) {
	t.Helper()
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exitError); ok {
		return string(out), ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%q: %v", cmd.Args, err)
	}
	return string(out), 0
}

// nobodyDir is a fresh directory under /var/tmp owned by nobody.
func nobodyDir(t *testing.T, pattern string) string {
	t.Helper()
	d := cliMountDir(t, pattern)
	if err := os.Chown(d, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestMountAsUser: as nobody, with /dev/fuse not accessible (mode 0600) the
// mount says so and how to fix it; with /dev/fuse mode 0666 (what udev sets
// on Debian) nobody mounts in nfs and in snfs mode through fusermount3, uses
// the mount, and unmounts it with snfs umount. Before, the mount failed with
// `exec: "/bin/fusermount": stat ...` (no fuse3), or fusermount3 refused
// allow_other.
func TestMountAsUser(t *testing.T) {
	// Serial (no t.Parallel): it changes /dev/fuse's mode.
	requireFUSE(t)
	if _, err := exec.LookPath("setpriv"); err != nil {
		requireInCI(t, "setpriv not installed (util-linux)")
	}
	if _, err := fusefs.FusermountPath(); err != nil {
		requireInCI(t, "fusermount3 not installed (Debian's fuse3)")
	}
	// A copy of the binary that nobody may run (snfsBinary's directory is
	// root's alone).
	bin := filepath.Join(cliMountDir(t, "snfs-userbin-"), "snfs")
	copyFile(t, snfsBinary(t), bin)
	os.Chmod(filepath.Dir(bin), 0o755)
	os.Chmod(bin, 0o755)
	e := newEnv(t, "rw,root_squash")
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

	dir := nobodyDir(t, "snfs-umnt-")
	detachAll(t, dir)
	if err := os.Chmod("/dev/fuse", 0o600); err != nil {
		t.Fatal(err)
	}
	out, code := runNobody(t, asNobody(env, bin, "mount", "--nfs-port", port, "--mount-port", port, spec, dir))
	want := "snfs: snfs mount needs root, or read and write access to /dev/fuse to mount as another user " +
		"(open /dev/fuse: permission denied; distributions make it mode 0666: chmod 0666 /dev/fuse)\n"
	if code != 1 || out != want {
		t.Fatalf("snfs mount as nobody, /dev/fuse 0600: exit %d, %q; want exit 1, %q", code, out, want)
	}
	if err := os.Chmod("/dev/fuse", 0o666); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"nfs", "snfs"} {
		out, code := runNobody(t, asNobody(env, bin, "mount", "--mode", mode, "--nfs-port", port, "--mount-port", port, spec, dir))
		if code != 0 || withoutMountedLine(out) != "" {
			t.Fatalf("snfs mount --mode %s as nobody: exit %d, %q; want exit 0, no output", mode, code, out)
		}
		if typ := mountType(t, dir); typ != "fuse.snfs" {
			t.Fatalf("%s mounted as %q, want fuse.snfs", dir, typ)
		}
		name := "by-nobody-" + mode
		p := filepath.Join(dir, name)
		out, code = runNobody(t, asNobody(nil, "/bin/sh", "-c", `printf %s "$1" >"$2" && cat "$2"`, "sh", name, p))
		if code != 0 || out != name {
			t.Fatalf("nobody writes and reads %s through the mount: exit %d, %q", p, code, out)
		}
		out, code = runNobody(t, asNobody(env, bin, "umount", dir))
		if code != 0 || out != "" {
			t.Fatalf("snfs umount as nobody: exit %d, %q; want exit 0, no output", code, out)
		}
		if n := mountsOn(t, dir); n != 0 {
			t.Fatalf("%d mounts on %s after snfs umount", n, dir)
		}
		// snfs umount waited for the write-back (the pid file in
		// XDG_RUNTIME_DIR).
		var fst syscall.Stat_t
		b, err := os.ReadFile(e.path(name))
		if err != nil || string(b) != name || syscall.Stat(e.path(name), &fst) != nil || fst.Uid != 65534 {
			t.Fatalf("the export has %q (%v), owner %d; want %q by 65534", b, err, fst.Uid, name)
		}
	}
	if entries, err := os.ReadDir(filepath.Join(home, ".cache", "snfs")); err != nil || len(entries) != 1 {
		t.Errorf("nobody's snfs-mode cache directory under ~/.cache/snfs: %v, %v", entries, err)
	}
}

// copyFile copies the file at from to a new file at to.
func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
