package tests

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSpawnNoFUSEDescriptors: a program a test runs holds none of this
// process's descriptors, so none of its files on the FUSE mounts served
// here: with one open on a mount whose FLUSH waits (as an nfs-mode FLUSH
// waits for a COMMIT to a stopped server), programs run to their end, no
// FLUSH comes from another process's copy, and neither the child's nor the
// spawner's descriptors name the mount. (Forked from this process, the
// child's execve closes its copy: its FLUSH waits, and the child with it,
// holding every other test's files: busy_stuck_test.go.)
func TestSpawnNoFUSEDescriptors(t *testing.T) {
	requireFUSE(t)
	// Serial: the held FLUSH would hold a child forked from this process
	// by another test, were this failing.
	dir, file, release := mountHeldFlush(t)
	f, err := os.Open(filepath.Join(dir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		release() // f's own FLUSH does not wait
		f.Close()
	}()

	// A copy closed by another process is a FLUSH, which the file
	// reports before it waits: no copy may be closed before Run ends.
	within := func(what string, step func() error) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- step() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		case <-file.flushes:
			t.Fatalf("%s: a FLUSH of the file this process has open on %s came from another process's copy: "+
				"a child was forked holding this process's descriptors", what, dir)
		case <-time.After(2 * time.Minute):
			t.Fatalf("%s: not done within 2 minutes while a FLUSH on %s waits", what, dir)
		}
	}
	within("true", command("true").Run)

	// A child alive meanwhile: its descriptors, and the spawner's, are
	// read while it runs (bounded: /proc waits for an execve).
	cat := command("cat")
	in, err := cat.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	within("cat's start", cat.Start)
	defer cat.Process.Kill()
	for _, pid := range []int{cat.Process.Pid, spawner.pid} {
		var links []string
		within(fmt.Sprintf("the descriptors of pid %d", pid), func() error {
			var err error
			links, err = fdLinks(pid)
			return err
		})
		for _, l := range links {
			if l == dir || strings.HasPrefix(l, dir+"/") {
				t.Errorf("pid %d (cat %d, spawner %d) has %s open", pid, cat.Process.Pid, spawner.pid, l)
			}
		}
	}
	in.Close()
	within("cat's end", cat.Wait)
}

// fdLinks lists what the descriptors of process pid name.
func fdLinks(pid int) ([]string, error) {
	fds, err := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	if err != nil || len(fds) == 0 {
		return nil, fmt.Errorf("descriptors of pid %d: none read (%v)", pid, err)
	}
	var out []string
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil {
			out = append(out, l)
		}
	}
	return out, nil
}

// TestSpawnCmd: spawnCmd behaves as exec.Cmd where the tests use it: exit
// statuses and signals (ExitCode -1), standard input from a reader and
// output to writers, pipes, CombinedOutput's one descriptor for both,
// environment, directory, extra files, Kill, a context's end, Setsid, and a
// running child holding up no other.
func TestSpawnCmd(t *testing.T) {
	t.Parallel()
	t.Run("exit", func(t *testing.T) {
		err := command("sh", "-c", "echo oops >&2; exit 3").Run()
		var ee *exitError
		if !errors.As(err, &ee) || ee.ExitCode() != 3 || err.Error() != "exit status 3" || ee.Exited() != true {
			t.Fatalf("exit 3: %v (%#v)", err, ee)
		}
		out, err := command("sh", "-c", "echo out; echo oops >&2; exit 1").Output()
		if !errors.As(err, &ee) || string(out) != "out\n" || string(ee.Stderr) != "oops\n" {
			t.Fatalf("Output: %q, %v", out, err)
		}
		if err := command("true").Run(); err != nil {
			t.Fatal(err)
		}
		if err := command("no-such-program-snfs").Run(); err == nil {
			t.Fatal("a program not found ran")
		}
	})
	t.Run("signal", func(t *testing.T) {
		c := command("sh", "-c", "kill -KILL $$")
		err := c.Run()
		var ee *exitError
		if !errors.As(err, &ee) || ee.ExitCode() != -1 || err.Error() != "signal: killed" || c.ProcessState.Success() {
			t.Fatalf("killed: %v", err)
		}
	})
	t.Run("io", func(t *testing.T) {
		c := command("sh", "-c", "cat; echo err >&2")
		c.Stdin = strings.NewReader("in\n")
		out, err := c.CombinedOutput()
		if err != nil || string(out) != "in\nerr\n" {
			t.Fatalf("CombinedOutput: %q, %v", out, err)
		}
		c = command("sh", "-c", `echo "$X|$HOME"; pwd`)
		c.Env, c.Dir = []string{"X=x"}, "/usr"
		out, err = c.Output()
		if err != nil || string(out) != "x|\n/usr\n" {
			t.Fatalf("Env, Dir: %q, %v", out, err)
		}
		c = command("sh", "-c", "env")
		c.Env = []string{}
		if out, err = c.Output(); err != nil || strings.Contains(string(out), spawnerEnv) {
			t.Fatalf("an empty environment: %q, %v", out, err)
		}
		// Arguments are bytes, not text.
		out, err = command("printf", "%s", "\xff\xfe").Output()
		if err != nil || string(out) != "\xff\xfe" {
			t.Fatalf("an argument not UTF-8: %q, %v", out, err)
		}
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		c = command("sh", "-c", "echo three >&3")
		c.ExtraFiles = []*os.File{w}
		err = c.Run()
		w.Close()
		got, _ := io.ReadAll(r)
		r.Close()
		if err != nil || string(got) != "three\n" {
			t.Fatalf("ExtraFiles: %q, %v", got, err)
		}
	})
	t.Run("pipes", func(t *testing.T) {
		c := command("cat")
		in, err := c.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := c.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		// Another child runs to its end meanwhile.
		if err := command("true").Run(); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(in, "line")
		l, err := bufio.NewReader(out).ReadString('\n')
		if err != nil || l != "line\n" {
			t.Fatalf("through cat: %q, %v", l, err)
		}
		in.Close()
		if err := c.Wait(); err != nil {
			t.Fatal(err)
		}
		if err := c.Wait(); err == nil {
			t.Fatal("a second Wait did not fail")
		}
	})
	t.Run("kill", func(t *testing.T) {
		c := command("sleep", "1000")
		var out bytes.Buffer
		c.Stdout = &out
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		if sid, err := unix.Getsid(c.Process.Pid); err != nil || sid != c.Process.Pid {
			t.Errorf("Setsid: session %d, %v; want %d", sid, err, c.Process.Pid)
		}
		if err := c.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := c.Wait(); c.ProcessState.ExitCode() != -1 || err == nil || err.Error() != "signal: killed" {
			t.Fatalf("killed: %v", err)
		}
		if err := c.Process.Signal(syscall.SIGKILL); !errors.Is(err, os.ErrProcessDone) {
			t.Fatalf("a signal to the child after Wait: %v, want %v", err, os.ErrProcessDone)
		}
	})
	t.Run("context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		c := commandContext(ctx, "sleep", "1000")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cancel()
		var ee *exitError
		if err := c.Wait(); !errors.As(err, &ee) || ee.ExitCode() != -1 {
			t.Fatalf("cancelled: %v", err)
		}
		if err := commandContext(ctx, "true").Run(); !errors.Is(err, context.Canceled) {
			t.Fatalf("started with its context done: %v", err)
		}
	})
}

// TestSpawnPdeathsig: children started with Pdeathsig die with the spawner
// (and so with the test binary, as when it forked them itself), others
// outlive it. A spawner of its own, started by the run's.
func TestSpawnPdeathsig(t *testing.T) {
	t.Parallel()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	mine, theirs := os.NewFile(uintptr(pair[0]), "spawner"), os.NewFile(uintptr(pair[1]), "spawner-child")
	defer mine.Close()
	sc := command(os.Args[0])
	sc.Env = append(os.Environ(), spawnerEnv+"=1")
	sc.ExtraFiles = []*os.File{theirs}
	sc.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = sc.Start()
	theirs.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Wait()
	defer sc.Process.Kill()
	sub := newSpawnClient(mine, sc.Process.Pid)

	start := func(attr *syscall.SysProcAttr) *spawnCmd {
		c := command("sleep", "1000")
		c.via, c.SysProcAttr = sub, attr
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		return c
	}
	dying := start(&syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL})
	staying := start(&syscall.SysProcAttr{Setsid: true})
	// Not reaped by the spawner once it is gone: its end is polled.
	pfd := func(c *spawnCmd) int {
		fd, err := unix.PidfdOpen(c.Process.Pid, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		return fd
	}
	dyingFD, stayingFD := pfd(dying), pfd(staying)
	defer staying.Process.Kill()

	if err := sc.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := sc.Wait(); err == nil {
		t.Fatal("the killed spawner exited 0")
	}
	// The child's exit is immediate on the spawner's; a bound, not a
	// measure.
	fds := []unix.PollFd{{Fd: int32(dyingFD), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, 60_000); n != 1 || err != nil {
		t.Fatalf("the child started with Pdeathsig still runs 60 s after its spawner was killed (%d, %v)", n, err)
	}
	fds = []unix.PollFd{{Fd: int32(stayingFD), Events: unix.POLLIN}}
	if n, _ := unix.Poll(fds, 0); n != 0 {
		t.Fatal("the child started without Pdeathsig ended with its spawner")
	}
	if err := dying.Wait(); err == nil || !strings.Contains(err.Error(), "spawner") {
		t.Fatalf("Wait for a child of a spawner gone: %v, want the spawner named", err)
	}
	c := command("true")
	c.via = sub
	if err := c.Run(); err == nil {
		t.Fatal("a spawner gone started a child")
	}
}

// forkPattern matches what starts a program from this process.
var forkPattern = regexp.MustCompile(`\bexec\.Command(Context)?\(|\bos\.StartProcess\(|\bsyscall\.(ForkExec|Exec|StartProcess)\(|\bunix\.Exec\(`)

// TestSpawnOnly: the tests start programs through the spawner (command,
// commandContext) only: a program started from this process (exec.Command
// and the like) would hold, until its execve, every file the parallel tests
// have open on the mounts served here. A line that must fork here says so:
// "//snfs:fork-in-process" and why.
func TestSpawnOnly(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("the package's files: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range strings.Split(string(b), "\n") {
			if !strings.Contains(l, "Command") && !strings.Contains(l, "Exec") && !strings.Contains(l, "StartProcess") {
				continue // the regular expression on only the lines that may match
			}
			loc := forkPattern.FindStringIndex(l)
			if loc == nil || strings.Contains(l[:loc[0]], "//") || strings.Contains(l, "//snfs:fork-in-process ") {
				continue
			}
			t.Errorf("%s:%d: %s: a program started from the test process; use command or commandContext (spawn_test.go)",
				f, i+1, strings.TrimSpace(l))
		}
	}
	if ex := "exec."; !forkPattern.MatchString(`x := `+ex+`Command("true")`) || !forkPattern.MatchString(ex+`CommandContext(ctx, "true")`) {
		t.Fatal("forkPattern misses exec.Command")
	}
}
