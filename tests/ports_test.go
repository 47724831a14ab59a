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
	"testing"
)

// The tests run in parallel (doc.go) and many restart a server at the address
// it had, so that its clients reconnect. A port on the kernel's ephemeral
// range (ip_local_port_range: listeners on port 0, clients' TCP and UDP
// sockets) could be taken by another test's socket while that server is down,
// and the restart would fail. The servers' ports are therefore handed out
// here, from below that range, each to one server of this run; the first is
// random, so that two runs at once on this machine start far apart, and a
// port is checked free (TCP and UDP) when handed out.

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
		if portFree(p) {
			return p
		}
	}
	t.Fatalf("no free port in [%d, %d)", testPorts.lo, testPorts.hi)
	return 0
}

func portFree(p int) bool {
	addr := fmt.Sprintf("127.0.0.1:%d", p)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer ln.Close()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	pc.Close()
	return true
}

// portHolders describes the sockets bound to port p on this machine (any
// address, TCP and UDP, from /proc/net) and the processes holding them (from
// /proc/*/fd): what a failed listen of a restarted server reports, so that
// whatever took its port is named.
func portHolders(p int) string {
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
	if fds, _ := filepath.Glob("/proc/[0-9]*/fd/*"); len(inodes) > 0 {
		for _, fd := range fds {
			l, err := os.Readlink(fd)
			if err != nil || inodes[l] == "" {
				continue
			}
			pid := strings.Split(fd, "/")[2]
			comm, _ := os.ReadFile("/proc/" + pid + "/comm")
			out = append(out, fmt.Sprintf("%s held by pid %s (%s)", l, pid, strings.TrimSpace(string(comm))))
		}
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
