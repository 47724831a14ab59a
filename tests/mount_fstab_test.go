package tests

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Mounting from /etc/fstab (issue 14: "Mountable from /etc/fstab (a
// mount.snfs helper or snfs mount accepting -o)"): snfs run as mount.snfs (a
// symbolic link) is mount(8)'s external helper for type snfs, called as
// `mount.snfs SPEC DIR [-sfnv] [-o OPTS]`.

// mountType is the file system type of the mount on dir in
// /proc/self/mountinfo ("" if dir is not a mount point).
func mountType(t *testing.T, dir string) string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	typ := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - TYPE SOURCE SUPER
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || fields[4] != dir {
			continue
		}
		for k, x := range fields {
			if x == "-" && k+1 < len(fields) {
				typ = fields[k+1] // the last mount on dir wins
			}
		}
	}
	return typ
}

// daemonMount is a mount made by a detached `snfs mount` (through
// mount.snfs): the test's end unmounts it, if still mounted, and waits for
// its process (snfs umount).
func daemonMount(t *testing.T, bin, dir string) {
	t.Cleanup(func() {
		if mountType(t, dir) == "" {
			return
		}
		if out, err := command(bin, "umount", "--timeout", "60s", dir).CombinedOutput(); err != nil {
			t.Errorf("snfs umount %s: %v\n%s", dir, err, out)
			syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	})
}

// useMount writes a file through the mount on dir, unmounts it with `snfs
// umount` (which waits for the write-back) and checks the export has it.
func useMount(t *testing.T, bin, dir, export, name string) {
	t.Helper()
	if typ := mountType(t, dir); typ != "fuse.snfs" {
		t.Fatalf("%s: mount type %q, want fuse.snfs", dir, typ)
	}
	data := []byte("through " + name + "\n")
	if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := command(bin, "umount", dir).CombinedOutput(); err != nil {
		t.Fatalf("snfs umount: %v\n%s", err, out)
	}
	if typ := mountType(t, dir); typ != "" {
		t.Fatalf("%s still mounted (%s) after snfs umount", dir, typ)
	}
	if got, err := os.ReadFile(filepath.Join(export, name)); err != nil || string(got) != string(data) {
		t.Fatalf("the export has %q (%v), want %q", got, err, data)
	}
}

// TestMountHelper runs snfs as mount.snfs with the command lines mount(8)
// gives its helpers: -f (fake) mounts nothing; -s drops an unknown option;
// a real one (with mount(8)'s generic options and -n -v) mounts in snfs mode
// in the background, logging to the log-file; snfs umount writes back.
func TestMountHelper(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	bin := snfsBinary(t)
	helper := filepath.Join(filepath.Dir(bin), "mount.snfs")
	if err := os.Symlink(bin, helper); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, "rw,no_root_squash")
	dir := diskTempDir(t, "snfs-fstab-")
	daemonMount(t, bin, dir)
	logFile := filepath.Join(diskTempDir(t, "snfs-log-"), "mount.log")
	opts := fmt.Sprintf("rw,nosuid,nodev,relatime,nfs-port=%d,mount-port=%d,mode=snfs,writeback-delay=1h,cache-dir=%s,log-file=%s",
		e.port(), e.port(), diskTempDir(t, "snfs-cache-"), logFile)
	spec := "127.0.0.1:" + e.dir

	if out, err := command(helper, spec, dir, "-f", "-o", opts).CombinedOutput(); err != nil {
		t.Fatalf("mount.snfs -f: %v\n%s", err, out)
	}
	if typ := mountType(t, dir); typ != "" {
		t.Fatalf("mount.snfs -f mounted %s (%s)", dir, typ)
	}
	out, err := command(helper, spec, dir, "-o", opts+",no-such-option").CombinedOutput()
	var ee *exitError
	if !errors.As(err, &ee) || !strings.Contains(string(out), "no-such-option") {
		t.Fatalf("mount.snfs with an unknown option: %v %s; want a failure naming it", err, out)
	}
	if typ := mountType(t, dir); typ != "" {
		t.Fatalf("a failed mount.snfs mounted %s (%s)", dir, typ)
	}
	if out, err := command(helper, spec, dir, "-s", "-n", "-v", "-o", opts+",no-such-option").CombinedOutput(); err != nil {
		t.Fatalf("mount.snfs -s: %v\n%s", err, out)
	}
	log, _ := os.ReadFile(logFile)
	if !strings.Contains(string(log), "msg=mounted") || !strings.Contains(string(log), "mode=snfs") {
		t.Errorf("the log-file has no \"mounted ... mode=snfs\" line:\n%s", log)
	}
	useMount(t, bin, dir, e.dir, "helper")
}

// TestMountFstab installs snfs as mount(8)'s helpers with `./snfs install`
// (/sbin/mount.snfs and /sbin/mount.fuse.snfs, removed with `snfs install
// --remove` when the test ends) and mounts through mount(8): `mount -t snfs`
// and `mount -t fuse.snfs` (the type /proc/mounts lists), read-write and
// read-only, then `mount -T FSTAB DIR` with fstab lines of both types.
func TestMountFstab(t *testing.T) {
	// Serial (no t.Parallel): it installs helpers under /sbin.
	requireFUSE(t)
	if _, err := exec.LookPath("mount"); err != nil {
		requireInCI(t, "mount(8) not installed (util-linux)")
	}
	bin := snfsBinary(t)
	for _, h := range []string{"/sbin/mount.snfs", "/sbin/mount.fuse.snfs"} {
		if _, err := os.Lstat(h); err == nil {
			requireInCI(t, h+" exists already; not replacing it")
		}
	}
	// As the quick start leaves it: ./snfs in the current directory.
	install := func(args ...string) (string, error) {
		cmd := command("./snfs", append([]string{"install"}, args...)...)
		cmd.Dir = filepath.Dir(bin)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() {
		if out, err := install("--remove"); err != nil {
			t.Errorf("snfs install --remove: %v\n%s", err, out)
		}
	})
	out, err := install()
	if want := "/sbin/mount.snfs -> " + bin + " (created)\n/sbin/mount.fuse.snfs -> " + bin + " (created)\n"; err != nil || out != want {
		t.Fatalf("./snfs install: %v\n%s\nwant\n%s", err, out, want)
	}
	e := newEnv(t, "rw,no_root_squash")
	spec := "127.0.0.1:" + e.dir
	opts := fmt.Sprintf("nfs-port=%d,mount-port=%d,mode=nfs", e.port(), e.port())
	if err := os.WriteFile(e.path("there"), []byte("there\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	for _, typ := range []string{"snfs", "fuse.snfs"} {
		t.Run("mount-t-"+typ, func(t *testing.T) {
			dir := diskTempDir(t, "snfs-fstab-")
			daemonMount(t, bin, dir)
			if out, err := command("mount", "-t", typ, "-o", opts, spec, dir).CombinedOutput(); err != nil {
				t.Fatalf("mount -t %s: %v\n%s", typ, err, out)
			}
			useMount(t, bin, dir, e.dir, "mount-t-"+typ)
		})
		t.Run("mount-t-"+typ+"-ro", func(t *testing.T) {
			dir := diskTempDir(t, "snfs-fstab-")
			daemonMount(t, bin, dir)
			o := strings.Replace(opts, "mode=nfs", "mode=snfs,cache-dir="+diskTempDir(t, "snfs-cache-"), 1)
			if out, err := command("mount", "-t", typ, "-r", "-o", o, spec, dir).CombinedOutput(); err != nil {
				t.Fatalf("mount -t %s -r: %v\n%s", typ, err, out)
			}
			readOnlyMount(t, bin, dir, "there")
		})
	}
	t.Run("fstab", func(t *testing.T) {
		dir := diskTempDir(t, "snfs-fstab-")
		daemonMount(t, bin, dir)
		fstab := filepath.Join(diskTempDir(t, "snfs-fstab-file-"), "fstab")
		line := fmt.Sprintf("# snfs test\n%s %s snfs %s,_netdev,noauto 0 0\n", spec, dir, opts)
		if err := os.WriteFile(fstab, []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := command("mount", "-T", fstab, dir).CombinedOutput(); err != nil {
			t.Fatalf("mount -T %s %s: %v\n%s", fstab, dir, err, out)
		}
		useMount(t, bin, dir, e.dir, "fstab")
	})
	t.Run("fstab-fuse.snfs-ro", func(t *testing.T) {
		dir := diskTempDir(t, "snfs-fstab-")
		daemonMount(t, bin, dir)
		fstab := filepath.Join(diskTempDir(t, "snfs-fstab-file-"), "fstab")
		line := fmt.Sprintf("%s %s fuse.snfs %s,ro,noexec,noatime,_netdev,noauto,user,x-systemd.automount 0 0\n", spec, dir, opts)
		if err := os.WriteFile(fstab, []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := command("mount", "-T", fstab, dir).CombinedOutput(); err != nil {
			t.Fatalf("mount -T %s %s: %v\n%s", fstab, dir, err, out)
		}
		if o := mountOptions(t, dir); !strings.Contains(","+o+",", ",noexec,") {
			t.Errorf("mountinfo options %q: no noexec", o)
		}
		readOnlyMount(t, bin, dir, "there")
	})
}

// readOnlyMount checks that the mount on dir is a read-only fuse.snfs mount
// whose file name reads, that a write fails with EROFS, and unmounts it.
func readOnlyMount(t *testing.T, bin, dir, name string) {
	t.Helper()
	if typ := mountType(t, dir); typ != "fuse.snfs" {
		t.Fatalf("%s: mount type %q, want fuse.snfs", dir, typ)
	}
	if o := mountOptions(t, dir); !strings.HasPrefix(o, "ro,") {
		t.Errorf("mountinfo options %q, want ro", o)
	}
	if _, err := os.ReadFile(filepath.Join(dir, name)); err != nil {
		t.Error(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("a write: %v, want EROFS", err)
	}
	if out, err := command(bin, "umount", dir).CombinedOutput(); err != nil {
		t.Fatalf("snfs umount: %v\n%s", err, out)
	}
}
