package tests

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"snfs/nlm4"
	"snfs/nsm"
	"snfs/portmap"
	"snfs/sunrpc"
)

// hostRPCBind makes the server's NLM and NSM findable through an rpcbind on
// 127.0.0.1:111, where the guest's lockd asks (slirp turns 10.0.2.2:111 into
// it): a stand-in port mapper for the test if the port is free, else the
// system's rpcbind, with the mappings removed when the test ends.
func hostRPCBind(t *testing.T, port int) {
	maps := []portmap.Mapping{}
	for _, p := range []struct{ prog, vers uint32 }{{nlm4.Program, nlm4.Version}, {nsm.Program, nsm.Version}} {
		maps = append(maps, portmap.Mapping{Prog: p.prog, Vers: p.vers, Prot: portmap.ProtoTCP, Port: uint32(port)},
			portmap.Mapping{Prog: p.prog, Vers: p.vers, Prot: portmap.ProtoUDP, Port: uint32(port)})
	}
	ln, err := net.Listen("tcp", "127.0.0.1:111")
	if err == nil {
		pc, err := net.ListenPacket("udp", "127.0.0.1:111")
		if err != nil {
			ln.Close()
			t.Fatal(err)
		}
		pm := &portmap.Server{}
		for _, m := range maps {
			pm.Add(m)
		}
		s := &sunrpc.Server{Logger: quietLogger()}
		s.Register(pm.Program())
		done := make(chan struct{}, 2)
		go func() { s.ServeTCP(ln); done <- struct{}{} }()
		go func() { s.ServeUDP(pc); done <- struct{}{} }()
		t.Cleanup(func() {
			s.Shutdown(ctx)
			<-done
			<-done
		})
		return
	}
	c, derr := sunrpc.Dial(ctx, "tcp", "127.0.0.1:111", portmap.Program, portmap.Version)
	if derr != nil {
		t.Fatalf("port 111 is taken (%v) but no rpcbind answers there: %v", err, derr)
	}
	t.Cleanup(func() {
		for _, m := range maps {
			portmap.Unset(ctx, c, m.Prog, m.Vers)
		}
		c.Close()
	})
	for _, m := range maps {
		portmap.Unset(ctx, c, m.Prog, m.Vers)
	}
	for _, m := range maps {
		if ok, err := portmap.Set(ctx, c, m); err != nil || !ok {
			t.Fatalf("the system rpcbind refused %+v: %v", m, err)
		}
	}
}

// TestLinuxClientNLM: the stock Linux kernel client, mounted with locks (no
// nolock), against a Go NLM client and a local process on the server:
// flock and fcntl locks exclude each other both ways, and a blocked flock in
// the guest is granted when the Go client unlocks (by the guest's own 30 s
// poll: the server cannot call the guest back through slirp).
func TestLinuxClientNLM(t *testing.T) {
	requireRoot(t)
	run := guestRunner(t)
	// The guest runs this machine's rpcbind, rpc.statd, mount.nfs and python3
	// (--host-root).
	for _, tool := range []string{"rpcbind", "rpc.statd", "mount.nfs", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			requireInCI(t, tool+" is not installed (.ci/run installs rpcbind, nfs-common and python3)")
		}
	}
	e := newEnv(t, "rw,no_root_squash")
	hostRPCBind(t, e.port())
	for _, f := range []string{"held.lock", "local.lock", "guest.lock", "guest-range.lock", "wait.lock"} {
		if err := os.WriteFile(e.path(f), make([]byte, 200), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	a, b := newNLMClient(t, e, "host-a"), newNLMClient(t, e, "host-b")
	held, wait := e.lookup(e.root, "held.lock"), e.lookup(e.root, "wait.lock")
	wantNLM(t, "A write held.lock [0,100)", a.lock(a.lk(held, 1, 0, 100), true, false, false), nlm4.Granted)
	wantNLM(t, "A write wait.lock", a.lock(a.lk(wait, 1, 0, 0), true, false, false), nlm4.Granted)
	if _, err := localLock(t, e.path("local.lock"), unix.F_WRLCK, 0, 0); err != nil {
		t.Fatal(err)
	}

	abs, _ := filepath.Abs("guest/nlm.sh")
	out := make(chan []byte, 1)
	cmd := exec.Command(run, "--host-root", "--mem", "512M", "--timeout", "300",
		"--port", fmt.Sprint(e.port()), "--mountport", fmt.Sprint(e.port()), "--export", e.dir, abs)
	go func() {
		o, err := cmd.CombinedOutput()
		if err != nil {
			o = append(o, []byte("\nrun.sh: "+err.Error())...)
		}
		out <- o
	}()
	var transcript []byte
	waitFile := func(name string) {
		t.Helper()
		deadline := time.Now().Add(240 * time.Second) // a failure bound
		for {
			if _, err := os.Stat(e.path(name)); err == nil {
				return
			}
			select {
			case transcript = <-out:
				t.Fatalf("the guest ended before %s:\n%s", name, transcript)
			case <-time.After(100 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s from the guest", name)
			}
		}
	}

	waitFile("guest.ready")
	gl, gr := e.lookup(e.root, "guest.lock"), e.lookup(e.root, "guest-range.lock")
	wantNLM(t, "B write guest.lock under the guest's flock", b.lock(b.lk(gl, 1, 0, 1), true, false, false), nlm4.Denied)
	if tr := b.test(b.lk(gl, 1, 0, 0), false); tr.Stat != nlm4.Denied || !tr.Holder.Exclusive {
		t.Fatalf("B TEST guest.lock: %+v, want the guest's whole-file write lock", tr)
	}
	wantNLM(t, "B write guest-range.lock [15,16)", b.lock(b.lk(gr, 1, 15, 1), true, false, false), nlm4.Denied)
	wantNLM(t, "B write guest-range.lock [25,26)", b.lock(b.lk(gr, 1, 25, 1), true, false, false), nlm4.Granted)
	for _, l := range []struct {
		f          string
		start, len int64
	}{{"guest.lock", 0, 0}, {"guest-range.lock", 12, 1}} {
		if _, err := localLock(t, e.path(l.f), unix.F_WRLCK, l.start, l.len); !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EACCES) {
			t.Fatalf("a local process's lock of %s [%d,+%d) under the guest's: %v, want EAGAIN", l.f, l.start, l.len, err)
		}
	}
	if err := os.WriteFile(e.path("release"), nil, 0o666); err != nil {
		t.Fatal(err)
	}

	waitFile("waiting")
	time.Sleep(2 * time.Second) // let the guest's LOCK queue behind A's
	wantNLM(t, "A unlocks wait.lock", a.unlock(a.lk(wait, 1, 0, 0)), nlm4.Granted)
	select {
	case transcript = <-out:
	case <-time.After(300 * time.Second):
		t.Fatal("the guest did not finish")
	}
	t.Logf("guest transcript:\n%s", transcript)
	if !bytes.Contains(transcript, []byte("script status: 0")) || !bytes.Contains(transcript, []byte("all checks passed")) {
		t.Fatalf("guest failed:\n%s", transcript)
	}
	if _, err := os.Stat(e.path("wait.got")); err != nil {
		t.Fatalf("the guest's blocked flock did not run: %v", err)
	}
}
