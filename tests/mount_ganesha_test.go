package tests

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/posixtest"

	"snfs/internal/fsx"
)

// `snfs mount` against nfs-ganesha (issue 14: "It must work against
// nfs-ganesha too"; --mode=auto falls back to plain NFSv3 when the server
// answers PROG_UNAVAIL for the snfs program). Each test starts its own
// ganesha (../shared/tools/ganesha-peer/start.sh, Debian's nfs-ganesha 4.3
// with the VFS backend) on fresh ports with a fresh export and run
// directory, and stops exactly that ganesha (stop.sh, by its recorded pids)
// when it ends.

// ganesha is one running nfs-ganesha.
type ganesha struct {
	t                *testing.T
	tool             string // the ganesha-peer directory
	env              []string
	export           string // the exported directory, on disk
	nfsPort, mntPort int
	run              string // start.sh's RUN: config, pid files, log
}

// ganeshaTool finds ../shared/tools/ganesha-peer beside the repository
// (SNFS_GANESHA_PEER overrides).
func ganeshaTool(t testing.TB) string {
	t.Helper()
	cands := []string{os.Getenv("SNFS_GANESHA_PEER")}
	if wd, err := os.Getwd(); err == nil {
		for d := wd; d != "/"; d = filepath.Dir(d) {
			cands = append(cands, filepath.Join(d, "shared/tools/ganesha-peer"))
		}
	}
	for _, c := range cands {
		if c == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(c, "start.sh")); err == nil {
			return c
		}
	}
	requireInCI(t, "../shared/tools/ganesha-peer/start.sh not found (set SNFS_GANESHA_PEER)")
	return ""
}

// startGanesha starts a ganesha exporting a fresh directory and stops it when
// the test ends.
func startGanesha(t *testing.T) *ganesha {
	t.Helper()
	requireRoot(t)
	tool := ganeshaTool(t)
	for _, p := range []string{"ganesha.nfsd", "rpcbind"} {
		if _, err := exec.LookPath(p); err != nil {
			requireInCI(t, p+" not installed (Debian nfs-ganesha, nfs-ganesha-vfs, rpcbind)")
		}
	}
	if _, err := os.Stat("/usr/lib/x86_64-linux-gnu/ganesha/libfsalvfs.so"); err != nil {
		requireInCI(t, "ganesha's VFS backend is not installed (Debian nfs-ganesha-vfs)")
	}
	g := &ganesha{export: diskTempDir(t, "snfs-ganesha-export-"), nfsPort: freePort(t), mntPort: freePort(t)}
	os.Chmod(g.export, 0o777)
	run, err := os.MkdirTemp("", "snfs-ganesha-run-")
	if err != nil {
		t.Fatal(err)
	}
	g.run = run
	g.t, g.tool = t, tool
	g.env = append(os.Environ(), "EXPORT="+g.export, "RUN="+run,
		fmt.Sprintf("NFS_PORT=%d", g.nfsPort), fmt.Sprintf("MNT_PORT=%d", g.mntPort))
	out, err := g.start()
	t.Cleanup(func() {
		if out, err := g.script("stop.sh"); err != nil {
			t.Errorf("ganesha stop.sh: %v\n%s", err, out)
		}
		if t.Failed() {
			if b, err := os.ReadFile(filepath.Join(run, "ganesha.log")); err == nil {
				t.Logf("ganesha.log:\n%s", lastLines(string(b), 40))
			}
		}
		os.RemoveAll(run)
	})
	if err != nil {
		t.Fatalf("ganesha start.sh: %v\n%s", err, out)
	}
	return g
}

// script runs the ganesha-peer script name (start.sh, stop.sh) for g, for
// at most two minutes: start.sh ends with `ss -p`, which (like ps) reads
// every process's /proc/PID/stat and blocks in the kernel while any process
// on the machine is stuck in a page fault on a FUSE mount that does not
// answer; a hung test binary would hide that.
func (g *ganesha) script(name string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := commandContext(ctx, filepath.Join(g.tool, name))
	cmd.Env = g.env
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("%s did not finish within 2 minutes (is a process on this machine stuck on "+
			"an unresponsive FUSE mount? ps would hang too): %w", name, err)
	}
	return out, err
}

// start runs start.sh. When start.sh is stuck in its last step (the
// listing by `ss -p`, see script) after ganesha is up (it said "ganesha: pid"
// and the NFS port answers), ganesha is used anyway.
func (g *ganesha) start() ([]byte, error) {
	out, err := g.script("start.sh")
	if err != nil && strings.Contains(string(out), "ganesha: pid ") {
		if c, derr := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", g.nfsPort), 5*time.Second); derr == nil {
			c.Close()
			g.t.Logf("ganesha is up, but start.sh did not finish: %v", err)
			return out, nil
		}
	}
	return out, err
}

// restart crashes g (SIGKILL) and starts ganesha.nfsd again on the same
// ports, export and configuration: a new write verifier (ganesha's is its
// start time, in seconds), nothing else changed (file handles stay valid).
// It does not go through stop.sh and start.sh: stop.sh waits up to 20 s for
// a SIGTERM that ganesha, with a client connected, is slow to honour, and
// start.sh's last step lists processes (ss -p), which blocks while the fsx
// child sits in a page fault on the mount that waits for this very ganesha.
// The portmapper start.sh started stays up; the new ganesha's pid goes into
// the pid file, so that stop.sh stops it at the end.
func (g *ganesha) restart() {
	pidFile := filepath.Join(g.run, "ganesha.pid")
	if b, err := os.ReadFile(pidFile); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
			if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) == "ganesha.nfsd" {
				syscall.Kill(pid, syscall.SIGKILL)
			}
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if syscall.Kill(pid, 0) != nil {
					break
				}
			}
		}
	}
	// Its verifier is its start time in seconds: start in a later second.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	log, err := os.OpenFile(filepath.Join(g.run, "ganesha.stdout"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		g.t.Errorf("ganesha restart: %v", err)
		return
	}
	defer log.Close()
	cmd := command("ganesha.nfsd", "-f", filepath.Join(g.run, "ganesha.conf"), "-L", filepath.Join(g.run, "ganesha.log"),
		"-p", pidFile, "-N", "NIV_EVENT", "-F")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		g.t.Errorf("ganesha restart: %v", err)
		return
	}
	go cmd.Wait() // reaps it when stop.sh (by the pid file) ends it
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if portAnswers(g.nfsPort) && portAnswers(g.mntPort) {
			break
		}
		if time.Now().After(deadline) {
			g.t.Errorf("ganesha restarted as pid %d does not listen on %d and %d after 60 s", cmd.Process.Pid, g.nfsPort, g.mntPort)
			break
		}
	}
	// ganesha writes its pid file itself; make sure it names this process.
	if err := os.WriteFile(pidFile, []byte(fmt.Sprintf("%d\n", cmd.Process.Pid)), 0o644); err != nil {
		g.t.Errorf("ganesha restart: %v", err)
	}
}

// portAnswers reports whether a TCP connection to 127.0.0.1:port succeeds.
func portAnswers(port int) bool {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (g *ganesha) spec() string            { return "127.0.0.1:" + g.export }
func (g *ganesha) ports() []string         { return portArgs(g.nfsPort, g.mntPort) }
func (g *ganesha) path(name string) string { return filepath.Join(g.export, name) }

// mountGanesha mounts g's export with `snfs mount` and extra flags. Its locks
// stay local (--locks=local): ganesha-peer runs ganesha without NLM
// (Enable_NLM = false) and its rpcbind in a private network namespace.
func mountGanesha(t *testing.T, bin string, g *ganesha, flags ...string) *procMount {
	t.Helper()
	return startProcMount(t, bin, g.spec(), append(append(g.ports(), "--locks=local"), flags...)...)
}

// knownGaneshaFailures are posixtest cases that fail on a `snfs mount
// --mode=nfs` of ganesha, with the reason.
var knownGaneshaFailures = map[string]string{
	"Fallocate":           knownMountFailures["Fallocate"],
	"FallocateKeepSize":   knownMountFailures["FallocateKeepSize"],
	"FcntlFlockLocksFile": knownMountFailures["FcntlFlockLocksFile"],
	"OpenSymlinkRace":     knownMountFailures["OpenSymlinkRace"],
	"SetattrSymlink": "ganesha 4.3's VFS backend answers NFS3_OK to a SETATTR of a symlink's times " +
		"without setting them (its post-op attributes keep the old mtime; checked with a bare SETATTR " +
		"from snfs/client, no FUSE involved): a server bug",
}

// TestMountGaneshaPosix runs go-fuse's POSIX suite on a `snfs mount
// --mode=nfs` of ganesha: one ganesha and one mount, each case in its own
// fresh directory of the mount.
func TestMountGaneshaPosix(t *testing.T) {
	// Serial (no t.Parallel): posixtest's FdLeak counts the process's open
	// descriptors (and one ganesha at a time: TestMountGanesha).
	requireFUSE(t)
	g := startGanesha(t)
	m := mountGanesha(t, snfsBinary(t), g, "--mode=nfs")
	names := make([]string, 0, len(posixtest.All))
	for n := range posixtest.All {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			if why, ok := knownGaneshaFailures[name]; ok {
				t.Skip("known failure: " + why)
			}
			if only := os.Getenv("SNFS_POSIX"); only != "" && only != name {
				t.Skip("SNFS_POSIX selects another case")
			}
			dir := m.path(name)
			if err := os.Mkdir(dir, 0o777); err != nil {
				t.Fatal(err)
			}
			posixtest.All[name](t, dir)
		})
	}
}

// TestMountGanesha runs `snfs mount` against nfs-ganesha, one ganesha at a
// time: start.sh shares the host's /run/rpcbind.sock (its rpcbind, in a
// private network namespace, when none answers there) and /var/run/ganesha.
// The parts run in order as subtests, the whole in parallel with the other
// tests (TestMountGaneshaPosix is serial: they never overlap).
func TestMountGanesha(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"Cases", testMountGaneshaCases},
		{"Fsx", testMountGaneshaFsx},
		{"FsxTwoMounts", testMountGaneshaFsxTwoMounts},
		{"FsxServerRestart", testMountGaneshaFsxServerRestart},
		{"AutoMode", testMountAutoMode},
	} {
		t.Run(c.name, c.run)
	}
}

// testMountGaneshaCases runs the mount tests of mount_test.go (rename over
// an open file, unlink of an open file, truncate and extend, sparse files,
// links and symlinks, times, permissions as a non-root user) on a `snfs
// mount --mode=nfs` of ganesha, each in its own directory of one mount.
func testMountGaneshaCases(t *testing.T) {
	requireFUSE(t)
	g := startGanesha(t)
	m := mountGanesha(t, snfsBinary(t), g, "--mode=nfs")
	cases := []struct {
		name string
		run  func(t *testing.T, mnt, export string)
	}{
		{"RenameOverOpen", testMountRenameOverOpen},
		{"UnlinkOpen", testMountUnlinkOpen},
		{"TruncateExtend", testMountTruncateExtend},
		{"Sparse", testMountSparse},
		{"LinksSymlinks", testMountLinksSymlinks},
		{"Times", testMountTimes},
		{"Permissions", testMountPermissions},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := os.Mkdir(m.path(c.name), 0o777); err != nil {
				t.Fatal(err)
			}
			c.run(t, m.path(c.name), g.path(c.name))
		})
	}
}

// testMountGaneshaFsx: the fsx-style tester on a `snfs mount --mode=nfs` of
// ganesha (SNFS_FSX_OPS operations; 20,000 by default under the race
// detector). Each check fsyncs (a COMMIT: ganesha fsyncs the file) and
// compares the exported file, read from ganesha's backing directory, with
// the model.
func testMountGaneshaFsx(t *testing.T) {
	requireLong(t)
	requireFUSE(t)
	g := startGanesha(t)
	m := mountGanesha(t, snfsBinary(t), g, "--mode=nfs")
	ops := fsxOps(t)
	c := fsxChildConfig{Cfg: fsxConfig(m.path("fsx.dat"), ops, fsxSeed(t, 7)),
		Compare: []string{g.path("fsx.dat")}}
	fsxCheck(t, c, func() { t.Error("unexpected restart request") })
}

// testMountGaneshaFsxTwoMounts: close-to-open between two `snfs mount
// --mode=nfs` processes on one ganesha export: at every check the tester
// closes the file on the first mount, and the file read through the second
// (opened after that close) and the export directory must hold the model.
func testMountGaneshaFsxTwoMounts(t *testing.T) {
	requireLong(t)
	requireFUSE(t)
	g := startGanesha(t)
	bin := snfsBinary(t)
	a, b := mountGanesha(t, bin, g, "--mode=nfs"), mountGanesha(t, bin, g, "--mode=nfs")
	ops := fsxOps(t)
	cfg := fsxConfig(a.path("fsx.dat"), ops, fsxSeed(t, 8))
	cfg.CheckPrep, cfg.CheckEvery = fsx.PrepClose, max(ops/100, 100)
	c := fsxChildConfig{Cfg: cfg, Compare: []string{b.path("fsx.dat"), g.path("fsx.dat")}}
	fsxCheck(t, c, func() { t.Error("unexpected restart request") })
}

// testMountGaneshaFsxServerRestart: the tester while ganesha is restarted
// every ops/10 operations (a new write verifier each time: UNSTABLE data not
// yet committed must be written again). The checks (after fsync) compare the
// export directory with the model.
func testMountGaneshaFsxServerRestart(t *testing.T) {
	requireLong(t)
	requireFUSE(t)
	g := startGanesha(t)
	m := mountGanesha(t, snfsBinary(t), g, "--mode=nfs")
	ops := fsxOps(t)
	every := max(ops/10, 200)
	c := fsxChildConfig{Cfg: fsxConfig(m.path("fsx.dat"), ops, fsxSeed(t, 9)),
		Compare: []string{g.path("fsx.dat")}, RestartEvery: every, RestartAt: every / 2}
	res := fsxCheck(t, c, g.restart)
	if res.Restarts == 0 {
		t.Error("no restart happened")
	}
}

// testMountAutoMode: --mode=auto picks plain NFSv3 against ganesha (it
// answers PROG_UNAVAIL to the snfs program) and snfs mode against `snfs
// serve`; the mount's log line "mounted ... mode=M" says which, and a file
// written through the mount reaches the server.
func testMountAutoMode(t *testing.T) {
	requireFUSE(t)
	bin := snfsBinary(t)
	check := func(t *testing.T, m *procMount, wantMode, export string) {
		t.Helper()
		log := m.log.String()
		if !strings.Contains(log, "chose="+wantMode) || !strings.Contains(log, "mode="+wantMode) {
			t.Fatalf("--mode=auto: want mode %s; the mount's log:\n%s", wantMode, log)
		}
		data := []byte("auto mode " + wantMode + "\n")
		if err := os.WriteFile(m.path("f"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		m.stop(t) // unmount writes everything back (snfs mode delays it)
		if got, err := os.ReadFile(filepath.Join(export, "f")); err != nil || string(got) != string(data) {
			t.Fatalf("the server has %q (%v), want %q", got, err, data)
		}
	}
	t.Run("ganesha", func(t *testing.T) {
		g := startGanesha(t)
		m := mountGanesha(t, bin, g, "--mode=auto")
		check(t, m, "nfs", g.export)
	})
	t.Run("snfs-serve", func(t *testing.T) {
		e := newEnv(t, "rw,no_root_squash")
		m := startProcMount(t, bin, "127.0.0.1:"+e.dir, append(portArgs(e.port(), e.port()),
			"--mode=auto", "--cache-dir="+diskTempDir(t, "snfs-cache-"))...)
		check(t, m, "snfs", e.dir)
	})
}
