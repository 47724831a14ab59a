package tests

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// stuckReport says, when busyHolders' scan of /proc did not end, what is
// stuck. One cause, reproduced (TestStuckReportNamesForkedChild): a child
// this process forked, stuck in its execve closing its copies of the test's
// descriptors (close-on-exec). The close of a descriptor on a FUSE mount is
// a FLUSH; one that waits keeps the child there, holding every other
// descriptor it copied, so other tests' mounts are busy too (and a launcher
// forked meanwhile answers nothing). The report names those children with
// their state (their stat, wchan, stack and command line wait for the
// execve, as busyHolders' readlinks do), the FUSE connections with requests
// waiting and their mount points, and the FLUSHes this process's mounts are
// serving, with their goroutines: which mount's FLUSH waits, and on what.
//
// It is bounded as the scan is: /proc/PID/status does not wait for an
// execve, but a diagnostic must not hang a cleanup.
func stuckReport(bound time.Duration) string {
	done := make(chan string, 1)
	go func() { done <- stuckReportNow() }()
	select {
	case s := <-done:
		return s
	case <-time.After(bound):
		return "(the report of what is stuck did not end within " + bound.String() + ") at " + fmt.Sprint(reportAt.Load())
	}
}

// reportAt is the /proc file or step stuckReportNow is at, for the report
// of a report that did not end.
var reportAt atomic.Value

func stuckReportNow() string {
	var out []string
	me := os.Getpid()
	myComm, _ := os.ReadFile("/proc/self/comm")
	pids, _ := filepath.Glob("/proc/[0-9]*")
	for _, pd := range pids {
		reportAt.Store(pd + "/status")
		comm, state, ppid, ok := procStat(pd)
		if !ok || comm != strings.TrimSpace(string(myComm)) {
			continue
		}
		switch {
		case ppid == me && (spawner == nil || filepath.Base(pd) != strconv.Itoa(spawner.pid)):
			out = append(out, fmt.Sprintf("child %s of this process not exec'd yet (state %s)", filepath.Base(pd), state))
		case spawner != nil && ppid == spawner.pid:
			out = append(out, fmt.Sprintf("child %s of the spawner (pid %d) not exec'd yet (state %s)", filepath.Base(pd), ppid, state))
		}
	}
	reportAt.Store("fuse")
	out = append(out, fuseWaiting()...)
	reportAt.Store("stack")
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "handleRequest") && strings.Contains(g, ").Flush(") {
			out = append(out, "a FLUSH being served:\n"+g)
		}
	}
	if len(out) == 0 {
		return "nothing stuck found: no child of this process in its execve, no FUSE request waiting"
	}
	return strings.Join(out, "\n")
}

// procStat returns the command name, state and parent of the process whose
// /proc directory is pd, from its status: reading stat waits, for as long as
// an execve closing its descriptors does (the process's exec lock).
func procStat(pd string) (comm, state string, ppid int, ok bool) {
	b, err := os.ReadFile(filepath.Join(pd, "status"))
	if err != nil {
		return "", "", 0, false
	}
	got := 0
	for _, l := range strings.Split(string(b), "\n") {
		k, v, found := strings.Cut(l, ":\t")
		if !found {
			continue
		}
		switch k {
		case "Name":
			comm, got = v, got+1
		case "State":
			state, got = v, got+1
		case "PPid":
			ppid, err = strconv.Atoi(v)
			if err == nil {
				got++
			}
		}
	}
	return comm, state, ppid, got == 3
}

// fusectlMagic is fusectl's f_type (linux/magic.h FUSE_CTL_SUPER_MAGIC).
const fusectlMagic = 0x65735543

// fuseWaiting lists the FUSE connections with requests their server has not
// answered, each with its mount points (mountinfo's device is 0:N for
// connection N).
func fuseWaiting() []string {
	points := map[string][]string{}
	if f, err := os.Open("/proc/self/mountinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fl := strings.Fields(sc.Text())
			if len(fl) > 4 && strings.HasPrefix(fl[2], "0:") {
				n := strings.TrimPrefix(fl[2], "0:")
				points[n] = append(points[n], fl[4])
			}
		}
		f.Close()
	}
	var out []string
	// fusectl is mounted at boot by systemd, which a CI machine may not
	// run: mounted here otherwise, as fusefs's forced unmount does (that
	// one mounted it for the rest of the run only if it ran first).
	const ctl = "/sys/fs/fuse/connections"
	var st unix.Statfs_t
	if err := unix.Statfs(ctl, &st); err == nil && st.Type != fusectlMagic {
		unix.Mount("fusectl", ctl, "fusectl", 0, "")
	}
	conns, _ := filepath.Glob(ctl + "/*")
	for _, c := range conns {
		b, err := os.ReadFile(filepath.Join(c, "waiting"))
		if w := strings.TrimSpace(string(b)); err == nil && w != "0" {
			n := filepath.Base(c)
			out = append(out, fmt.Sprintf("FUSE connection %s (mounted on %s): %s requests waiting", n, strings.Join(points[n], ", "), w))
		}
	}
	return out
}
