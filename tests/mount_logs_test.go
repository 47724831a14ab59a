package tests

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestMountRefusedMessage: `snfs mount` of a port where no server listens
// fails (exit 1) with one message that names the failed dial once (not
// "dial tcp ...: dial tcp ...") and says what to check, in every mode,
// detached (the message comes back from the mount process) or not.
func TestMountRefusedMessage(t *testing.T) {
	t.Parallel()
	port := freePort(t) // free: nothing listens there
	dir := diskTempDir(t, "snfs-mnt-")
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for _, c := range [][]string{
		{"--mode=nfs"}, {"--mode=snfs"}, {"--mode=auto"}, {"--mode=nfs", "--foreground"},
		{"--mode=snfs", "--foreground"},
	} {
		cacheDir := diskTempDir(t, "snfs-cache-")
		args := append([]string{"mount", "--nfs-port", strconv.Itoa(port), "--mount-port", strconv.Itoa(port),
			"--cache-dir", cacheDir}, c...)
		args = append(args, "127.0.0.1:/srv/share", dir)
		cmd := command(snfsBinary(t), args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("snfs %s: %v (want exit status 1)\nstderr: %s", strings.Join(args, " "), err, stderr.String())
		}
		msg := stderr.String()
		if n := strings.Count(msg, "dial tcp"); n != 1 {
			t.Errorf("snfs %s: \"dial tcp\" %d times in %q; want once", strings.Join(c, " "), n, msg)
		}
		want := "snfs: dial tcp " + addr + ": connect: connection refused: is `snfs serve` running at " + addr + "?"
		if !strings.HasPrefix(msg, want) || strings.Count(msg, "\n") != 1 {
			t.Errorf("snfs %s: message %q; want one line starting %q", strings.Join(c, " "), msg, want)
		}
		if stdout.Len() != 0 {
			t.Errorf("snfs %s: standard output %q; want nothing", strings.Join(c, " "), stdout.String())
		}
		// A failed mount leaves no (empty) default log behind.
		if _, err := os.Stat(mountLogIn(cacheDir, dir)); !os.IsNotExist(err) {
			t.Errorf("snfs %s: a failed mount left its log file (%v)", strings.Join(c, " "), err)
		}
	}
}

// TestMountDetachedLog: a detached `snfs mount` given no log file logs to
// CACHE-DIR/snfs-mount-MOUNTPOINT.log (said on its standard error once mounted), in both
// modes; its log holds the mount's lines until it is unmounted. Under systemd
// (standard error is the stream JOURNAL_STREAM names) it logs there instead,
// and makes no file.
func TestMountDetachedLog(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	bin := snfsBinary(t)
	e := newEnv(t, "rw,no_root_squash")
	port := strconv.Itoa(e.port())
	mount := func(t *testing.T, mode, dir, cacheDir string, stderr *os.File, env ...string) {
		t.Helper()
		cmd := command(bin, "mount", "--mode="+mode, "--nfs-port", port, "--mount-port", port,
			"--cache-dir", cacheDir, "127.0.0.1:"+e.dir, dir)
		cmd.Stderr, cmd.Env = stderr, append(os.Environ(), env...)
		if err := cmd.Run(); err != nil {
			t.Fatalf("snfs mount: %v\n%s", err, tail(stderr.Name(), 10))
		}
		daemonMount(t, bin, dir)
	}
	umount := func(t *testing.T, dir string) {
		t.Helper()
		if out, err := command(bin, "umount", dir).CombinedOutput(); err != nil {
			t.Fatalf("snfs umount: %v\n%s", err, out)
		}
	}
	for _, mode := range []string{"nfs", "snfs"} {
		t.Run(mode, func(t *testing.T) {
			dir, cacheDir := diskTempDir(t, "snfs-mnt-"), diskTempDir(t, "snfs-cache-")
			errf, err := os.Create(filepath.Join(diskTempDir(t, "snfs-out-"), "stderr"))
			if err != nil {
				t.Fatal(err)
			}
			defer errf.Close()
			mount(t, mode, dir, cacheDir, errf)
			logPath := mountLogIn(cacheDir, dir)
			out, _ := os.ReadFile(errf.Name())
			if want := "snfs: mounted; the mount logs to " + logPath + "\n"; string(out) != want {
				t.Fatalf("snfs mount said %q; want %q", out, want)
			}
			if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			umount(t, dir)
			l, err := os.ReadFile(logPath)
			if err != nil {
				t.Fatalf("the detached mount's log: %v", err)
			}
			for _, want := range []string{`msg=mounted`, `msg=unmounted`} {
				if !strings.Contains(string(l), want) {
					t.Errorf("the log has no %q:\n%s", want, l)
				}
			}
		})
	}
	t.Run("journal", func(t *testing.T) {
		dir, cacheDir := diskTempDir(t, "snfs-mnt-"), diskTempDir(t, "snfs-cache-")
		// The journal's stream, as systemd gives it: stderr, named by
		// JOURNAL_STREAM=DEV:INO.
		journal, err := os.Create(filepath.Join(diskTempDir(t, "snfs-journal-"), "journal"))
		if err != nil {
			t.Fatal(err)
		}
		defer journal.Close()
		var st syscall.Stat_t
		if err := syscall.Fstat(int(journal.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		mount(t, "nfs", dir, cacheDir, journal, fmt.Sprintf("JOURNAL_STREAM=%d:%d", st.Dev, st.Ino))
		umount(t, dir)
		l, _ := os.ReadFile(journal.Name())
		for _, want := range []string{`msg=mounted`, `msg=unmounted`} {
			if !strings.Contains(string(l), want) {
				t.Errorf("the journal has no %q:\n%s", want, l)
			}
		}
		if strings.Contains(string(l), "logs to") {
			t.Errorf("a mount logging to the journal named a log file:\n%s", l)
		}
		if _, err := os.Stat(mountLogIn(cacheDir, dir)); !os.IsNotExist(err) {
			t.Errorf("a mount logging to the journal made a log file (%v)", err)
		}
	})
}

// TestMountSNFSRecoveryLogPaths: the recovery of a killed mount's dirty data
// logs the files it writes back and the conflicts it keeps by their paths on
// the mount, directories included (a restarted mount has looked nothing up:
// it learns them from the server), not only by file id.
func TestMountSNFSRecoveryLogPaths(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	s := newServeProc(t)
	if err := os.MkdirAll(s.path("src/lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	old := randBytes(71, 5000)
	if err := os.WriteFile(s.path("src/lib/shared"), old, 0o644); err != nil {
		t.Fatal(err)
	}
	serverProcFiles(t, s, "src/mine")
	a := startMount(t, s, "", "")
	writeDurable(t, a.path("src/lib/shared"), randBytes(72, 30000))
	writeDurable(t, a.path("src/mine"), randBytes(73, 20000))
	a.kill9()
	nfsRewrite(t, s, "src/lib/shared", randBytes(74, 10000))

	b := startMount(t, s, a.dir, a.cacheDir)
	l, err := os.ReadFile(b.logPath)
	if err != nil {
		t.Fatal(err)
	}
	log := string(l)
	for _, want := range []string{
		`msg="reintegration: wrote back a file's data" path=` + b.path("src/mine") + ` fileid=`,
		`msg="reintegration: the server's file changed since this client's data was written over it: keeping the server's, saving ours beside it" path=` + b.path("src/lib/shared") + ` fileid=`,
		`msg="conflict: kept this client's version beside the server's" path=` + b.path("src/lib/shared") + ` copy=` + b.path("src/lib/shared.snfs-conflict-"),
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the restarted mount's log has no %q", want)
		}
	}
	if strings.Contains(log, unknownDirInLog) {
		t.Errorf("the log names a path with unknown directories:\n%s", log)
	}
	if t.Failed() {
		t.Logf("log:\n%s", log)
	}
}

// unknownDirInLog is how a log names the unknown directories of a path.
const unknownDirInLog = "(unknown directory)"

// mountedLine matches the one line a detached `snfs mount` prints once the
// mount is usable, naming where it logs.
var mountedLine = regexp.MustCompile(`(?m)^snfs: mounted; the mount logs to .+\n`)

// withoutMountedLine is out less that line: what else `snfs mount` said.
func withoutMountedLine(out string) string {
	return mountedLine.ReplaceAllString(out, "")
}

// mountLogIn is the default log file of a detached mount on mountPoint with
// cache directory cacheDir: snfs-mount-MOUNTPOINT.log, the mount point's
// slashes as %.
func mountLogIn(cacheDir, mountPoint string) string {
	return filepath.Join(cacheDir, "snfs-mount-"+strings.ReplaceAll(strings.TrimPrefix(mountPoint, "/"), "/", "%")+".log")
}

// TestMountDetachedLogPerMount: two detached nfs-mode mounts of one export
// share its cache directory; each logs to its own file there, holding its own
// lines only (one file for both mixed their lines, and one's rotation lost
// the other's).
func TestMountDetachedLogPerMount(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	bin := snfsBinary(t)
	e := newEnv(t, "rw,no_root_squash")
	port := strconv.Itoa(e.port())
	cacheDir := diskTempDir(t, "snfs-cache-")
	a, b := diskTempDir(t, "snfs-mnt-a-"), diskTempDir(t, "snfs-mnt-b-")
	for _, dir := range []string{a, b} {
		if out, err := command(bin, "mount", "--nfs-port", port, "--mount-port", port,
			"--cache-dir", cacheDir, "127.0.0.1:"+e.dir, dir).CombinedOutput(); err != nil {
			t.Fatalf("snfs mount on %s: %v\n%s", dir, err, out)
		}
		daemonMount(t, bin, dir)
	}
	for _, dir := range []string{a, b} {
		if out, err := command(bin, "umount", dir).CombinedOutput(); err != nil {
			t.Fatalf("snfs umount %s: %v\n%s", dir, err, out)
		}
	}
	for _, c := range []struct{ own, other string }{{a, b}, {b, a}} {
		l, err := os.ReadFile(mountLogIn(cacheDir, c.own))
		if err != nil {
			t.Fatalf("the log of the mount on %s: %v", c.own, err)
		}
		if !strings.Contains(string(l), "on="+c.own) || strings.Contains(string(l), "on="+c.other) {
			t.Errorf("the log of the mount on %s holds another mount's lines, or not its own:\n%s", c.own, l)
		}
	}
}
