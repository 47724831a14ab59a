package tests

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"snfs/server"
)

// The way back into the Linux guest, for the server's NLM GRANTED callbacks
// and its SM_NOTIFY after a restart. slirp, the guest's only network, turns
// the guest's connections into connections from 127.0.0.1 on this machine,
// and nothing reaches the guest unless slirp redirects a port of this machine
// into it. slirp reads such redirections (`redir [tcp|udp] PORT GUESTPORT`)
// from $HOME/.slirprc when it starts, so the test runs run.sh with HOME at a
// folder holding one. Three free ports of this machine are redirected, over
// TCP and UDP: one to the guest's rpcbind (111), one to its lockd and one to
// its rpc.statd, whose ports the guest fixes to the same numbers
// (fs/nfs/nlm_tcpport and nlm_udpport before lockd starts, rpc.statd -p;
// nlm-setup.sh reads them from the file guest-ports in the export). The
// server asks the rpcbind at its caller's address (127.0.0.1) for the
// client's lock manager and status monitor; pointed at the redirected port
// (Config.ClientRPCBindPort), it asks the guest's own rpcbind, which names
// the guest's lockd and statd ports, which are the redirected ports here.
type guestCallbacks struct {
	home                  string // HOME for run.sh: .slirprc
	rpcbind, lockd, statd int
}

func newGuestCallbacks(t *testing.T) *guestCallbacks {
	t.Helper()
	g := &guestCallbacks{home: diskTempDir(t, "snfs-guesthome-")}
	ports := freePorts(t, 3)
	g.rpcbind, g.lockd, g.statd = ports[0], ports[1], ports[2]
	// slirp presents a redirected connection from 127.0.0.1 as coming from
	// "the host's address", by default the address of this machine's name,
	// which here may be 127.0.0.1 too: the guest drops that (a loopback
	// source on eth0). Set to 10.0.2.2, the calls come from the server's
	// address as the guest knows it, which is also where lockd expects a
	// GRANTED from.
	rc := bytes.NewBufferString("host addr 10.0.2.2\n")
	for _, r := range [][2]int{{g.rpcbind, 111}, {g.lockd, g.lockd}, {g.statd, g.statd}} {
		fmt.Fprintf(rc, "redir tcp %d %d\nredir udp %d %d\n", r[0], r[1], r[0], r[1])
	}
	if err := os.WriteFile(filepath.Join(g.home, ".slirprc"), rc.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return g
}

// freePorts finds n distinct ports free on every address over both TCP and
// UDP, for slirp's redirections (it binds them on every address): handed
// out and reserved as freePort's (ports_test.go), so that no other server
// of this run or of another test binary is given one of them, and checked
// on 0.0.0.0.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for len(ports) < n {
		ports = append(ports, freePortWith(t, func(p int) bool {
			ln, err := net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", p))
			if err != nil {
				return false
			}
			pc, err := net.ListenPacket("udp4", fmt.Sprintf("0.0.0.0:%d", p))
			ln.Close()
			if err != nil {
				return false
			}
			pc.Close()
			return true
		}))
	}
	return ports
}

// newGuestLockEnv is newEnv (rw,no_root_squash) with the server finding its
// NLM clients' rpcbind at g's redirection into the guest, and the given grace
// bound.
func newGuestLockEnv(t *testing.T, g *guestCallbacks, grace time.Duration) *env {
	t.Helper()
	e := newEnvWith(t, "rw,no_root_squash", func(c *server.Config) { c.ClientRPCBindPort, c.Grace = g.rpcbind, grace })
	if err := os.WriteFile(e.path("guest-ports"), fmt.Appendf(nil, "%d %d\n", g.lockd, g.statd), 0o644); err != nil {
		t.Fatal(err)
	}
	return e
}

// requireGuestLockTools skips (fails in CI) unless the host programs the
// guest's lock scripts run are installed.
func requireGuestLockTools(t *testing.T, extra ...string) {
	t.Helper()
	for _, tool := range append([]string{"rpcbind", "rpc.statd", "mount.nfs", "python3"}, extra...) {
		if _, err := exec.LookPath(tool); err != nil {
			requireInCI(t, tool+" is not installed (.ci/run installs rpcbind, nfs-common, python3 and sqlite3)")
		}
	}
}

// guestLockRun starts tests/guest/SCRIPT in the guest (--host-root) after
// tests/guest/nlm-setup.sh (the guest's rpcbind, lockd and statd on g's
// ports, the export mounted again with locks at $M, the working directory);
// the transcript arrives on the channel when the guest ends.
func guestLockRun(t *testing.T, e *env, g *guestCallbacks, script string) chan []byte {
	t.Helper()
	run := guestRunner(t)
	setup, err := os.ReadFile(filepath.Join("guest", "nlm-setup.sh"))
	if err != nil {
		t.Fatal(err)
	}
	body, err := os.ReadFile(filepath.Join("guest", script))
	if err != nil {
		t.Fatal(err)
	}
	full := filepath.Join(t.TempDir(), script)
	if err := os.WriteFile(full, append(setup, body...), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := command(run, "--host-root", "--mem", "512M", "--timeout", "500",
		"--port", fmt.Sprint(e.port()), "--mountport", fmt.Sprint(e.port()), "--export", e.dir, full)
	cmd.Env = append(os.Environ(), "HOME="+g.home)
	// Its own process group: a failed test ends the guest by its process
	// groups (killGuest).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var tr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &tr, &tr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out, done := make(chan []byte, 1), make(chan struct{})
	go func() {
		defer close(done)
		if err := cmd.Wait(); err != nil {
			fmt.Fprintf(&tr, "\nrun.sh: %v", err)
		}
		out <- tr.Bytes()
	}()
	t.Cleanup(func() {
		if t.Failed() {
			killGuest(cmd.Process.Pid)
		}
		select {
		case <-done:
		case <-time.After(time.Minute): // a failure bound: the guest ends with its script
			killGuest(cmd.Process.Pid)
			<-done
		}
		if t.Failed() {
			t.Logf("guest transcript:\n%s", tr.Bytes())
		}
	})
	return out
}

// killGuest ends run.sh (pid, a process group leader) and everything under
// it: timeout(1) and linux.uml each make a process group of their own, so the
// groups of every descendant are killed, by their ids.
func killGuest(pid int) {
	groups := map[int]bool{pid: true}
	var walk func(p int)
	walk = func(p int) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", p, p))
		for _, f := range strings.Fields(string(b)) {
			c, err := strconv.Atoi(f)
			if err != nil {
				continue
			}
			if g, err := syscall.Getpgid(c); err == nil {
				groups[g] = true
			}
			walk(c)
		}
	}
	walk(pid)
	delete(groups, syscall.Getpgrp())
	for g := range groups {
		syscall.Kill(-g, syscall.SIGKILL)
	}
}

// guestWaitFile waits for a signal file from the guest in the export,
// failing the test if the guest ends first (its transcript) or after a
// failure bound.
func guestWaitFile(t *testing.T, e *env, out chan []byte, name string) {
	t.Helper()
	deadline := time.Now().Add(240 * time.Second) // a failure bound
	for {
		if _, err := os.Stat(e.path(name)); err == nil {
			return
		}
		select {
		case tr := <-out:
			out <- tr
			t.Fatalf("the guest ended before %s:\n%s", name, tr)
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s from the guest", name)
		}
	}
}

// guestDone waits for the guest's transcript and checks that its script
// passed.
func guestDone(t *testing.T, out chan []byte) []byte {
	t.Helper()
	var tr []byte
	select {
	case tr = <-out:
	case <-time.After(500 * time.Second): // a failure bound
		t.Fatal("the guest did not finish")
	}
	if !bytes.Contains(tr, []byte("script status: 0")) || !bytes.Contains(tr, []byte("all checks passed")) {
		t.Fatalf("guest failed:\n%s", tr)
	}
	return tr
}
