package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runSNFS runs the binary in dir (the test's directory if ""), returning
// its standard output, standard error and exit status.
func runSNFS(t *testing.T, bin, dir string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("snfs %q: %v", args, err)
	}
	return o.String(), e.String(), code
}

// TestStatCommand runs the real binary: `snfs stat` with nothing to read
// says what to pass; `snfs stat MOUNTPOINT` reads a mount's figures (snfs
// and nfs mode, no --metrics, a relative mount point too) from its stats
// socket; a server's --metrics address still works, as a flag or in place
// of the mount point; a directory that is no mount, a mount whose process is
// gone, and an unmounted one get messages saying so.
func TestStatCommand(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CI runs as root)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("needs /dev/fuse")
	}
	bin := filepath.Join(t.TempDir(), "snfs")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	base, err := os.MkdirTemp("/var/tmp", "snfs-stat-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	export, mnt, nfsMnt, cache, plain := filepath.Join(base, "export"), filepath.Join(base, "mnt"),
		filepath.Join(base, "nfsmnt"), filepath.Join(base, "cache"), filepath.Join(base, "plain")
	for _, d := range []string{export, mnt, nfsMnt, cache, plain} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	// Nothing to read: the message says what to pass, not "connection refused"
	// alone, and nothing goes to standard output.
	if c, err := net.DialTimeout("tcp", defaultStatAddr, time.Second); err == nil {
		c.Close()
		t.Fatalf("something listens on %s, the default address of snfs stat: this test needs it free", defaultStatAddr)
	}
	free := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{nil, "snfs: no metrics at 127.0.0.1:9100 (connection refused): start the server with --metrics 127.0.0.1:9100, or pass a mount point: snfs stat /mnt/share\n"},
		{[]string{"--metrics", free}, "snfs: no metrics at " + free + " (connection refused): start the server with --metrics " + free + ", or pass a mount point: snfs stat /mnt/share\n"},
		{[]string{free}, "snfs: no metrics at " + free + " (connection refused): start the server with --metrics " + free + ", or pass a mount point: snfs stat /mnt/share\n"},
		{[]string{plain}, "snfs: " + plain + " is not an snfs mount: pass the mount point of an snfs mount, or --metrics ADDR for a server\n"},
	} {
		out, errOut, code := runSNFS(t, bin, "", append([]string{"stat"}, c.args...)...)
		if code != 1 || out != "" || errOut != c.msg {
			t.Errorf("snfs stat %q: exit %d, stdout %q, stderr %q; want exit 1, stderr %q", c.args, code, out, errOut, c.msg)
		}
	}
	if _, errOut, code := runSNFS(t, bin, "", "stat", mnt, "--metrics", free); code != 2 || !strings.HasPrefix(errOut, "usage: snfs stat [MOUNTPOINT | --metrics ADDR]") {
		t.Errorf("snfs stat MOUNTPOINT --metrics ADDR: exit %d, %q; want exit 2 and the usage", code, errOut)
	}

	nfsPort := freePort(t)
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	srv := exec.Command(bin, "serve", "--bind", "127.0.0.1", "--nfs-port", fmt.Sprint(nfsPort), "--mount-port", fmt.Sprint(nfsPort),
		"--state-dir", filepath.Join(base, "state"), "--metrics", metricsAddr, "--export-options", "rw,no_root_squash", export)
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	mount := func(dir string, args ...string) {
		t.Helper()
		args = append([]string{"mount", "--nfs-port", fmt.Sprint(nfsPort), "--mount-port", fmt.Sprint(nfsPort)}, args...)
		args = append(args, "127.0.0.1:"+export, dir)
		for try := 0; ; try++ { // until the server answers
			out, err := exec.Command(bin, args...).CombinedOutput()
			if err == nil {
				return
			}
			if try == 50 {
				t.Fatalf("snfs %q: %v\n%s", args, err, out)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// --permits=off: f is made by CREATE_OPEN and its data waits for the
	// delayed write-back (with permits, both go with the log).
	mount(mnt, "--mode=snfs", "--permits=off", "--cache-dir", cache, "--writeback-delay", "1h")
	defer exec.Command(bin, "umount", "--lazy", mnt).Run()
	mount(nfsMnt, "--mode=nfs")
	defer exec.Command(bin, "umount", "--lazy", nfsMnt).Run()

	if err := os.WriteFile(filepath.Join(mnt, "f"), []byte("dirty for an hour"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadDir(nfsMnt); err != nil {
		t.Fatal(err)
	}
	// The mount point as given (absolute, and relative to the current
	// directory): the mount's call table and figures.
	for _, c := range []struct {
		dir, arg string
		want     map[string]float64 // a row's calls or a figure; -1: any number > 0
	}{
		{"", mnt, map[string]float64{"snfs 1 CREATE_OPEN": -1, "snfs 1 REGISTER": -1, "mount 3 MNT": 1, "dirty bytes": 17, "callbacks RELINQUISH": 0}},
		{base, "mnt", map[string]float64{"snfs 1 CREATE_OPEN": -1, "dirty bytes": 17}},
		// Dirty bytes apply to either mode (snfs status's gauge).
		{"", nfsMnt, map[string]float64{"nfs 3 READDIRPLUS": -1, "mount 3 MNT": 1, "dirty bytes": 0}},
	} {
		out, errOut, code := runSNFS(t, bin, c.dir, "stat", c.arg)
		if code != 0 || errOut != "" || !strings.HasPrefix(out, "client calls:\n") {
			t.Errorf("snfs stat %s (in %q): exit %d, stderr %q, stdout:\n%s", c.arg, c.dir, code, errOut, out)
		}
		got := statFigures(out)
		for k, w := range c.want {
			v, ok := got[k]
			if !ok || w >= 0 && v != w || w < 0 && v <= 0 {
				t.Errorf("snfs stat %s: %s = %v (listed: %v), want %v (-1: > 0):\n%s", c.arg, k, v, ok, w, out)
			}
		}
		if c.arg == nfsMnt {
			if _, ok := got["bytes written back"]; ok {
				t.Errorf("snfs stat of an nfs-mode mount shows snfs figures:\n%s", out)
			}
		}
	}
	// A server's --metrics address, as the flag or in place of the mount
	// point: the server's table.
	for _, args := range [][]string{{"--metrics", metricsAddr}, {metricsAddr}} {
		out, errOut, code := runSNFS(t, bin, "", append([]string{"stat"}, args...)...)
		got := statFigures(out)
		if code != 0 || errOut != "" || strings.Contains(out, "client calls:") || got["snfs 1 CREATE_OPEN"] <= 0 {
			t.Errorf("snfs stat %q: exit %d, stderr %q, want the server's table:\n%s", args, code, errOut, out)
		}
	}

	// A mount without the socket (made by an snfs from before it): the
	// message says so.
	sock, aside := statsSocket(mnt), statsSocket(mnt)+".aside"
	if err := os.Rename(sock, aside); err != nil {
		t.Fatal(err)
	}
	want := "snfs: the snfs mount on " + mnt + " has no stats socket (" + sock +
		"): its mount process is older than snfs stat MOUNTPOINT; remount it\n"
	if out, errOut, code := runSNFS(t, bin, "", "stat", mnt); code != 1 || out != "" || errOut != want {
		t.Errorf("snfs stat of a mount without a socket: exit %d, stdout %q, stderr %q; want exit 1, %q", code, out, errOut, want)
	}
	if err := os.Rename(aside, sock); err != nil {
		t.Fatal(err)
	}

	// The nfs mount's process killed: its mount is still there but nothing
	// answers on its socket.
	pid := 0
	if b, err := os.ReadFile(pidFile(nfsMnt)); err == nil {
		fmt.Sscan(string(b), &pid)
	}
	if pid <= 0 {
		t.Fatalf("no pid file for %s", nfsMnt)
	}
	syscall.Kill(pid, syscall.SIGKILL)
	defer os.Remove(pidFile(nfsMnt)) // left by the killed process
	defer os.Remove(statsSocket(nfsMnt))
	for i := 0; syscall.Kill(pid, 0) == nil; i++ {
		if i == 500 {
			t.Fatalf("mount process %d still there after SIGKILL", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	want = "snfs: the snfs mount on " + nfsMnt + " does not answer on " + statsSocket(nfsMnt) +
		": its mount process is gone (snfs umount " + nfsMnt + " unmounts what is left)\n"
	if out, errOut, code := runSNFS(t, bin, "", "stat", nfsMnt); code != 1 || out != "" || errOut != want {
		t.Errorf("snfs stat of a mount whose process is gone: exit %d, stdout %q, stderr %q; want exit 1, %q", code, out, errOut, want)
	}
	if out, err := exec.Command(bin, "umount", nfsMnt).CombinedOutput(); err != nil {
		t.Fatalf("snfs umount of the dead mount: %v\n%s", err, out)
	}

	// Unmounted: the socket is gone with the mount.
	if out, err := exec.Command(bin, "umount", mnt).CombinedOutput(); err != nil {
		t.Fatalf("snfs umount: %v\n%s", err, out)
	}
	if _, err := os.Stat(statsSocket(mnt)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stats socket after umount: %v, want it removed", err)
	}
	want = "snfs: " + mnt + " is not an snfs mount: pass the mount point of an snfs mount, or --metrics ADDR for a server\n"
	if out, errOut, code := runSNFS(t, bin, "", "stat", mnt); code != 1 || out != "" || errOut != want {
		t.Errorf("snfs stat after umount: exit %d, stdout %q, stderr %q; want exit 1, %q", code, out, errOut, want)
	}
}

// statFigures parses snfs stat's output: "PROGRAM VERSION PROC" to its calls
// and "LABEL" to the figure of each "LABEL: N" line.
func statFigures(out string) map[string]float64 {
	m := map[string]float64{}
	for line := range strings.Lines(out) {
		if label, v, ok := strings.Cut(line, ":"); ok {
			var n float64
			if _, err := fmt.Sscan(v, &n); err == nil {
				m[strings.TrimSpace(label)] = n
			}
			continue
		}
		f := strings.Fields(line)
		var n float64
		if len(f) == 5 && strings.HasSuffix(f[4], "%") {
			if _, err := fmt.Sscan(f[3], &n); err == nil {
				m[f[0]+" "+f[1]+" "+f[2]] = n
			}
		}
	}
	return m
}

// TestMountAt: a real mount point with a space (escaped "\040" in
// mountinfo) is found, with its type and source; a directory that is no
// mount point is not.
func TestMountAt(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CI runs as root)")
	}
	base, err := os.MkdirTemp("/var/tmp", "snfs-mountat-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	dir := filepath.Join(base, "a b")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("src\\x", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	defer syscall.Unmount(dir, syscall.MNT_DETACH)
	e, ok, err := mountAt(dir)
	if err != nil || !ok || e.fsType != "tmpfs" || e.source != "src\\x" || e.dir != dir {
		t.Errorf("mountAt(%q) = %+v, %v, %v; want tmpfs from src\\x", dir, e, ok, err)
	}
	if e, ok, err := mountAt(base); err != nil || ok {
		t.Errorf("mountAt(%q) = %+v, %v, %v; want no mount", base, e, ok, err)
	}
	if got := unescapeMountinfo(`a\040b\134c\011`); got != "a b\\c\t" {
		t.Errorf("unescapeMountinfo = %q", got)
	}
}
