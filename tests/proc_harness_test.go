package tests

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Helpers for tests that run the real `snfs` binary (`snfs mount` as its own
// process, as a user or mount(8) runs it) and for tests of other servers.

// requireInCI skips the test with why when what it needs is missing here,
// but fails it when CI is set (.ci/run sets it and installs everything the
// tests need): in CI a missing package is a defect of the CI setup, not a
// reason to pass without testing.
func requireInCI(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("CI=%s and %s (.ci/run must install it)", os.Getenv("CI"), why)
	}
	t.Skip(why)
}

// longRun: the long end-to-end suites run (fsx at full length, crash
// cycles, the Linux guest, nfs-ganesha's fsx, pjdfstest, big directories).
// scripts/test.sh sets SNFS_LONG=1 and CI runs everything; a plain
// `go test ./...` runs the rest, and fsx for a short while, so that it ends
// within Go's default timeout.
func longRun() bool { return os.Getenv("SNFS_LONG") != "" || os.Getenv("CI") != "" }

// requireLong skips a long end-to-end test outside a long run (longRun).
func requireLong(t testing.TB) {
	t.Helper()
	if !longRun() {
		t.Skip("a long end-to-end test: runs with SNFS_LONG=1 (scripts/test.sh and CI set it)")
	}
}

// lockedBuffer collects a process's log while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer // guarded by mu
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// procMount is one `snfs mount --foreground` process.
type procMount struct {
	dir  string
	bin  string
	cmd  *spawnCmd
	log  *lockedBuffer // the process's standard error: its log
	done chan error    // the process's exit
}

// startProcMount runs `bin mount --foreground ARGS SPEC DIR` on a fresh mount
// point and returns once the mount says "mounted" (failing the test if it
// exits first). The test's end unmounts it with `snfs umount` (a lazy
// unmount and SIGKILL if that does not work) and waits for the process.
func startProcMount(t *testing.T, bin, spec string, args ...string) *procMount {
	t.Helper()
	requireFUSE(t)
	return startProcMountAt(t, bin, spec, diskTempDir(t, "snfs-pmnt-"), args...)
}

// startProcMountAt is startProcMount on the mount point dir.
func startProcMountAt(t *testing.T, bin, spec, dir string, args ...string) *procMount {
	t.Helper()
	m := &procMount{dir: dir, bin: bin, log: new(lockedBuffer), done: make(chan error, 1)}
	m.cmd = command(bin, append(append([]string{"mount", "--foreground"}, args...), spec, dir)...)
	m.cmd.Stdout, m.cmd.Stderr = m.log, m.log
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { m.done <- m.cmd.Wait() }()
	t.Cleanup(func() { m.stop(t) })
	deadline := time.After(30 * time.Second)
	for !strings.Contains(m.log.String(), "msg=mounted") {
		select {
		case err := <-m.done:
			m.done <- err
			t.Fatalf("snfs mount exited before mounting (%v); its log:\n%s", err, m.log.String())
		case <-deadline:
			t.Fatalf("snfs mount did not mount within 30 s; its log:\n%s", m.log.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return m
}

// stop unmounts and waits for the process to write back and exit; it fails
// the test if the process exits with an error.
func (m *procMount) stop(t *testing.T) {
	if m.cmd == nil {
		return
	}
	defer func() { m.cmd = nil }()
	if out, err := command(m.bin, "umount", "--timeout", "60s", m.dir).CombinedOutput(); err != nil {
		t.Errorf("snfs umount %s: %v\n%s", m.dir, err, out)
		syscall.Unmount(m.dir, syscall.MNT_DETACH)
	}
	select {
	case err := <-m.done:
		if err != nil {
			t.Errorf("snfs mount exited with %v; its log:\n%s", err, m.log.String())
		}
	case <-time.After(60 * time.Second):
		m.cmd.Process.Kill()
		<-m.done
		t.Errorf("snfs mount still running 60 s after unmount; killed; its log:\n%s", m.log.String())
	}
}

func (m *procMount) path(name string) string { return filepath.Join(m.dir, name) }

// portArgs are the --nfs-port and --mount-port flags for ports nfs and mnt.
func portArgs(nfs, mnt int) []string {
	return []string{fmt.Sprintf("--nfs-port=%d", nfs), fmt.Sprintf("--mount-port=%d", mnt)}
}
