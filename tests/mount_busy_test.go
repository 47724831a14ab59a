package tests

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// A test's unmount failed now and then with "busy, or not idle within 10s"
// although the test had closed everything: go-fuse's unmount retries EBUSY
// for about 150 ms only, then fusefs.Unmount detaches and aborts. busyHolders
// says who keeps a mount busy, so that the cause is named when it happens.

// mountBusy reports whether dir's mount is in use, without unmounting it:
// umount2(MNT_EXPIRE) fails with EBUSY on a mount in use; on one not in use
// it only marks it expired (EAGAIN; any use clears the mark), or unmounts it
// if it was marked already (nil), so it is called until it says not busy once.
func mountBusy(dir string) bool {
	return errors.Is(syscall.Unmount(dir, syscall.MNT_EXPIRE), syscall.EBUSY)
}

// busyHolders describes what uses the mount on dir: the processes with a
// descriptor, working directory, root or mapping under it, and the
// goroutines of this process serving a FUSE request of srv (a request the
// kernel still waits for keeps the mount in use too).
func busyHolders(dir string, srv *fuse.Server) string {
	var out []string
	under := func(p string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
	pids, _ := filepath.Glob("/proc/[0-9]*")
	for _, pd := range pids {
		var what []string
		for _, l := range []string{"cwd", "root"} {
			if p, err := os.Readlink(filepath.Join(pd, l)); err == nil && under(p) {
				what = append(what, l+" "+p)
			}
		}
		fds, _ := filepath.Glob(filepath.Join(pd, "fd", "*"))
		for _, fd := range fds {
			if p, err := os.Readlink(fd); err == nil && under(p) {
				what = append(what, "fd "+filepath.Base(fd)+" "+p)
			}
		}
		if b, err := os.ReadFile(filepath.Join(pd, "maps")); err == nil && bytes.Contains(b, []byte(dir)) {
			what = append(what, "a mapping")
		}
		if len(what) > 0 {
			comm, _ := os.ReadFile(filepath.Join(pd, "comm"))
			cmd, _ := os.ReadFile(filepath.Join(pd, "cmdline"))
			out = append(out, fmt.Sprintf("pid %s (%s, %q): %s", filepath.Base(pd), strings.TrimSpace(string(comm)),
				strings.ReplaceAll(string(cmd), "\x00", " "), strings.Join(what, ", ")))
		}
	}
	if srv != nil {
		buf := make([]byte, 1<<22)
		buf = buf[:runtime.Stack(buf, true)]
		me := fmt.Sprintf("(%p", srv)
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "handleRequest") && strings.Contains(g, me) {
				out = append(out, "a request being served:\n"+g)
			}
		}
	}
	if len(out) == 0 {
		return "no process holds anything under it and no request of it is being served (a path lookup in progress, or a fork's copy of a descriptor?)"
	}
	return strings.Join(out, "\n")
}

// busyReport is busyHolders if the mount on dir is in use now, else "".
// The harness calls it just before unmounting and adds it to an unmount's
// failure.
func busyReport(dir string, srv *fuse.Server) string {
	if !mountBusy(dir) {
		return ""
	}
	return busyHolders(dir, srv)
}
