package client_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"snfs/state"
	"sync"
	"testing"
	"time"

	"snfs/mount3"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/sunrpc"
	"snfs/xdr"
)

// testPeer is a stand-in for the server half of the snfs protocol, written
// for these tests only, because the real one (package server) is not on main
// yet. It is a protocol peer, not a server: a sunrpc.Server on 127.0.0.1
// serving the SNFS program with just enough behaviour to drive the client
// library (REGISTER by name and verifier, OPEN answering JUKEBOX or a chosen
// status on demand, a READ open calling the file's writer back before it
// answers), plus NULL of NFSv3 and MOUNT to see which connection calls come on.
// It keeps no opens and checks no permissions.
type testPeer struct {
	t    *testing.T
	srv  *sunrpc.Server
	addr string

	mu        sync.Mutex
	verf      snfs1.Verifier                  // the server verifier; guarded by mu
	names     map[string]peerClient           // registrations by name; guarded by mu
	lastID    snfs1.ClientID                  // guarded by mu
	conns     map[snfs1.ClientID]*sunrpc.Conn // callback paths; guarded by mu
	registers []peerRegister                  // every REGISTER; guarded by mu
	opens     []peerOpen                      // every OPEN, OPEN_NAME and CLOSE; guarded by mu
	nulls     []uint64                        // connections of NFS and MOUNT NULLs; guarded by mu
	jukebox   int                             // OPENs still to answer JUKEBOX; guarded by mu
	status    map[string]snfs1.Status         // fh -> status every call on it gets; guarded by mu
	writer    map[string]snfs1.ClientID       // fh -> its WRITE opener; guarded by mu
	cbAnswers []state.Outcome                 // answers to the callbacks OPENs sent; guarded by mu
	reclaims  []peerReclaim                   // every RECLAIM, RECLAIM_DONE, UNREGISTER; guarded by mu
	noGrace   bool                            // answer RECLAIM and RECLAIM_DONE with NOGRACE; guarded by mu
	dropAt    int                             // close the connection instead of answering the dropAt'th RECLAIM (1-based; 0: never); guarded by mu
	// As the server does, every REGISTER is followed by a probe (CB_NULL)
	// of the connection it came on; probeHold, if set before, holds each
	// probe until it is closed. probes: for each probe's answer, the count
	// of opens seen when it was read (guarded by mu).
	probeHold chan struct{}
	probes    []int
	probing   sync.WaitGroup
	stop      chan struct{} // closed at the test's end: held probes go
}

type peerReclaim struct {
	proc   string
	client snfs1.ClientID
	conn   uint64
	items  []snfs1.ReclaimItem
	opens  int // OPENs, OPEN_NAMEs and CLOSEs seen before it
	status snfs1.Status
	lock   *snfs1.LockArgs // a LOCK's arguments
}

type peerClient struct {
	id   snfs1.ClientID
	verf snfs1.Verifier
}

type peerRegister struct {
	name string
	verf snfs1.Verifier
	conn uint64
	id   snfs1.ClientID
}

type peerOpen struct {
	proc   string
	xid    uint32
	client snfs1.ClientID
	mode   state.Mode
	dirty  bool
	status snfs1.Status
}

var peerAttr = &nfs3.Fattr{Type: nfs3.TypeReg, Mode: 0o644, Size: 42, FileID: 7}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newTestPeer(t *testing.T) *testPeer {
	t.Helper()
	p := &testPeer{t: t, srv: &sunrpc.Server{Logger: quiet()}, verf: snfs1.Verifier{'b', 'o', 'o', 't', 1},
		names: map[string]peerClient{}, conns: map[snfs1.ClientID]*sunrpc.Conn{},
		status: map[string]snfs1.Status{}, writer: map[string]snfs1.ClientID{}, stop: make(chan struct{})}
	null := func(_ context.Context, call *sunrpc.Call, _ *xdr.Reader, _ *xdr.Writer) error {
		p.mu.Lock()
		p.nulls = append(p.nulls, call.Conn.ID())
		p.mu.Unlock()
		return nil
	}
	p.srv.Register(&sunrpc.Program{Name: "SNFS", Number: snfs1.Program, Versions: map[uint32][]sunrpc.Proc{snfs1.Version: {
		snfs1.ProcNull:     {Name: "NULL", Handler: null},
		snfs1.ProcRegister: {Name: "REGISTER", Handler: p.register},
		snfs1.ProcOpen:     {Name: "OPEN", Handler: p.open},
		snfs1.ProcOpenName: {Name: "OPEN_NAME", Handler: p.openName},
		snfs1.ProcClose:    {Name: "CLOSE", Handler: p.close},
		snfs1.ProcReclaim: {Name: "RECLAIM", Handler: func(_ context.Context, call *sunrpc.Call, args *xdr.Reader, res *xdr.Writer) error {
			var a snfs1.ReclaimArgs
			if err := a.Decode(args); err != nil {
				return sunrpc.ErrGarbageArgs
			}
			items := make([]snfs1.ReclaimItem, len(a.Items))
			for i, it := range a.Items {
				it.File = append(nfs3.FH(nil), it.File...)
				items[i] = it
			}
			return p.reclaimCall(call, "RECLAIM", a.Client, items, res)
		}},
		snfs1.ProcReclaimDone: {Name: "RECLAIM_DONE", Handler: func(_ context.Context, call *sunrpc.Call, args *xdr.Reader, res *xdr.Writer) error {
			var a snfs1.ClientArgs
			if err := a.Decode(args); err != nil {
				return sunrpc.ErrGarbageArgs
			}
			return p.reclaimCall(call, "RECLAIM_DONE", a.Client, nil, res)
		}},
		snfs1.ProcLock: {Name: "LOCK", Handler: func(_ context.Context, call *sunrpc.Call, args *xdr.Reader, res *xdr.Writer) error {
			var a snfs1.LockArgs
			if err := a.Decode(args); err != nil {
				return sunrpc.ErrGarbageArgs
			}
			a.File = append(nfs3.FH(nil), a.File...)
			p.mu.Lock()
			defer p.mu.Unlock()
			r := peerReclaim{proc: "LOCK", client: a.Client, conn: call.Conn.ID(), opens: len(p.opens), lock: &a}
			if p.noGrace && a.Reclaim {
				r.status = snfs1.ErrNoGrace
			}
			p.reclaims = append(p.reclaims, r)
			(&snfs1.LockRes{Status: r.status, Stat: snfs1.LockGranted}).Encode(res)
			return nil
		}},
		snfs1.ProcUnregister: {Name: "UNREGISTER", Handler: func(_ context.Context, call *sunrpc.Call, args *xdr.Reader, res *xdr.Writer) error {
			var a snfs1.ClientArgs
			if err := a.Decode(args); err != nil {
				return sunrpc.ErrGarbageArgs
			}
			return p.reclaimCall(call, "UNREGISTER", a.Client, nil, res)
		}},
	}}})
	p.srv.Register(&sunrpc.Program{Name: "NFS", Number: nfs3.Program, Versions: map[uint32][]sunrpc.Proc{nfs3.Version: {{Name: "NULL", Handler: null}}}})
	p.srv.Register(&sunrpc.Program{Name: "MOUNT", Number: mount3.Program, Versions: map[uint32][]sunrpc.Proc{mount3.Version: {{Name: "NULL", Handler: null}}}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.srv.ServeTCP(ln)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		close(p.stop)
		p.srv.Shutdown(ctx)
		<-done
		p.probing.Wait()
	})
	return p
}

// probe sends CB_NULL on conn (after probeHold, if set) and records, as the
// server applies a probe's answer, how many opens came before it.
func (p *testPeer) probe(conn *sunrpc.Conn, hold chan struct{}) {
	defer p.probing.Done()
	if hold != nil {
		select {
		case <-hold:
		case <-p.stop:
			return
		case <-conn.Done():
			return
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-p.stop:
		case <-conn.Done():
		case <-ctx.Done():
		}
		cancel()
	}()
	conn.CallRouted(ctx, snfs1.CBProgram, snfs1.CBVersion, snfs1.CBProcNull, sunrpc.OpaqueAuth{}, nil, nil, func(err error) {
		if err == nil {
			p.mu.Lock()
			p.probes = append(p.probes, len(p.opens))
			p.mu.Unlock()
		}
	})
}

func (p *testPeer) register(_ context.Context, call *sunrpc.Call, args *xdr.Reader, res *xdr.Writer) error {
	var a snfs1.RegisterArgs
	if err := a.Decode(args); err != nil {
		return sunrpc.ErrGarbageArgs
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.names[string(a.Name)]
	if !ok || c.verf != a.ClientVerf {
		if ok {
			delete(p.conns, c.id)
		}
		p.lastID++
		c = peerClient{id: p.lastID, verf: a.ClientVerf}
		p.names[string(a.Name)] = c
	}
	p.conns[c.id] = call.Conn
	p.registers = append(p.registers, peerRegister{name: string(a.Name), verf: a.ClientVerf, conn: call.Conn.ID(), id: c.id})
	(&snfs1.RegisterRes{Client: c.id, ServerVerf: p.verf, CallbackTimeoutMs: 5000}).Encode(res)
	p.probing.Add(1)
	go p.probe(call.Conn, p.probeHold)
	return nil
}

// check answers the status a call of client id on fh gets before its own
// work: STALE_CLIENTID, a status set for fh, or JUKEBOX (for OPENs).
func (p *testPeer) check(call *sunrpc.Call, id snfs1.ClientID, fh nfs3.FH, open bool) snfs1.Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.conns[id]; !ok {
		return snfs1.ErrStaleClientID
	}
	if st, ok := p.status[string(fh)]; ok {
		return st
	}
	if open && p.jukebox > 0 {
		p.jukebox--
		call.NoCache = true
		return nfs3.ErrJukebox
	}
	return nfs3.OK
}

// openFile does an OPEN's work: a READ open of a file another client opened
// for writing calls that client back (WRITEBACK) and waits for its answer.
func (p *testPeer) openFile(ctx context.Context, id snfs1.ClientID, fh nfs3.FH, mode state.Mode) {
	p.mu.Lock()
	w, ok := p.writer[string(fh)]
	if mode == state.Write {
		p.writer[string(fh)] = id
	}
	conn := p.conns[w]
	p.mu.Unlock()
	if mode != state.Read || !ok || w == id || conn == nil {
		return
	}
	var res snfs1.CallbackRes
	err := conn.Call(ctx, snfs1.CBProgram, snfs1.CBVersion, snfs1.CBProcCallback, sunrpc.OpaqueAuth{},
		&snfs1.CallbackArgs{File: fh, Mode: state.Writeback, Attr: peerAttr}, &res)
	if err != nil {
		p.t.Errorf("peer: callback to client %d: %v", w, err)
		return
	}
	p.mu.Lock()
	p.cbAnswers = append(p.cbAnswers, res.Status)
	delete(p.writer, string(fh))
	p.mu.Unlock()
}

func (p *testPeer) record(o peerOpen) {
	p.mu.Lock()
	p.opens = append(p.opens, o)
	p.mu.Unlock()
}

func (p *testPeer) open(ctx context.Context, call *sunrpc.Call, args *xdr.Reader, res *xdr.Writer) error {
	var a snfs1.OpenArgs
	if err := a.Decode(args); err != nil {
		return sunrpc.ErrGarbageArgs
	}
	fh := append(nfs3.FH(nil), a.File...)
	r := snfs1.OpenRes{Status: p.check(call, a.Client, fh, true)}
	if r.Status == nfs3.OK {
		p.openFile(ctx, a.Client, fh, a.Mode)
		r.OpenOK = snfs1.OpenOK{CacheVersion: 9, OldCacheVersion: 8, CacheEnabled: true, Attr: peerAttr}
	}
	p.record(peerOpen{proc: "OPEN", xid: call.XID, client: a.Client, mode: a.Mode, status: r.Status})
	r.Encode(res)
	return nil
}

func (p *testPeer) openName(ctx context.Context, call *sunrpc.Call, args *xdr.Reader, res *xdr.Writer) error {
	var a snfs1.OpenNameArgs
	if err := a.Decode(args); err != nil {
		return sunrpc.ErrGarbageArgs
	}
	fh := append(append(nfs3.FH(nil), a.Where.Dir...), a.Where.Name...) // the file's handle, in this peer
	r := snfs1.OpenNameRes{Status: p.check(call, a.Client, fh, true)}
	if r.Status == nfs3.OK {
		p.openFile(ctx, a.Client, fh, a.Mode)
		r.File = fh
		r.OpenOK = snfs1.OpenOK{CacheVersion: 9, OldCacheVersion: 9, CacheEnabled: true, Attr: peerAttr}
	}
	p.record(peerOpen{proc: "OPEN_NAME", xid: call.XID, client: a.Client, mode: a.Mode, status: r.Status})
	r.Encode(res)
	return nil
}

func (p *testPeer) close(_ context.Context, call *sunrpc.Call, args *xdr.Reader, res *xdr.Writer) error {
	var a snfs1.CloseArgs
	if err := a.Decode(args); err != nil {
		return sunrpc.ErrGarbageArgs
	}
	r := snfs1.CloseRes{Status: p.check(call, a.Client, a.File, false)}
	if r.Status == nfs3.OK {
		r.Attr = peerAttr
	}
	p.record(peerOpen{proc: "CLOSE", xid: call.XID, client: a.Client, mode: a.Mode, dirty: a.Dirty, status: r.Status})
	r.Encode(res)
	return nil
}

// reclaimCall records a RECLAIM, RECLAIM_DONE or UNREGISTER and answers it:
// STALE_CLIENTID for an unknown client, NOGRACE for the first two while
// noGrace is set; the dropAt'th RECLAIM closes the connection instead.
func (p *testPeer) reclaimCall(call *sunrpc.Call, proc string, id snfs1.ClientID, items []snfs1.ReclaimItem, res *xdr.Writer) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := peerReclaim{proc: proc, client: id, conn: call.Conn.ID(), items: items, opens: len(p.opens)}
	if proc == "RECLAIM" && p.dropAt > 0 {
		if p.dropAt--; p.dropAt == 0 {
			call.Conn.Close()
			return nil
		}
	}
	switch _, ok := p.conns[id]; {
	case !ok:
		r.status = snfs1.ErrStaleClientID
	case proc == "UNREGISTER":
		for name, c := range p.names {
			if c.id == id {
				delete(p.names, name)
			}
		}
		delete(p.conns, id)
	case p.noGrace:
		r.status = snfs1.ErrNoGrace
	}
	p.reclaims = append(p.reclaims, r)
	(&snfs1.StatusRes{Status: r.status}).Encode(res)
	return nil
}

func (p *testPeer) reclaimLog() []peerReclaim {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]peerReclaim(nil), p.reclaims...)
}

// callBack sends CB_CALLBACK (or, with args nil, CB_NULL) to client id on its
// callback path and returns its answer.
func (p *testPeer) callBack(ctx context.Context, id snfs1.ClientID, args xdr.Encoder) (state.Outcome, error) {
	p.mu.Lock()
	conn := p.conns[id]
	p.mu.Unlock()
	if conn == nil {
		p.t.Fatalf("peer: client %d has no callback path", id)
	}
	if args == nil {
		return 0, conn.Call(ctx, snfs1.CBProgram, snfs1.CBVersion, snfs1.CBProcNull, sunrpc.OpaqueAuth{}, nil, nil)
	}
	var res snfs1.CallbackRes
	err := conn.Call(ctx, snfs1.CBProgram, snfs1.CBVersion, snfs1.CBProcCallback, sunrpc.OpaqueAuth{}, args, &res)
	return res.Status, err
}

// dropConns closes every callback path from the server side (the clients'
// registrations stay).
func (p *testPeer) dropConns() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// forget drops every registration (later calls get STALE_CLIENTID), keeping
// the connections.
func (p *testPeer) forget() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.names = map[string]peerClient{}
	p.conns = map[snfs1.ClientID]*sunrpc.Conn{}
}

// restart plays a server restart: a new server verifier, every registration
// forgotten, every connection closed.
func (p *testPeer) restart() {
	p.dropConns()
	p.forget()
	p.mu.Lock()
	p.verf[7]++
	p.mu.Unlock()
}

// restartKeeping plays a server restart that keeps its client records (as
// the real server does in its state directory): a new server verifier, every
// connection closed, the same client ids for the same names and verifiers.
func (p *testPeer) restartKeeping() {
	// The new verifier first, as a restarted server has it from its start:
	// a session reconnects as soon as its connection drops, and must not
	// find the old one.
	p.mu.Lock()
	p.verf[7]++
	p.mu.Unlock()
	p.dropConns()
}

func (p *testPeer) snapshot() (regs []peerRegister, opens []peerOpen, nulls []uint64, cb []state.Outcome) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]peerRegister(nil), p.registers...), append([]peerOpen(nil), p.opens...),
		append([]uint64(nil), p.nulls...), append([]state.Outcome(nil), p.cbAnswers...)
}
