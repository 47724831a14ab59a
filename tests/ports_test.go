package tests

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
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
