package tests

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLeftoverSweep: a test binary that dies with a mount up and a detached
// process naming it leaves nothing behind for long. Killed outright (SIGKILL,
// no code of it runs), its mount and process are there until the next run's
// sweep (sweepDeadRuns), which detaches and ends them; run with a short
// -timeout, its watchdog does that itself before Go's alarm. Each child is a
// copy of this binary running TestLeftoverChild.
func TestLeftoverSweep(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	mine := diskTempDir(t, "snfs-sweep-")
	if deadRunPath(mine) {
		t.Fatalf("this run's own %s counts as a dead run's", mine)
	}
	for _, tc := range []struct {
		name    string
		timeout time.Duration // the child's -test.timeout; 0: killed instead
	}{{"killed", 0}, {"timeout", 20 * time.Second}} {
		// One after the other: each child is a test binary that sweeps dead
		// runs as it starts, so a child started while the killed one's
		// leftovers await their check swept them first (a CI failure: "after
		// the kill: mounts []").
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"-test.run=^TestLeftoverChild$", "-test.v"}
			if tc.timeout > 0 {
				args = append(args, "-test.timeout="+tc.timeout.String())
			}
			cmd := command(os.Args[0], args...)
			cmd.Env = append(os.Environ(), "SNFS_LEFTOVER_CHILD=1")
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			// Its stderr (the watchdog's goroutine dump) only on a failure.
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			child := cmd.Process.Pid
			exited := make(chan struct{}) // closed when the child is reaped
			var exitErr error
			ofChild := func(p string) bool { return strings.Contains(p, "r"+strconv.Itoa(child)+"-") }
			t.Cleanup(func() {
				cmd.Process.Kill()
				<-exited
				if t.Failed() {
					t.Logf("the child's stderr:\n%s", stderr.Bytes())
				}
				cleanLeftovers(ofChild, false) // on a failure: nothing of the child stays
				if len(fuseMountsOf(ofChild)) == 0 {
					dirs, _ := filepath.Glob("/var/tmp/snfs-*r" + strconv.Itoa(child) + "-*")
					for _, d := range dirs {
						os.RemoveAll(d)
					}
				}
			})
			var dir string
			var holder int
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if _, err := fmt.Sscanf(sc.Text(), "mounted %s %d", &dir, &holder); err == nil {
					break
				}
			}
			go func() { io.Copy(io.Discard, out); exitErr = cmd.Wait(); close(exited) }()
			if dir == "" {
				t.Fatal("the child ended without mounting")
			}
			if deadRunPath(dir) {
				t.Fatalf("%s counts as a dead run's while its run runs", dir)
			}
			if tc.timeout == 0 {
				cmd.Process.Signal(syscall.SIGKILL)
			}
			select {
			case <-exited:
				if exitErr == nil {
					t.Fatal("the child passed")
				}
			case <-time.After(tc.timeout + time.Minute): // a failure bound
				t.Fatal("the child still runs past its -timeout")
			}
			if tc.timeout == 0 {
				// Killed: its mount and the process naming it are left...
				if len(fuseMountsOf(ofChild)) != 1 || !running(holder) {
					t.Fatalf("after the kill: mounts %v, process %d running %v; want the leftovers", fuseMountsOf(ofChild), holder, running(holder))
				}
				if !deadRunPath(dir) {
					t.Fatalf("%s does not count as a dead run's after the kill", dir)
				}
				// ...until a run's sweep.
				did := cleanLeftovers(func(p string) bool { return deadRunPath(p) && ofChild(p) }, false)
				t.Logf("the sweep: %q", did)
			}
			if m := fuseMountsOf(ofChild); len(m) != 0 {
				t.Fatalf("still mounted: %v", m)
			}
			for k := 0; running(holder); k++ {
				if k == 1000 {
					t.Fatalf("process %d naming the mount point still runs", holder)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// TestLeftoverChild is TestLeftoverSweep's child: it mounts, starts a
// detached process naming the mount point (as a daemonized `snfs mount`
// does), says "mounted DIR PID" and waits to be killed or
// timed out.
func TestLeftoverChild(t *testing.T) {
	if os.Getenv("SNFS_LEFTOVER_CHILD") == "" {
		t.Skip("the child of TestLeftoverSweep")
	}
	e := newEnv(t, "rw,no_root_squash")
	m := newSNFSMountOpts(t, e, "A", time.Hour, 0, false)
	if err := os.WriteFile(m.path("f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A shell that names the mount point (its $0) and does not touch the
	// mount, so that it outlives it.
	holder := command("sh", "-c", "while sleep 1; do :; done", m.dir)
	holder.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("mounted %s %d\n", m.dir, holder.Process.Pid)
	select {}
}
