package tests

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
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
		out, err := exec.Command("go", "build", "-o", faultsBin.path, "../cmd/snfs").CombinedOutput()
		if err != nil {
			faultsBin.err = fmt.Errorf("go build ../cmd/snfs: %v\n%s", err, out)
		}
	})
	if faultsBin.err != nil {
		t.Fatal(faultsBin.err)
	}
	return faultsBin.path
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago (UDP
// too, as the server binds both).
func freePort(t testing.TB) int {
	t.Helper()
	for i := 0; i < 100; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := ln.Addr().(*net.TCPAddr).Port
		pc, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", p))
		ln.Close()
		if err == nil {
			pc.Close()
			return p
		}
	}
	t.Fatal("no free port")
	return 0
}

// srvProc is one `snfs serve` process over one export; restarts keep the
// export, state directory and ports.
type srvProc struct {
	t         *testing.T
	export    string
	stateDir  string
	nfsPort   int
	mountPort int
	metrics   string // host:port of --metrics
	extra     []string
	logPath   string
	cmd       *exec.Cmd
	exited    chan struct{} // closed when cmd has been waited for
	starts    int
}

func newServeProc(t *testing.T, extra ...string) *srvProc {
	t.Helper()
	requireRoot(t)
	s := &srvProc{t: t, export: diskTempDir(t, "snfs-export-"), stateDir: diskTempDir(t, "snfs-state-"),
		nfsPort: freePort(t), mountPort: freePort(t), extra: extra}
	os.Chmod(s.export, 0o777)
	s.metrics = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	s.logPath = filepath.Join(diskTempDir(t, "snfs-log-"), "serve.log")
	s.start()
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			t.Logf("serve log (tail):\n%s", tail(s.logPath, 40))
		}
	})
	return s
}

func (s *srvProc) addr() string { return fmt.Sprintf("127.0.0.1:%d", s.nfsPort) }

// start runs the server and waits until it answers on its NFS port.
func (s *srvProc) start() {
	s.t.Helper()
	if err := s.startErr(); err != nil {
		s.t.Fatal(err)
	}
}

// startErr is start for any goroutine: it returns the failure.
func (s *srvProc) startErr() error {
	args := append([]string{"serve", "--bind", "127.0.0.1", "--nfs-port", strconv.Itoa(s.nfsPort),
		"--mount-port", strconv.Itoa(s.mountPort), "--state-dir", s.stateDir,
		"--export-options", "rw,no_root_squash", "--metrics", s.metrics}, s.extra...)
	args = append(args, s.export)
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	s.starts++
	fmt.Fprintf(logf, "=== %s start %d: %v\n", time.Now().Format("15:04:05.000"), s.starts, args)
	cmd := exec.Command(snfsBinary(s.t), args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return err
	}
	s.cmd = cmd
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.addr(), time.Second)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-exited:
			s.cmd = nil
			return fmt.Errorf("snfs serve exited at start %d: %s", s.starts, tail(s.logPath, 20))
		default:
		}
		if time.Now().After(deadline) {
			// A goroutine dump into the log says where it is stuck.
			cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-exited:
			case <-time.After(5 * time.Second):
				cmd.Process.Signal(syscall.SIGKILL)
				<-exited
			}
			s.cmd = nil
			return fmt.Errorf("snfs serve did not listen within 30 s: %s", tail(s.logPath, 60))
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.exited = exited
	return nil
}

// kill9 kills the server with SIGKILL: no shutdown, no flush.
func (s *srvProc) kill9() error {
	if s.cmd == nil {
		return nil
	}
	s.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		return fmt.Errorf("snfs serve (pid %d) did not exit within 30 s of SIGKILL", s.cmd.Process.Pid)
	}
	s.cmd = nil
	return nil
}

// stop ends the server with SIGTERM (SIGKILL after 20 s).
func (s *srvProc) stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(20 * time.Second):
		s.t.Errorf("snfs serve did not stop on SIGTERM within 20 s")
		s.cmd.Process.Signal(syscall.SIGKILL)
		<-s.exited
	}
	s.cmd = nil
}

// metric sums the samples of the Prometheus series name (any labels) the
// server exports; -1 if it cannot be read.
func (s *srvProc) metric(name string) float64 {
	resp, err := http.Get("http://" + s.metrics + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	total := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, name) || len(l) <= len(name) || (l[len(name)] != ' ' && l[len(name)] != '{') {
			continue
		}
		f := strings.Fields(l)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			total += v
		}
	}
	return total
}

// mntProc is one `snfs mount --mode=snfs --foreground` process.
type mntProc struct {
	t        *testing.T
	dir      string
	cacheDir string
	logPath  string
	cmd      *exec.Cmd
	exited   chan struct{}
}

// newMountProc mounts s's export in snfs mode through nfsPort (the server's,
// or a proxy's) with its own cache directory. Write-back is delayed by
// delay; delayed close is off, so that a close is a CLOSE.
func newMountProc(t *testing.T, s *srvProc, nfsPort int, delay time.Duration) *mntProc {
	t.Helper()
	requireFUSE(t)
	m := &mntProc{t: t, dir: diskTempDir(t, "snfs-mnt-"), cacheDir: diskTempDir(t, "snfs-cache-")}
	m.logPath = filepath.Join(diskTempDir(t, "snfs-log-"), "mount.log")
	m.start(s, nfsPort, delay)
	t.Cleanup(func() {
		m.stop()
		if t.Failed() {
			t.Logf("mount %s log (tail):\n%s", m.dir, tail(m.logPath, 40))
		}
	})
	return m
}

func (m *mntProc) start(s *srvProc, nfsPort int, delay time.Duration) {
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
	cmd := exec.Command(snfsBinary(t), "mount", "--foreground", "--mode=snfs",
		"--nfs-port", strconv.Itoa(nfsPort), "--mount-port", strconv.Itoa(s.mountPort),
		"--cache-dir", m.cacheDir, "--writeback-delay", delay.String(), "--close-delay", "0",
		"--log-level", "debug", "127.0.0.1:"+s.export, m.dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{w} // fd 3: "ok" once the mount is usable
	cmd.Env = append(os.Environ(), "SNFS_MOUNT_READY_FD=3")
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

func (m *mntProc) path(name string) string { return filepath.Join(m.dir, name) }

// kill9 kills the mount process, which fails the requests the kernel still
// has for it (a test goroutine stuck in one returns), and detaches the mount.
func (m *mntProc) kill9() {
	if m.cmd == nil {
		return
	}
	m.cmd.Process.Signal(syscall.SIGKILL)
	<-m.exited
	m.cmd = nil
	exec.Command("umount", "-l", m.dir).Run()
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
		exec.Command("fusermount", "-u", "-z", m.dir).Run()
		exec.Command("umount", "-l", m.dir).Run()
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
