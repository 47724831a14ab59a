package tests

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A test run leaves nothing mounted and no process behind, even when a test
// fails or the run times out (issue 25). t.Cleanup unmounts what a test
// mounted when the test ends normally or fails; what it cannot cover is
// covered here:
//   - a run that times out: Go's -timeout panics and exits without running
//     any cleanup, leaving FUSE mounts whose server is gone (or, when a child
//     process inherited the FUSE descriptor, mounts that hang whoever looks
//     at them). A watchdog fires shortly before Go's alarm, detaches every
//     mount under a directory this run made, ends the run's processes and
//     exits with the goroutine dump Go would have printed.
//   - processes that outlive their test: the run's descendants, and the
//     processes whose command line names a directory of this run (the mount
//     daemons the tests start detach with setsid and are no longer
//     descendants), are ended by PID. (Not a child subreaper: orphans it
//     adopted would stay zombies, which look alive to the tests that check a
//     mount process is gone.)

//   - a run killed outright (SIGKILL: go test's own alarm a while after
//     -timeout when the watchdog could not run, a cancelled CI job) runs no
//     code at all: its children die with it (Pdeathsig, where a test starts
//     a child that mounts or locks), and the next run starts by detaching
//     the FUSE mounts, and ending the processes, of the directories of runs
//     no longer running (sweepDeadRuns; diskTempDir tags each directory
//     with its run's pid), reading /proc/self/mountinfo and /proc only:
//     nothing looks at a mount point, which may hang.

// runTag is what diskTempDir puts in a directory's name: "r", this
// process's pid, "-".
func runTag() string { return "r" + strconv.Itoa(os.Getpid()) + "-" }

// runDirName matches the name of a directory diskTempDir made (under
// /var/tmp), the pid of the run that made it in its first group.
var runDirName = regexp.MustCompile(`^snfs-.*r([0-9]+)-[0-9]+$`)

// deadRunPath reports whether path is at or under a directory that a test
// run made which is no longer running (not this one; a pid used again by
// another process counts as running: its leftovers are left, not another's
// taken).
func deadRunPath(path string) bool {
	rest, ok := strings.CutPrefix(path, "/var/tmp/")
	if !ok {
		return false
	}
	base, _, _ := strings.Cut(rest, "/")
	m := runDirName.FindStringSubmatch(base)
	if m == nil {
		return false
	}
	pid, err := strconv.Atoi(m[1])
	return err == nil && pid != os.Getpid() && !running(pid)
}

// running reports whether process pid exists and is not a zombie (a killed
// run not yet reaped has left its mounts already).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	k := strings.LastIndexByte(s, ')')
	return k < 0 || !strings.HasPrefix(s[k+1:], " Z")
}

// sweepDeadRuns detaches the mounts and ends the processes left by test
// runs no longer running, and returns what it did.
func sweepDeadRuns() []string { return cleanLeftovers(deadRunPath, false) }

// runDirs are the directories this run made under /var/tmp (diskTempDir):
// the only places where leftovers of this run can be mounted.
var runDirs struct {
	mu   sync.Mutex
	dirs []string
}

func noteRunDir(d string) {
	runDirs.mu.Lock()
	runDirs.dirs = append(runDirs.dirs, d)
	runDirs.mu.Unlock()
}

// ownedByRun reports whether path is at or under a directory this run made.
func ownedByRun(path string) bool {
	runDirs.mu.Lock()
	defer runDirs.mu.Unlock()
	for _, d := range runDirs.dirs {
		if path == d || strings.HasPrefix(path, d+"/") {
			return true
		}
	}
	return false
}

// startLeftoverGuard arms the timeout watchdog; the returned function cleans
// up after m.Run.
func startLeftoverGuard() (finish func() []string) {
	// The watchdog needs -test.timeout, which m.Run would parse later.
	if !flag.Parsed() {
		flag.Parse()
	}
	for _, s := range sweepDeadRuns() {
		fmt.Fprintln(os.Stderr, "snfs/tests: an earlier run's leftover: "+s)
	}
	var timer *time.Timer
	if f := flag.Lookup("test.timeout"); f != nil {
		if d, err := time.ParseDuration(f.Value.String()); err == nil && d > 0 {
			// The sweep walks /proc and kills and detaches: seconds on a
			// loaded machine, and Go's own alarm must not come first.
			margin := min(30*time.Second, max(d/10, min(8*time.Second, d/2)))
			timer = time.AfterFunc(d-margin, func() {
				fmt.Fprintf(os.Stderr, "snfs/tests: the run is about to pass -test.timeout=%v: detaching its mounts and ending its processes\n", d)
				for _, s := range cleanLeftovers(ownedByRun, true) {
					fmt.Fprintln(os.Stderr, "snfs/tests: "+s)
				}
				pprof.Lookup("goroutine").WriteTo(os.Stderr, 2)
				fmt.Fprintln(os.Stderr, "snfs/tests: timed out")
				os.Exit(2)
			})
		}
	}
	return func() []string {
		if timer != nil {
			timer.Stop()
		}
		return cleanLeftovers(ownedByRun, true)
	}
}

// cleanLeftovers kills the processes naming paths that owned accepts (with
// descendants, every process below this one too: one of them may hold a
// FUSE descriptor), then detaches the FUSE mounts whose mount point owned
// accepts (their connections aborted first, so nothing waits on a server
// that is gone). It returns what it did.
func cleanLeftovers(owned func(path string) bool, descendants bool) []string {
	var did []string
	for _, pid := range runProcesses(owned, descendants) {
		name := procName(pid)
		if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
			did = append(did, fmt.Sprintf("left running: pid %d %s (killed)", pid, name))
		}
	}
	for _, m := range fuseMountsOf(owned) {
		if m.conn != "" {
			os.WriteFile("/sys/fs/fuse/connections/"+m.conn+"/abort", []byte("1"), 0)
		}
		err := unix.Unmount(m.point, unix.MNT_DETACH)
		did = append(did, fmt.Sprintf("left mounted: %s (detached: %v)", m.point, errOrOK(err)))
	}
	return did
}

func errOrOK(err error) string {
	if err != nil {
		return err.Error()
	}
	return "ok"
}

type fuseMount struct {
	point string
	conn  string // the minor device number: /sys/fs/fuse/connections/N
}

// fuseMountsOf lists the FUSE mounts whose mount point keep accepts, deepest
// first (so a mount on a mount goes first).
func fuseMountsOf(keep func(string) bool) []fuseMount {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []fuseMount
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT POINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPER
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, x := range fields {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || sep+1 >= len(fields) {
			continue
		}
		fstype := fields[sep+1]
		if fstype != "fuse" && !strings.HasPrefix(fstype, "fuse.") {
			continue
		}
		point := unescapeMountinfo(fields[4])
		if !keep(point) {
			continue
		}
		conn := ""
		if _, minor, ok := strings.Cut(fields[2], ":"); ok {
			conn = minor
		}
		out = append(out, fuseMount{point: point, conn: conn})
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// runProcesses lists the live processes of this run: its descendants
// (children first) and the processes whose command line names one of its
// directories.
func runProcesses(owned func(path string) bool, descendants bool) []int {
	parent := map[int]int{}
	var named []int
	self := os.Getpid()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := readProcBounded(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(b)
		k := strings.LastIndexByte(s, ')')
		if k < 0 {
			continue
		}
		f := strings.Fields(s[k+1:])
		if len(f) < 2 || f[0] == "Z" {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			parent[pid] = ppid
		}
		if pid != self && cmdlineNames(pid, owned) {
			named = append(named, pid)
		}
	}
	var out []int
	frontier := []int{self}
	if !descendants {
		frontier = nil
	}
	for len(frontier) > 0 {
		var next []int
		for pid, pp := range parent {
			for _, f := range frontier {
				if pp == f {
					next = append(next, pid)
				}
			}
		}
		for _, pid := range next {
			// The spawner is the run's, not a leftover: it ends with
			// this process; its children are.
			if spawner == nil || pid != spawner.pid {
				out = append(out, pid)
			}
		}
		frontier = next
	}
	for _, pid := range named {
		if !slices.Contains(out, pid) {
			out = append(out, pid)
		}
	}
	return out
}

// cmdlineNames reports whether pid's arguments name a path that owned
// accepts.
func cmdlineNames(pid int, owned func(path string) bool) bool {
	// Reading another process's command line takes its memory map's lock,
	// which a thread of it stuck in a FUSE page fault (another run's hung
	// mount) holds: the read is given up after a while rather than hanging
	// the cleanup (the goroutine left in it ends when the read does).
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		done <- result{b, err}
	}()
	var b []byte
	select {
	case r := <-done:
		if r.err != nil {
			return false
		}
		b = r.b
	case <-time.After(2 * time.Second):
		return false
	}
	for _, arg := range strings.Split(string(b), "\x00") {
		for _, part := range strings.FieldsFunc(arg, func(r rune) bool { return r == '=' || r == ',' || r == ' ' }) {
			if strings.HasPrefix(part, "/") && owned(filepath.Clean(part)) {
				return true
			}
		}
	}
	return false
}

func procName(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b))
}

// TestLeftoverCleanup: what the run's last cleanup (and its timeout
// watchdog) does, on a mount and a process left behind on purpose: an snfs
// mount whose FUSE server stopped answering (as after a crash with the
// descriptor still held) is detached without hanging, and a detached
// process naming the directory is killed.
func TestLeftoverCleanup(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	m := newSNFSMountOpts(t, e, "A", time.Hour, 0, false)
	if err := os.WriteFile(m.path("f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	sleeper := command("tail", "-f", m.path("f"))
	sleeper.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- sleeper.Wait() }()
	// Its argument names a file under the mount point: the process is the
	// run's.
	owned := func(p string) bool { return p == m.dir || strings.HasPrefix(p, m.dir+"/") }
	// The process runs, named by its command line, before the cleanup
	// looks (a loaded machine: CI once found none and reported the mount
	// alone).
	for deadline := time.Now().Add(10 * time.Second); !slices.Contains(runProcesses(owned, false), sleeper.Process.Pid); time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-exited:
			t.Fatalf("tail -f of a file on the mount ended before the cleanup: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("tail -f of a file on the mount not seen running 10 s after its start")
		}
	}
	did := cleanLeftovers(owned, false)
	if len(fuseMountsOf(owned)) != 0 {
		t.Fatalf("still mounted after the cleanup: %v", did)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("the process naming the mount point still runs after the cleanup: %v", did)
	}
	if len(did) != 2 {
		t.Fatalf("cleanup reported %q, want the mount and the process", did)
	}
	// Nothing hangs on the detached mount point; the aborted connection
	// ends the mount's serve loop.
	if _, err := os.Stat(m.dir); err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { m.srv.Wait(); close(served) }()
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("the serve loop of the detached mount still runs")
	}
	m.srv = nil // unmounted here, not by the harness
	m.v.Close()
}

// readProcBounded reads a /proc file, giving up after 2 s: a process of
// another run stuck in its own FUSE mount can block the read of its stat
// for as long as it stays stuck (the read is left behind).
func readProcBounded(path string) ([]byte, error) {
	type read struct {
		b   []byte
		err error
	}
	ch := make(chan read, 1)
	go func() {
		b, err := os.ReadFile(path)
		ch <- read{b, err}
	}()
	select {
	case r := <-ch:
		return r.b, r.err
	case <-time.After(2 * time.Second):
		return nil, os.ErrDeadlineExceeded
	}
}
