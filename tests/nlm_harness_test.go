package tests

import (
	"context"
	"net"
	"testing"
	"time"

	"snfs/nfs3"
	"snfs/nlm4"
	"snfs/nsm"
	"snfs/portmap"
	"snfs/server"
	"snfs/sunrpc"
	"snfs/xdr"
)

// The client host side of NLM for the tests: what a stock NFSv3 client runs
// besides its NFS client - its rpcbind, its lock manager (GRANTED and the _RES
// calls come to it) and its status monitor (SM_NOTIFY comes to it) - on
// 127.0.0.1, with the server pointed at this rpcbind (Config.ClientRPCBindPort).

// nlmHostSide is the test's client host: one rpcbind, one callback server.
type nlmHostSide struct {
	t        *testing.T
	pmapPort int
	granted  chan nlm4.TestArgs // GRANTED calls received
	grantAns chan nlm4.Stat     // the answer to the next GRANTED (Granted if empty)
	results  chan nlmResCall    // _RES calls received
	notified chan nsm.StatChge  // SM_NOTIFY calls received
}

type nlmResCall struct {
	proc uint32
	body []byte
}

func newNLMHostSide(t *testing.T) *nlmHostSide {
	h := &nlmHostSide{t: t, granted: make(chan nlm4.TestArgs, 16), grantAns: make(chan nlm4.Stat, 16),
		results: make(chan nlmResCall, 16), notified: make(chan nsm.StatChge, 16)}
	cb := &sunrpc.Server{Logger: quietLogger()}
	procs := make([]sunrpc.Proc, nlm4.NumProcs)
	procs[nlm4.ProcGranted] = sunrpc.Proc{Name: "GRANTED", Handler: func(ctx context.Context, c *sunrpc.Call, args *xdr.Reader, w *xdr.Writer) error {
		var a nlm4.TestArgs
		if a.Decode(args) != nil {
			return sunrpc.ErrGarbageArgs
		}
		a.Cookie = append([]byte{}, a.Cookie...)
		a.Lock.FH = append(nfs3.FH{}, a.Lock.FH...)
		a.Lock.OH = append([]byte{}, a.Lock.OH...)
		st := nlm4.Granted
		select {
		case st = <-h.grantAns:
		default:
		}
		res := nlm4.Res{Cookie: a.Cookie, Stat: st}
		h.granted <- a
		res.Encode(w)
		return nil
	}}
	for _, p := range []uint32{nlm4.ProcTestRes, nlm4.ProcLockRes, nlm4.ProcCancelRes, nlm4.ProcUnlockRes} {
		procs[p] = sunrpc.Proc{Name: nlm4.ProcNames[p], Handler: func(ctx context.Context, c *sunrpc.Call, args *xdr.Reader, w *xdr.Writer) error {
			h.results <- nlmResCall{p, append([]byte{}, args.Rest()...)}
			return nil
		}}
	}
	cb.Register(&sunrpc.Program{Name: "nlm", Number: nlm4.Program, Versions: map[uint32][]sunrpc.Proc{nlm4.Version: procs}})
	sm := make([]sunrpc.Proc, nsm.NumProcs)
	sm[nsm.ProcNotify] = sunrpc.Proc{Name: "SM_NOTIFY", Handler: func(ctx context.Context, c *sunrpc.Call, args *xdr.Reader, w *xdr.Writer) error {
		var a nsm.StatChge
		if a.Decode(args) != nil {
			return sunrpc.ErrGarbageArgs
		}
		h.notified <- a
		return nil
	}}
	cb.Register(&sunrpc.Program{Name: "nsm", Number: nsm.Program, Versions: map[uint32][]sunrpc.Proc{nsm.Version: sm}})
	cbPort := serveBoth(t, cb)

	pm := &portmap.Server{}
	for _, prog := range []struct{ prog, vers uint32 }{{nlm4.Program, nlm4.Version}, {nsm.Program, nsm.Version}} {
		pm.Add(portmap.Mapping{Prog: prog.prog, Vers: prog.vers, Prot: portmap.ProtoTCP, Port: uint32(cbPort)})
		pm.Add(portmap.Mapping{Prog: prog.prog, Vers: prog.vers, Prot: portmap.ProtoUDP, Port: uint32(cbPort)})
	}
	ps := &sunrpc.Server{Logger: quietLogger()}
	ps.Register(pm.Program())
	h.pmapPort = serveBoth(t, ps)
	return h
}

// serveBoth serves s on 127.0.0.1 over TCP and UDP on one port until the test
// ends: on the sockets that found the port free (listenFree), not bound again.
func serveBoth(t *testing.T, s *sunrpc.Server) int {
	ln, pc := listenFree(t)
	done := make(chan struct{}, 2)
	go func() { s.ServeTCP(ln); done <- struct{}{} }()
	go func() { s.ServeUDP(pc); done <- struct{}{} }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		<-done
		<-done
	})
	return ln.Addr().(*net.TCPAddr).Port
}

// newNLMEnv is newEnv with the server finding its NLM clients' rpcbind at h's.
func newNLMEnv(t *testing.T, h *nlmHostSide, grace time.Duration) *env {
	t.Helper()
	return newEnvWith(t, "rw,no_root_squash", func(c *server.Config) { c.ClientRPCBindPort, c.Grace = h.pmapPort, grace })
}

// nlmClient is one client host's lock manager calling the server, as Linux's
// lockd does: caller_name, and per call an owner (svid, oh).
type nlmClient struct {
	t    *testing.T
	name string
	rpc  *sunrpc.Client
	n    uint32 // cookies
}

func newNLMClient(t *testing.T, e *env, name string) *nlmClient {
	c, err := sunrpc.Dial(ctx, "tcp", e.addr, nlm4.Program, nlm4.Version)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &nlmClient{t: t, name: name, rpc: c}
}

func (c *nlmClient) lk(fh nfs3.FH, svid int32, off, n uint64) nlm4.Lock {
	return nlm4.Lock{CallerName: c.name, FH: fh, OH: []byte(string(rune('0'+svid)) + "@" + c.name), Svid: svid, Offset: off, Len: n}
}

func (c *nlmClient) cookie() []byte { c.n++; return []byte{byte(c.n >> 8), byte(c.n)} }

func (c *nlmClient) call(proc uint32, args xdr.Encoder, res xdr.Decoder) {
	c.t.Helper()
	if err := c.rpc.Call(ctx, proc, args, res); err != nil {
		c.t.Fatalf("%s %s: %v", c.name, nlm4.ProcNames[proc], err)
	}
}

func (c *nlmClient) lock(l nlm4.Lock, excl, block, reclaim bool) nlm4.Stat {
	c.t.Helper()
	var res nlm4.Res
	c.call(nlm4.ProcLock, &nlm4.LockArgs{Cookie: c.cookie(), Block: block, Exclusive: excl, Lock: l, Reclaim: reclaim, State: 3}, &res)
	return res.Stat
}

func (c *nlmClient) test(l nlm4.Lock, excl bool) nlm4.TestRes {
	c.t.Helper()
	var res nlm4.TestRes
	c.call(nlm4.ProcTest, &nlm4.TestArgs{Cookie: c.cookie(), Exclusive: excl, Lock: l}, &res)
	return res
}

func (c *nlmClient) unlock(l nlm4.Lock) nlm4.Stat {
	c.t.Helper()
	var res nlm4.Res
	c.call(nlm4.ProcUnlock, &nlm4.UnlockArgs{Cookie: c.cookie(), Lock: l}, &res)
	return res.Stat
}

func (c *nlmClient) cancel(l nlm4.Lock, excl bool) nlm4.Stat {
	c.t.Helper()
	var res nlm4.Res
	c.call(nlm4.ProcCancel, &nlm4.CancArgs{Cookie: c.cookie(), Block: true, Exclusive: excl, Lock: l}, &res)
	return res.Stat
}

func wantNLM(t *testing.T, what string, got, want nlm4.Stat) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: %v, want %v", what, got, want)
	}
}

func (h *nlmHostSide) waitGranted(what string) nlm4.TestArgs {
	h.t.Helper()
	select {
	case g := <-h.granted:
		return g
	case <-time.After(30 * time.Second): // a failure bound, not a speed assertion
		h.t.Fatalf("%s: no GRANTED call", what)
	}
	panic("unreachable")
}

func (h *nlmHostSide) noGranted(what string, wait time.Duration) {
	h.t.Helper()
	select {
	case g := <-h.granted:
		h.t.Fatalf("%s: unexpected GRANTED %+v", what, g)
	case <-time.After(wait):
	}
}

// sunrpcDialNSM calls the server's status monitor over UDP, as a client's
// rpc.statd (sm-notify) does.
func sunrpcDialNSM(e *env) (*sunrpc.Client, error) {
	return sunrpc.Dial(ctx, "udp", e.addr, nsm.Program, nsm.Version)
}
