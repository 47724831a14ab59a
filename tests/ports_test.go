package tests

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The tests run in parallel (doc.go) and many restart a server at the address
// it had, so that its clients reconnect. A port on the kernel's ephemeral
// range (ip_local_port_range: listeners on port 0, clients' TCP and UDP
// sockets) could be taken by another test's socket while that server is down,
// and the restart would fail. The servers' ports are therefore handed out
// here, from below that range, each to one server of this run; the first is
// random, so that two runs at once on this machine start far apart, and a
// port is checked free (TCP and UDP) when handed out.
//
// A check only says the port was free a moment ago: the other test binaries
// of a `go test ./...` (and their children) hand out ports from the same range
// on their own, and one of them could check the same port free and take it
// while this run's server is down for a restart (a CI run's restart could not
// listen for 5 s, and a test's listen right after the check failed with
// EADDRINUSE). So a port handed out is also reserved on this machine: an
// exclusive flock(2) on a file named after it (portLockDir), held until the
// process ends, when the kernel drops it; a port another process holds the
// lock of is skipped.

var testPorts struct {
	mu     sync.Mutex
	lo, hi int // [lo, hi)
	next   int
}

// portRange is [10000, the ephemeral range's start), or [10000, 32768)
// if the kernel does not say.
func portRange() (lo, hi int) {
	lo, hi = 10000, 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > lo+1000 {
				hi = n
			}
		}
	}
	return lo, hi
}

// freePort returns a port on 127.0.0.1, free for TCP and UDP a moment ago,
// that no other caller in this run has been given.
func freePort(t testing.TB) int {
	t.Helper()
	return freePortWith(t, portFree)
}

// listenFree is freePort for a server that binds its port once and keeps it
// for the test's life: the sockets the check bound (TCP listener and UDP,
// on 127.0.0.1), handed out instead of closed and bound again. A port
// checked free by binding and closing it can be taken in between even in
// this process: a child that a test of this binary forks at that moment
// holds a copy of the check's listener until its execve closes it, which a
// FUSE FLUSH of another descriptor can hold up (harness_test.go's serveOn),
// and the second bind fails with EADDRINUSE (TestNLMBound's did in CI).
func listenFree(t testing.TB) (net.Listener, net.PacketConn) {
	t.Helper()
	return listenFreeWith(t, nil)
}

// listenFreeWith is listenFree with checked, if not nil, called with the
// check's sockets as soon as they are bound (TestListenFreeChildCopy: a
// fork at that moment).
func listenFreeWith(t testing.TB, checked func(net.Listener, net.PacketConn)) (net.Listener, net.PacketConn) {
	t.Helper()
	var (
		ln net.Listener
		pc net.PacketConn
	)
	freePortWith(t, func(p int) bool {
		var err error
		if ln, pc, err = listenBoth(p); err != nil {
			return false
		}
		if checked != nil {
			checked(ln, pc)
		}
		return true
	})
	return ln, pc
}

// listenBoth binds p on 127.0.0.1 for TCP and UDP.
func listenBoth(p int) (net.Listener, net.PacketConn, error) {
	addr := fmt.Sprintf("127.0.0.1:%d", p)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		ln.Close()
		return nil, nil, err
	}
	return ln, pc, nil
}

// freePortWith is freePort with the check of a port (true: free, and taken
// if the caller keeps what the check bound).
func freePortWith(t testing.TB, check func(int) bool) int {
	t.Helper()
	testPorts.mu.Lock()
	defer testPorts.mu.Unlock()
	if testPorts.hi == 0 {
		testPorts.lo, testPorts.hi = portRange()
		testPorts.next = testPorts.lo + rand.IntN(testPorts.hi-testPorts.lo)
	}
	for range testPorts.hi - testPorts.lo {
		p := testPorts.next
		if testPorts.next++; testPorts.next == testPorts.hi {
			testPorts.next = testPorts.lo
		}
		if reservePort(p, check) {
			return p
		}
	}
	t.Fatalf("no free port in [%d, %d)", testPorts.lo, testPorts.hi)
	return 0
}

// portLocks holds the files of the ports this process reserved: their locks
// last as long as the descriptors.
var portLocks []*os.File

// portLockDir is where the reservations of ports live: one file per port,
// shared by every test binary on this machine.
func portLockDir() string { return filepath.Join(os.TempDir(), "snfs-test-ports") }

// reservePort takes p for this process if no other process on this machine
// holds its lock and check finds it free now (TCP and UDP); the caller holds
// testPorts.mu.
func reservePort(p int, check func(int) bool) bool {
	dir := portLockDir()
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return check(p) // no reservation possible: the check alone, as before
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(p)), os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return check(p)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close() // another process's port
		return false
	}
	if !check(p) {
		f.Close()
		return false
	}
	portLocks = append(portLocks, f)
	return true
}

func portFree(p int) bool {
	ln, pc, err := listenBoth(p)
	if err != nil {
		return false
	}
	ln.Close()
	pc.Close()
	return true
}

// portHolders describes the sockets bound to port p on this machine (any
// address, TCP and UDP, from /proc/net) and the processes holding them (from
// /proc/*/fd): what a failed listen of a restarted server reports, so that
// whatever took its port is named. The scan of /proc/*/fd is given
// portHoldersBound: a readlink there can block for as long as a process on
// this machine is stuck (on an unresponsive FUSE mount, say; ps hangs
// likewise), and a diagnostic must not turn a failed restart into a test
// binary hung until its timeout (a CI run hung 18 minutes in it).
func portHolders(p int) string { return portHoldersWithin(p, portHoldersBound, os.Readlink) }

// portHoldersBound bounds portHolders' scan of the processes' descriptors.
const portHoldersBound = 10 * time.Second

// portHoldersWithin is portHolders with the bound of the descriptor scan and
// its readlink given.
func portHoldersWithin(p int, bound time.Duration, readlink func(string) (string, error)) string {
	tcpStates := map[string]string{"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1",
		"05": "FIN_WAIT2", "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN", "0B": "CLOSING"}
	suffix := fmt.Sprintf(":%04X", p)
	inodes := map[string]string{} // socket inode -> description
	var out []string
	for _, proto := range []string{"tcp", "tcp6", "udp", "udp6"} {
		b, err := os.ReadFile("/proc/net/" + proto)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || !strings.HasSuffix(f[1], suffix) {
				continue
			}
			st := f[3]
			if strings.HasPrefix(proto, "tcp") && tcpStates[st] != "" {
				st = tcpStates[st]
			}
			d := fmt.Sprintf("%s %s -> %s %s inode %s", proto, f[1], f[2], st, f[9])
			out = append(out, d)
			if f[9] != "0" {
				inodes["socket:["+f[9]+"]"] = d
			}
		}
	}
	if len(inodes) > 0 {
		// The scan runs apart: if it blocks, it is left behind (a system
		// call cannot be called off) and what it found so far is reported.
		var (
			mu      sync.Mutex
			holders []string
			done    = make(chan struct{})
		)
		go func() {
			defer close(done)
			// This process first (it cannot be the stuck one, and a
			// server of this test binary that did not let go of its
			// port is the likeliest holder), then the others, one at a
			// time.
			self := strconv.Itoa(os.Getpid())
			pids, _ := filepath.Glob("/proc/[0-9]*")
			pids = append([]string{"/proc/" + self}, pids...)
			for i, pd := range pids {
				pid := filepath.Base(pd)
				if i > 0 && pid == self {
					continue
				}
				fds, _ := filepath.Glob(pd + "/fd/*")
				for _, fd := range fds {
					l, err := readlink(fd)
					if err != nil || inodes[l] == "" {
						continue
					}
					comm, _ := os.ReadFile(pd + "/comm")
					mu.Lock()
					holders = append(holders, fmt.Sprintf("%s held by pid %s (%s)", l, pid, strings.TrimSpace(string(comm))))
					mu.Unlock()
				}
			}
		}()
		t := time.NewTimer(bound)
		select {
		case <-done:
			t.Stop()
		case <-t.C:
			mu.Lock()
			holders = append(holders, fmt.Sprintf("(the scan of /proc/*/fd did not end within %v: a process stuck, or a busy machine)", bound))
			mu.Unlock()
		}
		mu.Lock()
		out = append(out, holders...) // copied: the scan may still add to holders
		mu.Unlock()
	}
	if len(out) == 0 {
		return "no socket on it"
	}
	return strings.Join(out, "; ")
}

// TestPortHolders: a listener and a UDP socket on a port are named, with
// this process as their holder.
func TestPortHolders(t *testing.T) {
	t.Parallel()
	p := freePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", p)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	got := portHolders(p)
	pid := fmt.Sprintf("held by pid %d (", os.Getpid())
	if !strings.Contains(got, "tcp 0100007F:") || !strings.Contains(got, "LISTEN") || !strings.Contains(got, "udp 0100007F:") ||
		strings.Count(got, pid) != 2 {
		t.Errorf("portHolders(%d) = %q", p, got)
	}
}

// TestPortHoldersBounded: a scan of /proc/*/fd that blocks (a readlink held
// up by a stuck process) does not hold portHolders: it returns after its
// bound with the sockets from /proc/net and says the scan did not end.
func TestPortHoldersBounded(t *testing.T) {
	t.Parallel()
	p := freePort(t)
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	stuck := make(chan struct{})
	defer close(stuck)
	blocking := func(string) (string, error) { <-stuck; return "", os.ErrNotExist }
	res := make(chan string, 1)
	go func() { res <- portHoldersWithin(p, 100*time.Millisecond, blocking) }()
	select {
	case got := <-res:
		if !strings.Contains(got, "tcp 0100007F:") || !strings.Contains(got, "LISTEN") || !strings.Contains(got, "did not end within") {
			t.Errorf("portHoldersWithin(%d) with a stuck scan = %q", p, got)
		}
	case <-time.After(time.Minute):
		t.Fatal("portHoldersWithin waited for a stuck scan of /proc/*/fd")
	}
}

// TestFreePortReserved: a port handed out is locked against the other
// processes on this machine (another open file description of its lock file
// cannot take it), and a port whose lock another process holds is skipped.
func TestFreePortReserved(t *testing.T) {
	t.Parallel()
	p := freePort(t)
	f, err := os.OpenFile(filepath.Join(portLockDir(), strconv.Itoa(p)), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
		t.Fatalf("port %d was handed out, and another open of its lock file could lock it", p)
	}

	// The next candidates, locked as another process would: freePort must
	// pass them by.
	testPorts.mu.Lock()
	next, lo, hi := testPorts.next, testPorts.lo, testPorts.hi
	testPorts.mu.Unlock()
	held := map[int]bool{}
	for i := range 3 {
		q := lo + (next-lo+i)%(hi-lo)
		g, err := os.OpenFile(filepath.Join(portLockDir(), strconv.Itoa(q)), os.O_RDWR|os.O_CREATE, 0o666)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		if syscall.Flock(int(g.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			held[q] = true
		}
	}
	if q := freePort(t); held[q] {
		t.Fatalf("freePort handed out %d, whose lock another process holds", q)
	}
}

// TestListenFreeChildCopy: the sockets listenFree hands out are the ones its
// check bound, so a copy of them that a child forked during the check holds
// (here: duplicates of their descriptors, kept until the test ends) does not
// make the server's bind fail with EADDRINUSE, as a check closed and bound
// again did (TestNLMBound in CI).
func TestListenFreeChildCopy(t *testing.T) {
	t.Parallel()
	ln, pc := listenFreeWith(t, func(ln net.Listener, pc net.PacketConn) {
		for _, s := range []syscall.Conn{ln.(*net.TCPListener), pc.(*net.UDPConn)} {
			rc, err := s.SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			var fd int
			if err := rc.Control(func(f uintptr) { fd, err = syscall.Dup(int(f)) }); err != nil {
				t.Fatal(err)
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { syscall.Close(fd) })
		}
	})
	if ln == nil || pc == nil {
		t.Fatal("listenFree handed out no sockets")
	}
	defer ln.Close()
	defer pc.Close()
	if ln.Addr().(*net.TCPAddr).Port != pc.LocalAddr().(*net.UDPAddr).Port {
		t.Fatalf("TCP on %v, UDP on %v: want one port", ln.Addr(), pc.LocalAddr())
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
}
