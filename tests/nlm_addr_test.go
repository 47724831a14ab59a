package tests

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"snfs/nlm4"
	"snfs/portmap"
	"snfs/sunrpc"
	"snfs/xdr"
)

// getPortCounter counts the GETPORT calls a port mapper served.
type getPortCounter struct{ n atomic.Int64 }

func (c *getPortCounter) ObserveCall(program string, vers uint32, proc string, d time.Duration) {
	if proc == "GETPORT" {
		c.n.Add(1)
	}
}

// grantedServer serves a client's lock manager's GRANTED on a TCP port of its
// own until stop; each GRANTED's lock goes to the channel.
func grantedServer(t *testing.T, granted chan nlm4.Lock) (port int, stop func()) {
	t.Helper()
	s := &sunrpc.Server{Logger: quietLogger()}
	procs := make([]sunrpc.Proc, nlm4.NumProcs)
	procs[nlm4.ProcGranted] = sunrpc.Proc{Name: "GRANTED", Handler: func(ctx context.Context, c *sunrpc.Call, args *xdr.Reader, w *xdr.Writer) error {
		var a nlm4.TestArgs
		if a.Decode(args) != nil {
			return sunrpc.ErrGarbageArgs
		}
		res := nlm4.Res{Cookie: a.Cookie, Stat: nlm4.Granted}
		res.Encode(w)
		granted <- nlm4.Lock{CallerName: a.Lock.CallerName, Offset: a.Lock.Offset}
		return nil
	}}
	s.Register(&sunrpc.Program{Name: "nlm", Number: nlm4.Program, Versions: map[uint32][]sunrpc.Proc{nlm4.Version: procs}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { s.ServeTCP(ln); close(done) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		<-done
	}
	t.Cleanup(stop)
	return ln.Addr().(*net.TCPAddr).Port, stop
}

// TestNLMGrantedAddrKept: the server keeps the address of a client's lock
// manager that its rpcbind gave, so a second GRANTED to the host asks the
// rpcbind no more (one connection per grant); when the client's lock manager
// has moved to another port (the kept one refuses), the server asks the
// rpcbind again and the grant still arrives.
func TestNLMGrantedAddrKept(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	granted := make(chan nlm4.Lock, 4)
	port, stop := grantedServer(t, granted)
	pm := &portmap.Server{}
	pm.Add(portmap.Mapping{Prog: nlm4.Program, Vers: nlm4.Version, Prot: portmap.ProtoTCP, Port: uint32(port)})
	count := &getPortCounter{}
	ps := &sunrpc.Server{Logger: quietLogger(), Observer: count}
	ps.Register(pm.Program())
	e := newNLMEnv(t, &nlmHostSide{pmapPort: serveBoth(t, ps)}, 0)
	fh := e.create(e.nfs, e.root, "f", 0o644)
	a, b := newNLMClient(t, e, "host-a"), newNLMClient(t, e, "host-b")
	waitGrant := func(what string, off uint64) {
		t.Helper()
		select {
		case l := <-granted:
			if l.CallerName != "host-b" || l.Offset != off {
				t.Fatalf("%s: GRANTED %+v, want B's at %d", what, l, off)
			}
		case <-time.After(30 * time.Second): // a failure bound
			t.Fatalf("%s: no GRANTED", what)
		}
	}
	grant := func(what string, off uint64) {
		t.Helper()
		wantNLM(t, what+": A write", a.lock(a.lk(fh, 1, off, 1), true, false, false), nlm4.Granted)
		wantNLM(t, what+": B blocking write", b.lock(b.lk(fh, 1, off, 1), true, true, false), nlm4.Blocked)
		wantNLM(t, what+": A unlocks", a.unlock(a.lk(fh, 1, off, 1)), nlm4.Granted)
		waitGrant(what, off)
	}
	grant("first grant", 0)
	grant("second grant", 1)
	if n := count.n.Load(); n != 1 {
		t.Fatalf("the client's rpcbind was asked %d times for two grants, want once", n)
	}

	// The client's lock manager restarts on another port.
	stop()
	port2, _ := grantedServer(t, granted)
	pm.Add(portmap.Mapping{Prog: nlm4.Program, Vers: nlm4.Version, Prot: portmap.ProtoTCP, Port: uint32(port2)})
	grant("grant after the lock manager moved", 2)
	if n := count.n.Load(); n != 2 {
		t.Fatalf("the client's rpcbind was asked %d times in all, want twice (once more after the move)", n)
	}
}
