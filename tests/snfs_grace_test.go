package tests

import (
	"context"
	"snfs/state"
	"sync/atomic"
	"testing"
	"time"

	"snfs/client"
	"snfs/consist"
	"snfs/metrics"
	"snfs/nfs3"
	"snfs/server"
	"snfs/snfs1"
)

// The grace period after a server restart (issue 15, docs/protocol.md "Grace
// period"): the clients known before the restart reclaim their state, and
// until they have (or the bound passes) OPENs and plain NFS calls wait.

// graceClient is a client.Session that reports a fixed set of reclaim items
// after a server restart, and tells whether its reclaim was refused.
type graceClient struct {
	*client.Session
	items     []snfs1.ReclaimItem // what it reclaims; set before the restart
	restarted chan bool           // OnServerRestart's refused
	holding   atomic.Bool         // if set, Reclaim waits until hold is closed (a client back late)
	hold      chan struct{}
}

func dialGrace(t *testing.T, e *env, name string, h client.CallbackHandler) *graceClient {
	t.Helper()
	g := &graceClient{restarted: make(chan bool, 4), hold: make(chan struct{})}
	cx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := client.DialSession(cx, "tcp", e.addr, client.SessionConfig{Name: name, Handler: h, Logger: quietLogger(),
		Reclaim: func(ctx context.Context) []snfs1.ReclaimItem {
			if g.holding.Load() {
				select {
				case <-g.hold:
				case <-ctx.Done():
				}
			}
			return g.items
		},
		OnServerRestart: func(refused bool) { g.restarted <- refused }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Disconnect() })
	g.Session = s
	return g
}

// comeBack makes g's next call, which reconnects to the restarted server and
// reclaims, and returns whether the reclaim was refused.
func (g *graceClient) comeBack(t *testing.T) (refused bool) {
	t.Helper()
	cx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := g.Null(cx); err != nil {
		t.Fatalf("%s: NULL after the restart: %v", g.Name(), err)
	}
	select {
	case refused = <-g.restarted:
		return refused
	case <-cx.Done():
		t.Fatalf("%s: OnServerRestart did not run", g.Name())
	}
	return false
}

// restartGrace restarts e's server with grace bound and a fresh metrics
// registry, which it returns.
func restartGrace(e *env, bound time.Duration) *metrics.Registry {
	reg := metrics.New()
	e.restartWith(func(c *server.Config) { c.Grace, c.Metrics = bound, reg })
	return reg
}

// restartGraceClock is restartGrace with the protocol's clock one the test
// moves: a grace period that must time out ends when the test says (after
// clock.Advance(bound)), not when a bound chosen long enough for a loaded
// machine has passed.
func restartGraceClock(e *env, bound time.Duration) (*metrics.Registry, *consist.OffsetClock) {
	reg, clock := metrics.New(), new(consist.OffsetClock)
	e.restartWith(func(c *server.Config) { c.Grace, c.Metrics, c.Clock = bound, reg, clock })
	return reg, clock
}

// waitGrace waits for the end of the grace period (at most 30 s) and returns
// its report.
func waitGrace(t *testing.T, e *env) consist.GraceReport {
	t.Helper()
	select {
	case <-e.srv.GraceOver():
	case <-time.After(30 * time.Second):
		t.Fatal("the grace period did not end")
	}
	return e.srv.Grace()
}

// metricValue is the value of the counter or gauge name (with label key=val
// if key is not empty) in reg.
func graceMetric(t *testing.T, reg *metrics.Registry, name, key, val string) float64 {
	t.Helper()
	fams, err := reg.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			match := key == ""
			for _, l := range m.GetLabel() {
				if l.GetName() == key && l.GetValue() == val {
					match = true
				}
			}
			if !match {
				continue
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s{%s=%q}", name, key, val)
	return 0
}

// openItems opens each file through g (mode) and records them as g's reclaim
// items, with the version the OPEN returned.
func (g *graceClient) openItems(t *testing.T, mode state.Mode, fhs ...nfs3.FH) {
	t.Helper()
	cx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, fh := range fhs {
		ok, err := g.Open(cx, fh, mode)
		if err != nil {
			t.Fatal(err)
		}
		it := snfs1.ReclaimItem{File: fh, Caching: ok.CacheEnabled, Version: ok.CacheVersion}
		if mode == state.Write {
			it.Writers = 1
		} else {
			it.Readers = 1
		}
		g.items = append(g.items, it)
	}
}

// TestSNFSGraceAllReclaimed: three clients with open files; after a restart
// with a long bound, each reconnects and reclaims, and the grace period ends
// because all are back, not at its bound.
func TestSNFSGraceAllReclaimed(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	var total int
	var gs []*graceClient
	for i, name := range []string{"grace-a", "grace-b", "grace-c"} {
		g := dialGrace(t, e, name, nil)
		for j := 0; j <= i; j++ {
			g.openItems(t, state.Read, snfsCreate(t, e, name+string(rune('0'+j))))
			total++
		}
		gs = append(gs, g)
	}
	reg := restartGrace(e, time.Hour)
	// Not "lasting": the sessions reconnect and reclaim on their own as
	// their connections break, and may all be back already.
	if r := e.srv.Grace().Reason; r != "" && r != consist.GraceAllReclaimed {
		t.Fatalf("no grace period after a restart with three clients recorded: %+v", e.srv.Grace())
	}
	for _, g := range gs {
		if g.comeBack(t) {
			t.Errorf("%s: reclaim refused", g.Name())
		}
	}
	rep := waitGrace(t, e)
	if rep.Reason != consist.GraceAllReclaimed || rep.Expected != 3 || rep.Back != 3 || rep.Reclaimed != 3 || rep.Items != uint64(total) {
		t.Fatalf("grace report %+v; want all_reclaimed, 3 clients expected, back and reclaimed, %d items", rep, total)
	}
	if v := graceMetric(t, reg, "snfs_server_consist_grace_end_total", "reason", "all_reclaimed"); v != 1 {
		t.Errorf("grace_end_total{reason=all_reclaimed} = %v", v)
	}
	if v := graceMetric(t, reg, "snfs_server_consist_grace_end_total", "reason", "timeout"); v != 0 {
		t.Errorf("grace_end_total{reason=timeout} = %v", v)
	}
	if v := graceMetric(t, reg, "snfs_server_consist_reclaims_total", "", ""); v != float64(total) {
		t.Errorf("reclaims_total = %v, want %d", v, total)
	}
	if v := graceMetric(t, reg, "snfs_server_consist_grace_seconds", "", ""); v <= 0 {
		t.Errorf("grace_seconds = %v", v)
	}
	// The reclaimed opens are the table's: each file has its reader.
	for _, g := range gs {
		for _, it := range g.items {
			cx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			if _, err := g.Close(cx, it.File, state.Read, false); err != nil {
				t.Errorf("%s: CLOSE of a reclaimed open: %v", g.Name(), err)
			}
			cancel()
		}
	}
}

// TestSNFSGraceTimeout: one of two clients never comes back: the grace period
// ends at its bound (reason timeout), and that client's record is deleted, so
// the next restart waits for the other one only.
func TestSNFSGraceTimeout(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	a := dialGrace(t, e, "timeout-a", nil)
	b := dialGrace(t, e, "timeout-b", nil)
	a.openItems(t, state.Read, snfsCreate(t, e, "ta"))
	b.openItems(t, state.Write, snfsCreate(t, e, "tb"))
	b.Disconnect() // gone for good, without UNREGISTER (a crash)
	reg, clock := restartGraceClock(e, time.Hour)
	if a.comeBack(t) {
		t.Fatal("a's reclaim refused")
	}
	clock.Advance(time.Hour)
	rep := waitGrace(t, e)
	if rep.Reason != consist.GraceTimeout || rep.Expected != 2 || rep.Back != 1 || rep.Items != 1 {
		t.Fatalf("grace report %+v; want timeout, 2 expected, 1 back, 1 item", rep)
	}
	if v := graceMetric(t, reg, "snfs_server_consist_grace_end_total", "reason", "timeout"); v != 1 {
		t.Errorf("grace_end_total{reason=timeout} = %v", v)
	}
	restartGrace(e, time.Hour)
	if a.comeBack(t) {
		t.Fatal("a's second reclaim refused")
	}
	rep = waitGrace(t, e)
	if rep.Reason != consist.GraceAllReclaimed || rep.Expected != 1 {
		t.Fatalf("second grace report %+v; want all_reclaimed with a alone expected (b's record was deleted)", rep)
	}
}

// TestSNFSGraceNoGrace: RECLAIM from a client the server did not know before
// the restart, and RECLAIM after the grace period, are refused with
// SNFS_ERR_NOGRACE; a session that comes back after the grace period learns
// its reclaim was refused (OnServerRestart(true)).
func TestSNFSGraceNoGrace(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	fh := snfsCreate(t, e, "ng")
	a := dialGrace(t, e, "nograce-a", nil)
	late := dialGrace(t, e, "nograce-late", nil)
	late.openItems(t, state.Write, fh)
	late.holding.Store(true) // it reconnects at once, but reclaims only after the grace period
	_, clock := restartGraceClock(e, time.Hour)
	// During grace, from a stranger.
	stranger := newProtoClient(t, e, "nograce-stranger")
	if st := reclaimRaw(t, stranger, fh); st != snfs1.ErrNoGrace {
		t.Fatalf("RECLAIM from a client unknown before the restart: %v; want SNFS_ERR_NOGRACE", snfs1.StatusName(st))
	}
	if e.srv.Grace().Reason != "" {
		t.Fatal("the grace period ended early")
	}
	if a.comeBack(t) {
		t.Fatal("a's reclaim refused")
	}
	clock.Advance(time.Hour)
	if rep := waitGrace(t, e); rep.Reason != consist.GraceTimeout {
		t.Fatalf("grace report %+v; want timeout (late never came back in time)", rep)
	}
	// After grace: refused, for a raw RECLAIM and for the late session.
	if st := reclaimRaw(t, stranger, fh); st != snfs1.ErrNoGrace {
		t.Fatalf("RECLAIM after the grace period: %v; want SNFS_ERR_NOGRACE", snfs1.StatusName(st))
	}
	close(late.hold)
	if !late.comeBack(t) {
		t.Fatal("a session back after the grace period: its reclaim was not refused")
	}
	// The refused client's open was not reclaimed: a writer may open.
	b := newProtoClient(t, e, "nograce-b")
	if res := b.openOrFatal(t, fh, state.Write); res.Status != nfs3.OK {
		t.Fatal(res.Status)
	}
}

// reclaimRaw sends one RECLAIM of a read open of fh as p and returns its status.
func reclaimRaw(t *testing.T, p *protoClient, fh nfs3.FH) snfs1.Status {
	t.Helper()
	p.mu.Lock()
	id := p.id
	p.mu.Unlock()
	var res snfs1.ReclaimRes
	err := p.rpc.Call(ctx, snfs1.ProcReclaim, &snfs1.ReclaimArgs{Client: id, Items: []snfs1.ReclaimItem{{File: fh, Readers: 1}}}, &res)
	if err != nil {
		t.Fatal(err)
	}
	return res.Status
}

// TestSNFSGraceConflictingOpen: A reclaims a caching read open; while another
// known client (C) is not back yet, a new client's OPEN for writing gets
// JUKEBOX. Once C is back the grace period ends, the OPEN succeeds, and A,
// whose reclaimed state is real, is called back to stop caching.
func TestSNFSGraceConflictingOpen(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	fh := snfsCreate(t, e, "conflict")
	cbA := make(cbRecorder, 16)
	a := dialGrace(t, e, "conflict-a", cbA)
	c := dialGrace(t, e, "conflict-c", nil)
	a.openItems(t, state.Read, fh)
	a.items[0].Caching = true // as a reader that caches: the table must call it back
	c.holding.Store(true)     // c reconnects at once but reclaims only when let: the grace period lasts
	restartGrace(e, time.Hour)
	if a.comeBack(t) {
		t.Fatal("a's reclaim refused")
	}
	w := newProtoClient(t, e, "conflict-writer")
	res, err := w.open(fh, state.Write)
	if err != nil || res.Status != nfs3.ErrJukebox {
		t.Fatalf("OPEN for writing during grace: %v %v; want NFS3ERR_JUKEBOX", res.Status, err)
	}
	select {
	case m := <-cbA:
		t.Fatalf("a called back (%v) during grace", m)
	default:
	}
	close(c.hold)
	if c.comeBack(t) {
		t.Fatal("c's reclaim refused")
	}
	if rep := waitGrace(t, e); rep.Reason != consist.GraceAllReclaimed {
		t.Fatalf("grace report %+v", rep)
	}
	if res := w.openOrFatal(t, fh, state.Write); res.Status != nfs3.OK {
		t.Fatal(res.Status)
	}
	select {
	case m := <-cbA:
		if !m.Invalidates() {
			t.Errorf("a called back with %v; want a mode that stops its caching", m)
		}
	default:
		t.Fatal("the writer's OPEN returned without calling back the reclaimed caching reader")
	}
}

// TestSNFSGracePlainAccess: during grace a plain NFSv3 WRITE gets JUKEBOX, as
// does a reclaiming client's WRITE of a file it did not reclaim, while its
// write-back of a file it reclaimed goes through; after grace the plain WRITE
// succeeds.
func TestSNFSGracePlainAccess(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	mine, other, closed := snfsCreate(t, e, "mine"), snfsCreate(t, e, "other"), snfsCreate(t, e, "closed")
	a := dialGrace(t, e, "plain-grace-a", nil)
	c := dialGrace(t, e, "plain-grace-c", nil)
	a.openItems(t, state.Write, mine)
	// a caches what it writes (its OPEN may have been answered before its
	// callback path was verified, without caching): only a caching or closed
	// dirty holder's write-back goes on during grace (docs/protocol.md 7.1).
	a.items[0].Dirty, a.items[0].Caching = true, true
	// and holds another file dirty, closed (its last writer): not caching.
	a.items = append(a.items, snfs1.ReclaimItem{File: closed, Dirty: true, Version: a.items[0].Version})
	c.holding.Store(true) // c reconnects at once but reclaims only when let: the grace period lasts
	restartGrace(e, time.Hour)
	if a.comeBack(t) {
		t.Fatal("a's reclaim refused")
	}
	write := func(n *client.NFS, fh nfs3.FH) nfs3.Status {
		t.Helper()
		res, err := n.Write(ctx, fh, 0, []byte("x"), nfs3.FileSync)
		if err != nil {
			t.Fatal(err)
		}
		return res.Status
	}
	if st := write(e.nfs, mine); st != nfs3.ErrJukebox {
		t.Errorf("plain WRITE during grace: %v; want NFS3ERR_JUKEBOX", st)
	}
	if st := write(a.NFS(), other); st != nfs3.ErrJukebox {
		t.Errorf("a's WRITE of a file it did not reclaim, during grace: %v; want NFS3ERR_JUKEBOX", st)
	}
	if st := write(a.NFS(), mine); st != nfs3.OK {
		t.Errorf("a's write-back of the file it reclaimed, during grace: %v; want NFS3_OK", st)
	}
	if st := write(a.NFS(), closed); st != nfs3.OK {
		t.Errorf("a's write-back of the file it reclaimed dirty and closed, during grace: %v; want NFS3_OK", st)
	}
	cres, err := e.nfs.Commit(ctx, mine, 0, 0)
	if err != nil || cres.Status != nfs3.ErrJukebox {
		t.Errorf("plain COMMIT during grace: %v %v; want NFS3ERR_JUKEBOX", cres.Status, err)
	}
	close(c.hold)
	if c.comeBack(t) {
		t.Fatal("c's reclaim refused")
	}
	waitGrace(t, e)
	// a holds its reclaimed write open: the plain WRITE calls it back first (a
	// has no handler and answers CB_STALE), then goes on.
	if st := write(e.nfs, mine); st != nfs3.OK {
		t.Errorf("plain WRITE after grace: %v", st)
	}
}

// TestSNFSUnregister: a client that unregisters is forgotten durably: the
// next restart has no grace period for it.
func TestSNFSUnregister(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	a := dialGrace(t, e, "unreg-a", nil)
	a.openItems(t, state.Read, snfsCreate(t, e, "u"))
	cx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := a.Close(cx, a.items[0].File, state.Read, false); err != nil {
		t.Fatal(err)
	}
	if err := a.Unregister(cx); err != nil {
		t.Fatal(err)
	}
	a.Disconnect()
	restartGrace(e, time.Hour)
	if rep := waitGrace(t, e); rep.Reason != consist.GraceNone || rep.Expected != 0 {
		t.Fatalf("grace report %+v; want none: the only client unregistered", rep)
	}
}

// TestSNFSGraceIdleClientsReclaim: clients that make no call after the
// restart still reconnect and reclaim at once (the session reconnects when
// its connection breaks, not at its next call), so the grace period ends
// because all are back, long before its bound.
func TestSNFSGraceIdleClientsReclaim(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	a := dialGrace(t, e, "idle-a", nil)
	b := dialGrace(t, e, "idle-b", nil)
	a.openItems(t, state.Read, snfsCreate(t, e, "ia"))
	b.openItems(t, state.Write, snfsCreate(t, e, "ib"))
	restartGrace(e, time.Hour)
	rep := waitGrace(t, e)
	if rep.Reason != consist.GraceAllReclaimed || rep.Expected != 2 || rep.Reclaimed != 2 || rep.Items != 2 {
		t.Fatalf("grace report %+v; want all_reclaimed, 2 expected and reclaimed, 2 items", rep)
	}
	for _, g := range []*graceClient{a, b} {
		select {
		case refused := <-g.restarted:
			if refused {
				t.Errorf("%s: reclaim refused", g.Name())
			}
		case <-time.After(20 * time.Second):
			t.Errorf("%s: OnServerRestart did not run", g.Name())
		}
	}
}
