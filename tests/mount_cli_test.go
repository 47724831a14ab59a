package tests

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Issue 23, items 1 and 2: `snfs mount` and `snfs umount` take the mount
// points mount(8) takes, and a mount does not silently hide what is on its
// mount point; through the real binary, asserting the exact messages.

// runIn runs the snfs binary with args in the working directory cwd and
// returns its combined output and exit status.
func runIn(t *testing.T, bin, cwd string, args ...string) (string, int) {
	t.Helper()
	cmd := command(bin, args...)
	cmd.Dir = cwd
	out, err := cmd.CombinedOutput()
	var ee *exitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	}
	t.Fatalf("%s %q: %v", bin, args, err)
	return "", -1
}

// mountsOn counts the mounts on dir in /proc/self/mountinfo.
func mountsOn(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == dir {
			n++
		}
	}
	return n
}

// detachAll detaches, when the test ends, whatever is still mounted on dir
// (a test that failed halfway); the mount processes end with their mounts.
func detachAll(t *testing.T, dir string) {
	t.Cleanup(func() {
		for range 8 {
			if mountsOn(t, dir) == 0 {
				return
			}
			syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	})
}

// cliMountDir is a fresh directory under /var/tmp, without symbolic links in
// its path (the kernel lists mount points resolved).
func cliMountDir(t *testing.T, pattern string) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(diskTempDir(t, pattern))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestMountRelativeMountPoint mounts and unmounts with the spellings
// mount(8) takes, from the mount point's parent directory: relative, with
// trailing slashes and through a symbolic link, mixing them between mount
// and umount. Before, the detached mount process resolved a relative path
// against / ("the mount process exited without saying why", or a mount on
// /mnt for `mnt`), and `snfs umount` then said "invalid argument".
func TestMountRelativeMountPoint(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	bin := snfsBinary(t)
	e := newEnv(t, "rw,no_root_squash")
	parent := cliMountDir(t, "snfs-rel-")
	real := filepath.Join(parent, "snfs-rel-mnt")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("snfs-rel-mnt", filepath.Join(parent, "link")); err != nil {
		t.Fatal(err)
	}
	detachAll(t, real)
	spec := "127.0.0.1:" + e.dir
	port := fmt.Sprint(e.port())
	for k, c := range []struct{ mount, umount string }{
		{"snfs-rel-mnt", "snfs-rel-mnt/"},
		{"./snfs-rel-mnt//", "link"},
		{"link/", "./snfs-rel-mnt"},
	} {
		out, code := runIn(t, bin, parent, "mount", "--nfs-port", port, "--mount-port", port, spec, c.mount)
		if code != 0 || withoutMountedLine(out) != "" {
			t.Fatalf("snfs mount ... %s (in %s): exit %d, %q; want exit 0, no output", c.mount, parent, code, out)
		}
		if typ := mountType(t, real); typ != "fuse.snfs" {
			t.Fatalf("after snfs mount ... %s: %s is mounted as %q, want fuse.snfs", c.mount, real, typ)
		}
		name := fmt.Sprintf("through-%d", k)
		if err := os.WriteFile(filepath.Join(parent, c.mount, name), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
		out, code = runIn(t, bin, parent, "umount", c.umount)
		if code != 0 || out != "" {
			t.Fatalf("snfs umount %s (in %s): exit %d, %q; want exit 0, no output", c.umount, parent, code, out)
		}
		if n := mountsOn(t, real); n != 0 {
			t.Fatalf("after snfs umount %s: %d mounts on %s", c.umount, n, real)
		}
		if got, err := os.ReadFile(e.path(name)); err != nil || string(got) != name {
			t.Fatalf("the export has %q (%v), want %q", got, err, name)
		}
	}
	out, code := runIn(t, bin, parent, "umount", "snfs-rel-mnt")
	if want := "snfs: " + real + " is not mounted\n"; code != 1 || out != want {
		t.Fatalf("snfs umount of a directory not mounted: exit %d, %q; want exit 1, %q", code, out, want)
	}
}

// TestMountRefusesToHide: a mount over a non-empty directory, or over an
// existing mount (the same command twice), is refused with the reason and
// the way to ask for it, as sshfs and rclone do; --allow-non-empty and -o
// nonempty ask for it. Before, both mounted silently, stacking mounts.
func TestMountRefusesToHide(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	bin := snfsBinary(t)
	e := newEnv(t, "rw,no_root_squash")
	spec := "127.0.0.1:" + e.dir
	port := fmt.Sprint(e.port())
	mountArgs := func(extra ...string) []string {
		return append([]string{"mount", "--nfs-port", port, "--mount-port", port}, extra...)
	}

	full := cliMountDir(t, "snfs-full-")
	detachAll(t, full)
	if err := os.WriteFile(filepath.Join(full, "keep"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := runIn(t, bin, "/", append(mountArgs(), spec, full)...)
	want := "snfs: " + full + " is not empty: the mount would hide what is in it; pass --allow-non-empty (-o nonempty) to mount over it anyway\n"
	if code != 1 || out != want {
		t.Fatalf("snfs mount on a non-empty directory: exit %d, %q; want exit 1, %q", code, out, want)
	}
	if n := mountsOn(t, full); n != 0 {
		t.Fatalf("a refused mount left %d mounts on %s", n, full)
	}
	for _, ask := range [][]string{{"-o", "nonempty"}, {"--allow-non-empty"}} {
		out, code := runIn(t, bin, "/", append(mountArgs(ask...), spec, full)...)
		if code != 0 || withoutMountedLine(out) != "" {
			t.Fatalf("snfs mount %q on a non-empty directory: exit %d, %q; want exit 0", ask, code, out)
		}
		if _, err := os.Stat(filepath.Join(full, "keep")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s/keep through the mount: %v, want it hidden", full, err)
		}
		if out, code := runIn(t, bin, "/", "umount", full); code != 0 {
			t.Fatalf("snfs umount: exit %d, %s", code, out)
		}
	}
	if b, err := os.ReadFile(filepath.Join(full, "keep")); err != nil || string(b) != "mine" {
		t.Fatalf("%s/keep after the mounts: %q, %v", full, b, err)
	}

	dir := cliMountDir(t, "snfs-twice-")
	detachAll(t, dir)
	if out, code := runIn(t, bin, "/", append(mountArgs(), spec, dir)...); code != 0 {
		t.Fatalf("snfs mount: exit %d, %s", code, out)
	}
	out, code = runIn(t, bin, "/", append(mountArgs(), spec, dir)...)
	want = fmt.Sprintf("snfs: %s is already a mount point (fuse.snfs %s): unmount it first (snfs umount %s), "+
		"or pass --allow-non-empty (-o nonempty) to mount over it\n", dir, spec, dir)
	if code != 1 || out != want {
		t.Fatalf("the same snfs mount twice: exit %d, %q; want exit 1, %q", code, out, want)
	}
	if n := mountsOn(t, dir); n != 1 {
		t.Fatalf("%d mounts on %s after the refused second one, want 1", n, dir)
	}
	useMount(t, bin, dir, e.dir, "twice")
}

// TestMountCleansDeadMount: the mount point of a mount process killed with
// SIGKILL is a dead FUSE mount ("transport endpoint is not connected"); the
// next mount there detaches it, says so, and mounts. Before, the new mount
// was stacked on the dead one, which stayed in the mount table.
func TestMountCleansDeadMount(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	bin := snfsBinary(t)
	e := newEnv(t, "rw,no_root_squash")
	spec := "127.0.0.1:" + e.dir
	port := fmt.Sprint(e.port())
	dir := cliMountDir(t, "snfs-dead-")
	detachAll(t, dir)

	// A foreground mount, to kill it and reap it.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := command(bin, "mount", "--foreground", "--nfs-port", port, "--mount-port", port, spec, dir)
	cmd.ExtraFiles = []*os.File{w}
	cmd.Env = append(os.Environ(), "SNFS_MOUNT_READY_FD=3")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(r).ReadString('\n')
		line <- strings.TrimSpace(l)
	}()
	select {
	case l := <-line:
		if l != "ok" {
			cmd.Wait()
			t.Fatalf("snfs mount --foreground: %q", l)
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("snfs mount --foreground was not ready within 60 s")
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(dir, &sfs); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("statfs %s after the mount process was killed: %v, want ENOTCONN", dir, err)
	}

	out, code := runIn(t, bin, "/", "mount", "--nfs-port", port, "--mount-port", port, spec, dir)
	want := fmt.Sprintf("snfs: %s: detached the dead mount of %s left there (its mount process was gone)\n", dir, spec)
	if code != 0 || withoutMountedLine(out) != want {
		t.Fatalf("snfs mount on a dead mount: exit %d, %q; want exit 0, %q", code, out, want)
	}
	if n := mountsOn(t, dir); n != 1 {
		t.Fatalf("%d mounts on %s, want 1 (the dead one detached)", n, dir)
	}
	useMount(t, bin, dir, e.dir, "after-dead")
}
