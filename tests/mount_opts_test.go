package tests

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Mount options as /etc/fstab users write them (issue 23, item 3), through
// the real binary: FUSE's and mount(8)'s common options are accepted (the
// mount behaves so already, or applies them: ro, noexec), the ones snfs
// cannot honour are refused with the reason; and `snfs install` makes the
// helpers mount(8) runs for types snfs and fuse.snfs.

// runSnfs runs the snfs binary (as argv0, "" for bin itself) in dir with args
// and returns its exit status and combined output.
func runSnfs(t *testing.T, bin, argv0, dir string, args ...string) (int, string) {
	t.Helper()
	cmd := command(bin, args...)
	if argv0 != "" {
		cmd.Args[0] = argv0
	}
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	var ee *exitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	case err != nil:
		t.Fatalf("%s %q: %v", bin, args, err)
	}
	return 0, string(out)
}

// TestMountOptions: mount.snfs -f (check, mount nothing) takes what fstab
// lines carry; snfs mount refuses uid=, gid=, allow_root, sync, a value
// given to a flag option, and an unknown option, each with its message,
// before anything is mounted. (suid and dev are accepted: the mount stays
// nosuid,nodev, and fuse3's mount.fuse3 adds them to every mount.)
func TestMountOptions(t *testing.T) {
	t.Parallel()
	bin := snfsBinary(t)
	dir := diskTempDir(t, "snfs-opts-")
	const spec = "127.0.0.1:/srv/share"
	accepted := "allow_other,default_permissions,noatime,relatime,nodev,nosuid,dev,suid,rw,ro,exec,noexec," +
		"_netdev,auto,noauto,nofail,user,users,user=alice,nouser,defaults,async,x-systemd.automount,comment=x"
	if code, out := runSnfs(t, bin, "mount.snfs", dir, spec, dir, "-f", "-o", accepted); code != 0 || out != "" {
		t.Errorf("mount.snfs -f -o %s: exit %d\n%s", accepted, code, out)
	}
	if code, out := runSnfs(t, bin, "mount.fuse.snfs", dir, spec, dir, "-f", "-o", accepted); code != 0 || out != "" {
		t.Errorf("mount.fuse.snfs -f -o %s: exit %d\n%s", accepted, code, out)
	}
	for _, c := range []struct{ opt, msg string }{
		{"uid=1000", "files keep the owner the server reports (every call carries the caller's own uid and gid); snfs does not map owners (squash them on the server: all_squash,anonuid=N in the exports)"},
		{"gid=100", "files keep the group the server reports (every call carries the caller's own uid and gid); snfs does not map groups (squash them on the server: all_squash,anongid=N in the exports)"},
		{"allow_root", "root's mount is always allow_other (every user of this machine can use it, and the server decides what each may do: AUTH_SYS), a user's with -o allow_other"},
		{"sync", "not supported: data reaches the server at close and fsync (nfs mode) or after writeback-delay, at fsync and at unmount (snfs mode)"},
		{"ro=1", "takes no value"},
	} {
		code, out := runSnfs(t, bin, "", dir, "mount", "-o", "mode=nfs,"+c.opt, spec, dir)
		if want := "snfs: -o " + c.opt + ": " + c.msg + "\n"; code != 1 || out != want {
			t.Errorf("snfs mount -o %s: exit %d\n%s\nwant exit 1\n%s", c.opt, code, out, want)
		}
	}
	if code, out := runSnfs(t, bin, "", dir, "mount", "-o", "nosuchopt", spec, dir); code != 1 || out != "snfs: -o: unknown option \"nosuchopt\"\n" {
		t.Errorf("snfs mount -o nosuchopt: exit %d\n%s", code, out)
	}
	if typ := mountType(t, dir); typ != "" {
		t.Errorf("%s was mounted (%s)", dir, typ)
	}
}

// TestInstall: `./snfs install --dir D`, run as the quick start leaves the
// binary (./snfs, not on PATH), links D/mount.snfs and D/mount.fuse.snfs to
// its absolute path and says so; again, it says they are there; a stale link
// is replaced, a file that is not a link is refused; --remove removes them.
func TestInstall(t *testing.T) {
	t.Parallel()
	bin := snfsBinary(t)
	d := diskTempDir(t, "snfs-install-")
	helpers := []string{filepath.Join(d, "mount.snfs"), filepath.Join(d, "mount.fuse.snfs")}
	install := func(args ...string) (int, string) {
		t.Helper()
		return runSnfs(t, bin, "./snfs", filepath.Dir(bin), append([]string{"install", "--dir", d}, args...)...)
	}
	lines := func(format string, a ...any) string {
		var b strings.Builder
		for _, h := range helpers {
			fmt.Fprintf(&b, format, append([]any{h}, a...)...)
		}
		return b.String()
	}
	if code, out := install(); code != 0 || out != lines("%s -> %s (created)\n", bin) {
		t.Fatalf("snfs install: exit %d\n%s", code, out)
	}
	for _, h := range helpers {
		if got, err := os.Readlink(h); err != nil || got != bin {
			t.Errorf("%s -> %q (%v), want %s", h, got, err, bin)
		}
	}
	if code, out := install(); code != 0 || out != lines("%s -> %s (already there)\n", bin) {
		t.Errorf("snfs install again: exit %d\n%s", code, out)
	}
	if err := os.Remove(helpers[0]); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/old/snfs", helpers[0]); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%s -> %s (replaced a link to /old/snfs)\n%s -> %s (already there)\n", helpers[0], bin, helpers[1], bin)
	if code, out := install(); code != 0 || out != want {
		t.Errorf("snfs install over a stale link: exit %d\n%s\nwant\n%s", code, out, want)
	}
	if code, out := install("--remove"); code != 0 || out != lines("%s: removed\n") {
		t.Errorf("snfs install --remove: exit %d\n%s", code, out)
	}
	for _, h := range helpers {
		if _, err := os.Lstat(h); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after --remove: %v", h, err)
		}
	}
	if err := os.WriteFile(helpers[1], []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	want = fmt.Sprintf("%s -> %s (created)\nsnfs: %s exists and is not a symbolic link: not replacing it (remove it first)\n", helpers[0], bin, helpers[1])
	if code, out := install(); code != 1 || out != want {
		t.Errorf("snfs install over a file: exit %d\n%s\nwant\n%s", code, out, want)
	}
}

// TestMountFuse3: where fuse3's mount.fuse3 is installed and no
// mount.fuse.snfs, `mount -t fuse.snfs` runs it, and it runs the program
// snfs from mount(8)'s PATH as `snfs SPEC DIR -o OPTS,dev,suid`: with snfs in
// /usr/local/sbin (a link, removed when the test ends) that mounts, read-write
// and read-only, still nosuid,nodev.
func TestMountFuse3(t *testing.T) {
	// Serial (no t.Parallel): it installs helpers under /sbin.
	requireFUSE(t)
	if _, err := os.Stat("/sbin/mount.fuse3"); err != nil {
		requireInCI(t, "fuse3's mount.fuse3 not installed")
	}
	if _, err := exec.LookPath("mount"); err != nil {
		requireInCI(t, "mount(8) not installed (util-linux)")
	}
	for _, p := range []string{"/sbin/mount.fuse.snfs", "/usr/local/sbin/snfs"} {
		if _, err := os.Lstat(p); err == nil {
			requireInCI(t, p+" exists already; not replacing it")
		}
	}
	bin := snfsBinary(t)
	if err := os.Symlink(bin, "/usr/local/sbin/snfs"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove("/usr/local/sbin/snfs") })
	e := newEnv(t, "rw,no_root_squash")
	if err := os.WriteFile(e.path("there"), []byte("there\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := "127.0.0.1:" + e.dir
	opts := fmt.Sprintf("nfs-port=%d,mount-port=%d,mode=nfs", e.port(), e.port())

	dir := diskTempDir(t, "snfs-fuse3-")
	daemonMount(t, bin, dir)
	if out, err := command("mount", "-t", "fuse.snfs", "-o", opts, spec, dir).CombinedOutput(); err != nil {
		t.Fatalf("mount -t fuse.snfs through mount.fuse3: %v\n%s", err, out)
	}
	if o := mountOptions(t, dir); !strings.Contains(o, "nosuid") || !strings.Contains(o, "nodev") {
		t.Errorf("mountinfo options %q: want nosuid,nodev whatever mount.fuse3 asked", o)
	}
	useMount(t, bin, dir, e.dir, "fuse3")

	if out, err := command("mount", "-t", "fuse.snfs", "-r", "-o", opts, spec, dir).CombinedOutput(); err != nil {
		t.Fatalf("mount -t fuse.snfs -r through mount.fuse3: %v\n%s", err, out)
	}
	readOnlyMount(t, bin, dir, "there")
}
