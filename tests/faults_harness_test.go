package tests

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"snfs/internal/faultproxy"
)

// This file starts `snfs serve` and `snfs mount` as real processes of a
// freshly built snfs binary, for the tests that kill them (kill -9) or put a
// fault-injecting proxy between them.

var faultsBin struct {
	once sync.Once
	path string
	err  error
}

// snfsBinary builds ../cmd/snfs once per test binary run.
func snfsBinary(t testing.TB) string {
	t.Helper()
	faultsBin.once.Do(func() {
		dir, err := os.MkdirTemp("/var/tmp", "snfs-bin-")
		if err != nil {
			faultsBin.err = err
			return
		}
		faultsBin.path = filepath.Join(dir, "snfs")
		out, err := command("go", "build", "-o", faultsBin.path, "../cmd/snfs").CombinedOutput()
		if err != nil {
			faultsBin.err = fmt.Errorf("go build ../cmd/snfs: %v\n%s", err, out)
		}
	})
	if faultsBin.err != nil {
		t.Fatal(faultsBin.err)
	}
	return faultsBin.path
}

// newProxy starts a fault-injecting proxy to addr, closed when the test ends.
func newProxy(t *testing.T, addr string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// srvProc is one `snfs serve` process over one export; restarts keep the
// export, state directory and ports.
//
// The server is started by a launcher (a shell forked once, before any mount
// exists), not by the test process: a process forked by the test inherits,
// until its exec, the test's open files, and closing one of a FUSE mount
// there waits for that mount, which may be waiting for this very server
// (a deadlock seen in the crash cycles).
type srvProc struct {
	t         *testing.T
	export    string
	stateDir  string
	nfsPort   int
	mountPort int
	metrics   string // host:port of --metrics
	extra     []string
	logPath   string
	starts    int
	pid       int // the running server's, 0 if none

	launcher *spawnCmd
	toL      io.WriteCloser
	fromL    chan string // the launcher's answer lines
}

// launcherScript runs the server (its arguments) on "start" (answering its
// pid), kills it with SIGKILL on "kill", with SIGTERM on "term" (answering
// "done" once it was reaped), and sends SIGQUIT on "quit".
const launcherScript = `log=$1; shift
pid=
while read -r cmd; do
  case $cmd in
  start) "$@" >>"$log" 2>&1 </dev/null & pid=$!; echo $pid ;;
  kill) kill -9 $pid 2>/dev/null; wait $pid; echo done ;;
  term) kill -TERM $pid 2>/dev/null; wait $pid; echo done ;;
  quit) kill -QUIT $pid 2>/dev/null; echo done ;;
  esac
done`

func newServeProc(t *testing.T, extra ...string) *srvProc {
	t.Helper()
	requireRoot(t)
	s := &srvProc{t: t, export: diskTempDir(t, "snfs-export-"), stateDir: diskTempDir(t, "snfs-state-"),
		nfsPort: freePort(t), mountPort: freePort(t), extra: extra}
	os.Chmod(s.export, 0o777)
	s.metrics = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	s.logPath = filepath.Join(diskTempDir(t, "snfs-log-"), "serve.log")
	args := append([]string{"serve", "--bind", "127.0.0.1", "--nfs-port", strconv.Itoa(s.nfsPort),
		"--mount-port", strconv.Itoa(s.mountPort), "--state-dir", s.stateDir,
		"--export-options", "rw,no_root_squash", "--metrics", s.metrics}, s.extra...)
	args = append(args, s.export)
	s.launcher = command("bash", append([]string{"-c", launcherScript, "launcher", s.logPath, snfsBinary(t)}, args...)...)
	var err error
	if s.toL, err = s.launcher.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := s.launcher.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s.launcher.Stderr = os.Stderr
	if err := s.launcher.Start(); err != nil {
		t.Fatal(err)
	}
	s.fromL = make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			s.fromL <- sc.Text()
		}
		close(s.fromL)
	}()
	s.start()
	t.Cleanup(func() {
		s.stop()
		s.toL.Close() // the launcher's read fails: it exits
		s.launcher.Wait()
		if t.Failed() {
			t.Logf("serve log (tail):\n%s", tail(s.logPath, 40))
		}
	})
	return s
}

func (s *srvProc) addr() string { return fmt.Sprintf("127.0.0.1:%d", s.nfsPort) }

func (s *srvProc) mountAddr() string { return fmt.Sprintf("127.0.0.1:%d", s.mountPort) }

func (s *srvProc) path(name string) string { return filepath.Join(s.export, name) }

// restart kills the server with SIGKILL and starts it again.
func (s *srvProc) restart() {
	s.t.Helper()
	if err := s.kill9(); err != nil {
		s.t.Fatal(err)
	}
	s.start()
}

// ask sends the launcher a command and returns its answer.
func (s *srvProc) ask(cmd string, timeout time.Duration) (string, error) {
	if _, err := io.WriteString(s.toL, cmd+"\n"); err != nil {
		return "", err
	}
	select {
	case l, ok := <-s.fromL:
		if !ok {
			return "", errors.New("the launcher exited")
		}
		return l, nil
	case <-time.After(timeout):
		// A launcher forked while a FLUSH of one of this process's
		// descriptors waits is held in its execve (stuckReport).
		return "", fmt.Errorf("the launcher did not answer %q within %v; stuck:\n%s", cmd, timeout, stuckReport(5*time.Second))
	}
}

// start runs the server and waits until it answers on its NFS port.
func (s *srvProc) start() {
	s.t.Helper()
	if err := s.startErr(); err != nil {
		s.t.Fatal(err)
	}
}

// gone reports whether process pid has exited (or is a zombie).
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) == 0 || f[0] == "Z"
}

// startErr is start for any goroutine: it returns the failure.
func (s *srvProc) startErr() error {
	s.starts++
	if f, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
		fmt.Fprintf(f, "=== %s start %d\n", time.Now().Format("15:04:05.000"), s.starts)
		f.Close()
	}
	l, err := s.ask("start", 30*time.Second)
	if err != nil {
		return err
	}
	if s.pid, err = strconv.Atoi(l); err != nil {
		return fmt.Errorf("launcher: %q", l)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.addr(), time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if gone(s.pid) {
			s.ask("kill", 10*time.Second) // reap it
			s.pid = 0
			return fmt.Errorf("snfs serve exited at start %d: %s", s.starts, tail(s.logPath, 20))
		}
		if time.Now().After(deadline) {
			s.ask("quit", 10*time.Second) // a goroutine dump into the log
			time.Sleep(time.Second)
			s.ask("kill", 10*time.Second)
			s.pid = 0
			return fmt.Errorf("snfs serve did not listen within 30 s: %s", tail(s.logPath, 60))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill9 kills the server with SIGKILL: no shutdown, no flush.
func (s *srvProc) kill9() error {
	if s.pid == 0 {
		return nil
	}
	_, err := s.ask("kill", 30*time.Second)
	s.pid = 0
	return err
}

// stop ends the server with SIGTERM (SIGKILL if it does not end).
func (s *srvProc) stop() {
	if s.pid == 0 {
		return
	}
	if _, err := s.ask("term", 20*time.Second); err != nil {
		s.t.Errorf("snfs serve did not stop on SIGTERM: %v", err)
		syscall.Kill(s.pid, syscall.SIGKILL)
	}
	s.pid = 0
}

// metric sums the samples of the Prometheus series name (any labels) the
// server exports; -1 if it cannot be read.
func (s *srvProc) metric(name string) float64 {
	v, err := metricSum(s.metrics, name)
	if err != nil {
		return -1
	}
	return v
}

// metricSum sums the samples of family whose labels include the given
// name=value pairs, at http://addr/metrics; 0 if there are none.
func metricSum(addr, family string, labels ...string) (float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	total := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, family+"{") && !strings.HasPrefix(l, family+" ") {
			continue
		}
		match := true
		for k := 0; k+1 < len(labels); k += 2 {
			match = match && strings.Contains(l, labels[k]+`="`+labels[k+1]+`"`)
		}
		if !match {
			continue
		}
		f := strings.Fields(l)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			total += v
		}
	}
	return total, sc.Err()
}

// mntProc is one `snfs mount --mode=snfs --foreground` process.
type mntProc struct {
	t        *testing.T
	dir      string
	cacheDir string
	logPath  string
	metrics  string // host:port of its --metrics, "" if none
	cmd      *spawnCmd
	exited   chan struct{}
}

// newMountProc mounts s's export in snfs mode through nfsPort (the server's,
// or a proxy's) with its own cache directory. Write-back is delayed by
// delay; delayed close is off, so that a close is a CLOSE.
func newMountProc(t *testing.T, s *srvProc, nfsPort int, delay time.Duration) *mntProc {
	t.Helper()
	return newMountProcFlags(t, s, nfsPort, "--writeback-delay", delay.String(), "--close-delay", "0", "--log-level", "debug")
}

// newMountProcFlags is newMountProc with the mount's flags given whole.
func newMountProcFlags(t *testing.T, s *srvProc, nfsPort int, flags ...string) *mntProc {
	t.Helper()
	m := newMnt(t, "", "")
	m.launch(s, nfsPort, flags...)
	t.Cleanup(func() {
		m.stop()
		if t.Failed() {
			t.Logf("mount %s log (tail):\n%s", m.dir, tail(m.logPath, 40))
		}
	})
	return m
}

// startMount mounts s's export on dir with cacheDir ("" for new ones), an
// hour's write-back delay and metrics; it returns once the mount is usable
// (after its recovery). It is unmounted with `snfs umount` when the test
// ends.
func startMount(t *testing.T, s *srvProc, dir, cacheDir string, extra ...string) *mntProc {
	t.Helper()
	m := newMnt(t, dir, cacheDir)
	m.metrics = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	m.launch(s, s.nfsPort, append([]string{"--writeback-delay", "1h", "--log-level", "info", "--metrics", m.metrics}, extra...)...)
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(m.logPath)
			t.Logf("log of the mount on %s:\n%s", m.dir, b)
		}
	})
	t.Cleanup(m.umount)
	return m
}

// newMnt is a mount not started yet, on dir with cacheDir ("" for new ones).
func newMnt(t *testing.T, dir, cacheDir string) *mntProc {
	t.Helper()
	requireFUSE(t)
	if dir == "" {
		dir = diskTempDir(t, "snfs-mnt-")
	}
	if cacheDir == "" {
		cacheDir = diskTempDir(t, "snfs-cache-")
	}
	return &mntProc{t: t, dir: dir, cacheDir: cacheDir, logPath: filepath.Join(diskTempDir(t, "snfs-log-"), "mount.log")}
}

// launch runs `snfs mount` in the foreground with flags, its log appended to
// m.logPath, and waits for its readiness (fd 3).
func (m *mntProc) launch(s *srvProc, nfsPort int, flags ...string) {
	t := m.t
	t.Helper()
	logf, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	args := append([]string{"mount", "--foreground", "--mode=snfs",
		"--nfs-port", strconv.Itoa(nfsPort), "--mount-port", strconv.Itoa(s.mountPort),
		"--cache-dir", m.cacheDir}, flags...)
	cmd := command(snfsBinary(t), append(args, "127.0.0.1:"+s.export, m.dir)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{w} // fd 3: "ok" once the mount is usable
	cmd.Env = append(os.Environ(), "SNFS_MOUNT_READY_FD=3")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with the test binary
	if err := cmd.Start(); err != nil {
		w.Close()
		t.Fatal(err)
	}
	w.Close()
	m.cmd, m.exited = cmd, make(chan struct{})
	go func() { cmd.Wait(); close(m.exited) }()
	msg := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(r).ReadString('\n')
		msg <- strings.TrimSpace(line)
	}()
	select {
	case l := <-msg:
		if l != "ok" {
			t.Fatalf("snfs mount: %q\n%s", l, tail(m.logPath, 20))
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("snfs mount was not ready within 60 s\n%s", tail(m.logPath, 20))
	}
}

// pid is the mount process's.
func (m *mntProc) pid() int { return m.cmd.Process.Pid }

// umount unmounts with `snfs umount`, which waits for the write-back (a
// dead mount is only detached).
func (m *mntProc) umount() {
	if m.cmd == nil {
		return
	}
	select {
	case <-m.exited:
		m.cmd = nil
		command("umount", "-l", m.dir).Run()
		return
	default:
	}
	if out, err := command(snfsBinary(m.t), "umount", "--timeout", "60s", m.dir).CombinedOutput(); err != nil {
		m.t.Errorf("snfs umount: %v\n%s", err, out)
		m.kill9()
		return
	}
	<-m.exited
	m.cmd = nil
}

func (m *mntProc) path(name string) string { return filepath.Join(m.dir, name) }

// kill9 kills the mount process, which fails the requests the kernel still
// has for it (a test goroutine stuck in one returns), and detaches the mount.
// quit ends the mount with SIGQUIT, which makes the Go runtime write every
// goroutine's stack to its log, and returns that part of the log; the mount
// is then gone (detached as kill9 does).
func (m *mntProc) quit() string {
	if m.cmd == nil {
		return "(not running)"
	}
	before := 0
	if fi, err := os.Stat(m.logPath); err == nil {
		before = int(fi.Size())
	}
	m.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-m.exited:
	case <-time.After(10 * time.Second):
	}
	m.kill9()
	b, _ := os.ReadFile(m.logPath)
	if before > len(b) {
		before = 0
	}
	return string(b[before:])
}

// goroutines is the running server's goroutine profile (its metrics
// address serves /debug/pprof), or why not.
func (s *srvProc) goroutines() string { return pprofGoroutines(s.metrics) }

// goroutines is the mount's goroutine profile, from its --metrics address
// (/debug/pprof), or why not.
func (m *mntProc) goroutines() string {
	if m.metrics == "" {
		return "(the mount has no --metrics: no goroutine profile)"
	}
	return "the mount's goroutines:\n" + pprofGoroutines(m.metrics)
}

// pprofGoroutines is the goroutine profile served at addr's /debug/pprof.
func pprofGoroutines(addr string) string {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

func (m *mntProc) kill9() {
	if m.cmd == nil {
		return
	}
	m.cmd.Process.Signal(syscall.SIGKILL)
	<-m.exited
	m.cmd = nil
	command("umount", "-l", m.dir).Run()
}

// stop unmounts cleanly (SIGTERM: the mount writes back and exits), or kills
// and detaches the mount if that does not finish within a minute. It
// reports whether the clean stop worked.
func (m *mntProc) stop() bool {
	if m.cmd == nil {
		return true
	}
	m.cmd.Process.Signal(syscall.SIGTERM)
	clean := true
	select {
	case <-m.exited:
	case <-time.After(60 * time.Second):
		m.t.Errorf("snfs mount %s did not exit within 60 s of SIGTERM", m.dir)
		clean = false
		m.cmd.Process.Signal(syscall.SIGKILL)
		<-m.exited
	}
	if m.cmd.ProcessState != nil && !m.cmd.ProcessState.Success() {
		clean = false
	}
	m.cmd = nil
	if isMounted(m.dir) {
		command("fusermount", "-u", "-z", m.dir).Run()
		command("umount", "-l", m.dir).Run()
	}
	return clean
}

// isMounted reports whether dir is a mount point now.
func isMounted(dir string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// tail is the last n lines of the file at p.
func tail(p string, n int) string {
	f, err := os.Open(p)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
