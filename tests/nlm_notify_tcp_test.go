package tests

import (
	"context"
	"net"
	"testing"
	"time"

	"snfs/nlm4"
	"snfs/nsm"
	"snfs/portmap"
	"snfs/sunrpc"
	"snfs/xdr"
)

// TestNLMNotifyOverTCP: a client host whose status monitor can be reached
// only over TCP (its rpcbind lists NSM over TCP alone, as for a host behind
// something that passes only connections, like slirp's redirections into the
// Linux guest) still gets the server's SM_NOTIFY after a restart: the server
// tries UDP, then TCP.
func TestNLMNotifyOverTCP(t *testing.T) {
	// Serial (no t.Parallel): the Linux guest.
	requireRoot(t)
	notified := make(chan nsm.StatChge, 4)
	sm := &sunrpc.Server{Logger: quietLogger()}
	procs := make([]sunrpc.Proc, nsm.NumProcs)
	procs[nsm.ProcNotify] = sunrpc.Proc{Name: "SM_NOTIFY", Handler: func(ctx context.Context, c *sunrpc.Call, args *xdr.Reader, w *xdr.Writer) error {
		var a nsm.StatChge
		if a.Decode(args) != nil {
			return sunrpc.ErrGarbageArgs
		}
		notified <- a
		return nil
	}}
	sm.Register(&sunrpc.Program{Name: "nsm", Number: nsm.Program, Versions: map[uint32][]sunrpc.Proc{nsm.Version: procs}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { sm.ServeTCP(ln); close(done) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		sm.Shutdown(ctx)
		<-done
	})
	pm := &portmap.Server{}
	pm.Add(portmap.Mapping{Prog: nsm.Program, Vers: nsm.Version, Prot: portmap.ProtoTCP, Port: uint32(ln.Addr().(*net.TCPAddr).Port)})
	ps := &sunrpc.Server{Logger: quietLogger()}
	ps.Register(pm.Program())
	e := newNLMEnv(t, &nlmHostSide{pmapPort: serveBoth(t, ps)}, 3*time.Second)
	fh := e.create(e.nfs, e.root, "f", 0o644)
	a := newNLMClient(t, e, "host-a")
	wantNLM(t, "A write [0,10)", a.lock(a.lk(fh, 1, 0, 10), true, false, false), nlm4.Granted)

	e.restart()
	select {
	case n := <-notified:
		if n.State != 5 {
			t.Fatalf("SM_NOTIFY %+v, want state 5", n)
		}
	case <-time.After(30 * time.Second): // a failure bound
		t.Fatal("no SM_NOTIFY over TCP after the restart")
	}
}
