package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"snfs/state"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"snfs/client"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/sunrpc"
)

// cbCall is one callback a recordingHandler served.
type cbCall struct {
	fh   nfs3.FH
	mode state.CallbackMode
	attr *nfs3.Fattr
}

// recordingHandler answers every callback with answer and reports it on calls.
type recordingHandler struct {
	answer state.Outcome
	calls  chan cbCall
}

func newRecorder(answer state.Outcome) *recordingHandler {
	return &recordingHandler{answer: answer, calls: make(chan cbCall, 16)}
}

func (h *recordingHandler) Callback(_ context.Context, fh nfs3.FH, mode state.CallbackMode, attr *nfs3.Fattr) state.Outcome {
	h.calls <- cbCall{fh, mode, attr}
	return h.answer
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func dialSession(t *testing.T, p *testPeer, cfg client.SessionConfig) *client.Session {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet()
	}
	s, err := client.DialSession(testCtx(t), "tcp", p.addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Disconnect() })
	return s
}

var fileFH = nfs3.FH("file-handle-0001")

func TestSessionRegisters(t *testing.T) {
	p := newTestPeer(t)
	a := dialSession(t, p, client.SessionConfig{Name: "host-a:/mnt"})
	b := dialSession(t, p, client.SessionConfig{})
	regs, _, _, _ := p.snapshot()
	if len(regs) != 2 {
		t.Fatalf("peer saw %d REGISTERs, want 2 (one per session, at dial)", len(regs))
	}
	host, _ := os.Hostname()
	if regs[0].name != "host-a:/mnt" || regs[1].name != host || b.Name() != host {
		t.Errorf("names registered %q, %q (session b: %q); want host-a:/mnt and the host name %q", regs[0].name, regs[1].name, b.Name(), host)
	}
	if a.ClientVerifier() == (snfs1.Verifier{}) || a.ClientVerifier() == b.ClientVerifier() {
		t.Errorf("client verifiers %x, %x: want fresh random ones", a.ClientVerifier(), b.ClientVerifier())
	}
	if regs[0].verf != a.ClientVerifier() {
		t.Errorf("registered verifier %x, session's %x", regs[0].verf, a.ClientVerifier())
	}
	if a.ClientID() != regs[0].id || b.ClientID() != regs[1].id || a.ClientID() == b.ClientID() {
		t.Errorf("client ids %d, %d; peer issued %d, %d", a.ClientID(), b.ClientID(), regs[0].id, regs[1].id)
	}
	if a.ServerVerifier() != p.verf || a.CallbackTimeout() != 5*time.Second {
		t.Errorf("server verifier %x (want %x), callback timeout %v (want 5s)", a.ServerVerifier(), p.verf, a.CallbackTimeout())
	}
	verf := snfs1.Verifier{1, 2, 3, 4, 5, 6, 7, 8}
	c := dialSession(t, p, client.SessionConfig{Name: "c", Verifier: verf})
	if c.ClientVerifier() != verf {
		t.Errorf("client verifier %x, want the configured %x", c.ClientVerifier(), verf)
	}
	if _, err := client.DialSession(testCtx(t), "tcp", p.addr, client.SessionConfig{Name: strings.Repeat("x", snfs1.NameLen+1)}); err == nil {
		t.Error("a name longer than NameLen was accepted")
	}
}

// NFS, MOUNT and SNFS calls share the connection REGISTER came on.
func TestSessionOneConnection(t *testing.T) {
	p := newTestPeer(t)
	s := dialSession(t, p, client.SessionConfig{Name: "one"})
	ctx := testCtx(t)
	if err := s.NFS().Null(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Mount().Call(ctx, 0, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Null(ctx); err != nil {
		t.Fatal(err)
	}
	regs, _, nulls, _ := p.snapshot()
	if len(nulls) != 3 {
		t.Fatalf("peer saw %d NULLs, want 3", len(nulls))
	}
	for i, c := range nulls {
		if c != regs[0].conn {
			t.Errorf("NULL %d came on connection %d, REGISTER on %d", i, c, regs[0].conn)
		}
	}
}

func TestSessionOpenClose(t *testing.T) {
	p := newTestPeer(t)
	s := dialSession(t, p, client.SessionConfig{Name: "oc"})
	ctx := testCtx(t)
	ok, err := s.Open(ctx, fileFH, state.Write)
	if err != nil {
		t.Fatal(err)
	}
	if ok.CacheVersion != 9 || ok.OldCacheVersion != 8 || !ok.CacheEnabled || ok.Attr == nil || ok.Attr.Size != 42 {
		t.Errorf("OPEN result %+v", ok)
	}
	fh, ok, err := s.OpenName(ctx, nfs3.FH("dir"), "name", state.Read)
	if err != nil {
		t.Fatal(err)
	}
	if string(fh) != "dirname" || ok.CacheVersion != 9 {
		t.Errorf("OPEN_NAME: fh %q, result %+v", fh, ok)
	}
	attr, err := s.Close(ctx, fileFH, state.Write, true)
	if err != nil {
		t.Fatal(err)
	}
	if attr == nil || attr.FileID != 7 {
		t.Errorf("CLOSE attributes %+v", attr)
	}
	_, opens, _, _ := p.snapshot()
	want := []struct {
		proc  string
		mode  state.Mode
		dirty bool
	}{{"OPEN", state.Write, false}, {"OPEN_NAME", state.Read, false}, {"CLOSE", state.Write, true}}
	if len(opens) != len(want) {
		t.Fatalf("peer saw %d calls, want %d", len(opens), len(want))
	}
	for i, w := range want {
		o := opens[i]
		if o.proc != w.proc || o.mode != w.mode || o.dirty != w.dirty || o.client != s.ClientID() {
			t.Errorf("call %d: %+v, want %s %v dirty=%v by client %d", i, o, w.proc, w.mode, w.dirty, s.ClientID())
		}
	}
}

// JUKEBOX is retried after a back-off, each time as a new request.
func TestSessionOpenJukebox(t *testing.T) {
	p := newTestPeer(t)
	s := dialSession(t, p, client.SessionConfig{Name: "jb"})
	p.mu.Lock()
	p.jukebox = 2
	p.mu.Unlock()
	start := time.Now()
	if _, err := s.Open(testCtx(t), fileFH, state.Read); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 60*time.Millisecond {
		t.Errorf("two JUKEBOX retries took %v; want the back-off (20 ms, then 40 ms)", d)
	}
	_, opens, _, _ := p.snapshot()
	if len(opens) != 3 || opens[0].status != nfs3.ErrJukebox || opens[1].status != nfs3.ErrJukebox || opens[2].status != nfs3.OK {
		t.Fatalf("peer saw %+v; want JUKEBOX, JUKEBOX, OK", opens)
	}
	if opens[0].xid == opens[1].xid || opens[1].xid == opens[2].xid || opens[0].xid == opens[2].xid {
		t.Errorf("OPEN xids %d, %d, %d: a retry after JUKEBOX is a new request", opens[0].xid, opens[1].xid, opens[2].xid)
	}
}

func TestSessionJukeboxUntilContextEnds(t *testing.T) {
	p := newTestPeer(t)
	s := dialSession(t, p, client.SessionConfig{Name: "jb2"})
	p.mu.Lock()
	p.jukebox = 1 << 30
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := s.Open(ctx, fileFH, state.Read)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, nfs3.ErrJukebox) {
		t.Fatalf("OPEN answered JUKEBOX until the deadline: err %v; want one that is both", err)
	}
	_, opens, _, _ := p.snapshot()
	if n := len(opens); n < 2 || n > 6 { // at 0, 20, 60, 140 ms (later on a loaded machine)
		t.Errorf("%d OPENs in 200 ms; want the back-off's 4 or so", n)
	}
}

// STALE_CLIENTID: REGISTER again on the same connection, retry once with the
// new id.
func TestSessionStaleClientID(t *testing.T) {
	p := newTestPeer(t)
	s := dialSession(t, p, client.SessionConfig{Name: "stale"})
	ctx := testCtx(t)
	old := s.ClientID()
	p.forget()
	if _, err := s.Open(ctx, fileFH, state.Read); err != nil {
		t.Fatal(err)
	}
	regs, opens, _, _ := p.snapshot()
	if len(regs) != 2 || regs[1].conn != regs[0].conn || regs[1].verf != regs[0].verf || regs[1].name != "stale" {
		t.Fatalf("REGISTERs %+v; want a second one on the same connection, same name and verifier", regs)
	}
	if s.ClientID() == old || s.ClientID() != regs[1].id {
		t.Errorf("client id %d after re-REGISTER (was %d, peer issued %d)", s.ClientID(), old, regs[1].id)
	}
	if len(opens) != 2 || opens[0].status != snfs1.ErrStaleClientID || opens[0].client != old ||
		opens[1].status != nfs3.OK || opens[1].client != regs[1].id {
		t.Errorf("OPENs %+v; want STALE_CLIENTID with id %d, then OK with %d", opens, old, regs[1].id)
	}

	// A call still stale after registering again fails, after one retry.
	p.mu.Lock()
	p.status[string(fileFH)] = snfs1.ErrStaleClientID
	p.mu.Unlock()
	_, err := s.Close(ctx, fileFH, state.Read, false)
	if !errors.Is(err, snfs1.ErrStaleClientID) {
		t.Fatalf("CLOSE: %v; want SNFS_ERR_STALE_CLIENTID", err)
	}
	_, opens, _, _ = p.snapshot()
	if n := len(opens); n != 4 {
		t.Errorf("%d calls; want 2 CLOSEs (one retry)", n-2)
	}
}

func TestSessionStatusErrors(t *testing.T) {
	p := newTestPeer(t)
	s := dialSession(t, p, client.SessionConfig{Name: "err"})
	ctx := testCtx(t)
	dir := nfs3.FH("a-directory-handle")
	fenced := nfs3.FH("fenced")
	p.mu.Lock()
	p.status[string(dir)] = nfs3.ErrIsDir
	p.status[string(fenced)] = snfs1.ErrFenced
	p.status[string(dir)+"x"] = nfs3.ErrNoEnt // the peer's handle for dir/x
	p.mu.Unlock()

	_, err := s.Open(ctx, dir, state.Read)
	var se *client.StatusError
	if !errors.Is(err, nfs3.ErrIsDir) || !errors.As(err, &se) || se.Proc != "OPEN" || !bytes.Equal(se.File, dir) {
		t.Errorf("OPEN of a directory: %v (%+v)", err, se)
	}
	if msg := err.Error(); !strings.Contains(msg, "OPEN fh 612d6469…6e646c65") || !strings.Contains(msg, "NFS3ERR_ISDIR") {
		t.Errorf("message %q: want the procedure, the short handle and the status", msg)
	}
	_, err = s.Close(ctx, fenced, state.Write, false)
	var st nfs3.Status
	if !errors.Is(err, snfs1.ErrFenced) || !errors.As(err, &st) || st != snfs1.ErrFenced ||
		!strings.Contains(err.Error(), "SNFS_ERR_FENCED") {
		t.Errorf("CLOSE of a fenced file: %v", err)
	}
	_, _, err = s.OpenName(ctx, dir, "x", state.Read)
	if !errors.Is(err, nfs3.ErrNoEnt) || !errors.As(err, &se) || se.Proc != "OPEN_NAME" || se.Name != "x" ||
		!strings.Contains(err.Error(), `OPEN_NAME fh 612d6469…6e646c65 "x": NFS3ERR_NOENT`) {
		t.Errorf("OPEN_NAME of a missing name: %v", err)
	}
}

// A READ open of a file another client writes calls the writer back, through
// its CallbackHandler, before the OPEN returns; the handler's answer reaches
// the server.
func TestSessionCallback(t *testing.T) {
	p := newTestPeer(t)
	h := newRecorder(state.TreatAsClosed)
	a := dialSession(t, p, client.SessionConfig{Name: "writer", Handler: h})
	b := dialSession(t, p, client.SessionConfig{Name: "reader"})
	ctx := testCtx(t)
	if _, err := a.Open(ctx, fileFH, state.Write); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Open(ctx, fileFH, state.Read); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-h.calls:
		if !bytes.Equal(c.fh, fileFH) || c.mode != state.Writeback || c.attr == nil || c.attr.Size != 42 {
			t.Errorf("callback %+v; want WRITEBACK of the file with its attributes", c)
		}
	default:
		t.Fatal("the reader's OPEN returned before the writer was called back")
	}
	if _, _, _, cb := p.snapshot(); len(cb) != 1 || cb[0] != state.TreatAsClosed {
		t.Errorf("the peer got callback answers %v; want the handler's CB_TREAT_AS_CLOSED", cb)
	}
}

// CB_NULL, a session without a handler (CB_STALE), and undecodable arguments
// (GARBAGE_ARGS).
func TestSessionCallbackProgram(t *testing.T) {
	p := newTestPeer(t)
	s := dialSession(t, p, client.SessionConfig{Name: "nil-handler"})
	ctx := testCtx(t)
	if _, err := p.callBack(ctx, s.ClientID(), nil); err != nil {
		t.Errorf("CB_NULL: %v", err)
	}
	st, err := p.callBack(ctx, s.ClientID(), &snfs1.CallbackArgs{File: fileFH, Mode: state.Invalidate})
	if err != nil || st != state.Stale {
		t.Errorf("CB_CALLBACK without a handler: %v, %v; want CB_STALE", st, err)
	}
	_, err = p.callBack(ctx, s.ClientID(), &snfs1.CallbackArgs{File: fileFH, Mode: 9})
	var re *sunrpc.RPCError
	if !errors.As(err, &re) || re.Accept != sunrpc.GarbageArgs {
		t.Errorf("CB_CALLBACK with mode 9: %v; want GARBAGE_ARGS", err)
	}
}

// After the server drops the connection, the next call reconnects, REGISTER
// runs first on the new connection with the same name and verifier, and
// callbacks reach the handler there.
func TestSessionReconnect(t *testing.T) {
	p := newTestPeer(t)
	h := newRecorder(state.OK)
	restarted := make(chan struct{}, 1)
	s := dialSession(t, p, client.SessionConfig{Name: "re", Handler: h, OnServerRestart: func(bool) { restarted <- struct{}{} }})
	ctx := testCtx(t)
	id := s.ClientID()
	p.dropConns()
	if _, err := s.Open(ctx, fileFH, state.Read); err != nil {
		t.Fatal(err)
	}
	regs, opens, _, _ := p.snapshot()
	if len(regs) != 2 {
		t.Fatalf("%d REGISTERs; want one more after the reconnect", len(regs))
	}
	if regs[1].conn == regs[0].conn || regs[1].name != regs[0].name || regs[1].verf != regs[0].verf || regs[1].id != id {
		t.Errorf("REGISTERs %+v; want the second on a new connection, same name, verifier and client id", regs)
	}
	if len(opens) != 1 || opens[0].client != id || opens[0].status != nfs3.OK {
		t.Errorf("OPENs %+v", opens)
	}
	st, err := p.callBack(ctx, id, &snfs1.CallbackArgs{File: fileFH, Mode: state.WritebackInvalidate})
	if err != nil || st != state.OK {
		t.Fatalf("callback on the new connection: %v, %v", st, err)
	}
	if c := <-h.calls; c.mode != state.WritebackInvalidate {
		t.Errorf("callback %+v", c)
	}
	select {
	case <-restarted:
		t.Error("OnServerRestart ran after a reconnect to the same server")
	default:
	}
}

// OnServerRestart runs when REGISTER returns another server verifier.
func TestSessionServerRestart(t *testing.T) {
	p := newTestPeer(t)
	restarted := make(chan snfs1.Verifier, 4)
	var s *client.Session
	ready := make(chan struct{})
	s = dialSession(t, p, client.SessionConfig{Name: "rs", OnServerRestart: func(bool) {
		<-ready
		restarted <- s.ServerVerifier()
	}})
	close(ready)
	ctx := testCtx(t)
	old, oldID := s.ServerVerifier(), s.ClientID()
	p.restart()
	if _, err := s.Open(ctx, fileFH, state.Read); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-restarted:
		if v == old || v != p.verf {
			t.Errorf("OnServerRestart saw server verifier %x; old %x, new %x", v, old, p.verf)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("OnServerRestart did not run")
	}
	if s.ClientID() == oldID {
		t.Errorf("client id %d after the restart; want the new server's", s.ClientID())
	}
	select {
	case <-restarted:
		t.Error("OnServerRestart ran twice")
	case <-time.After(50 * time.Millisecond):
	}
}

// Calls that get STALE_CLIENTID together register again once.
func TestSessionStaleClientIDConcurrent(t *testing.T) {
	p := newTestPeer(t)
	s := dialSession(t, p, client.SessionConfig{Name: "many"})
	ctx := testCtx(t)
	p.forget()
	const n = 8
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := s.Open(ctx, fileFH, state.Read)
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if regs, _, _, _ := p.snapshot(); len(regs) != 2 {
		t.Errorf("%d REGISTERs; want the dial's and one more", len(regs))
	}
}

func TestSessionDisconnect(t *testing.T) {
	p := newTestPeer(t)
	s := dialSession(t, p, client.SessionConfig{Name: "bye"})
	if err := s.Disconnect(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open(testCtx(t), fileFH, state.Read); !errors.Is(err, sunrpc.ErrClientClosed) {
		t.Errorf("OPEN after Disconnect: %v; want sunrpc.ErrClientClosed", err)
	}
}

// reclaimItems makes n distinct reclaim items.
func reclaimItems(n int) []snfs1.ReclaimItem {
	items := make([]snfs1.ReclaimItem, n)
	for i := range items {
		items[i] = snfs1.ReclaimItem{File: nfs3.FH(fmt.Sprintf("fh-%06d", i)), Readers: 1, Writers: uint32(i % 2),
			Caching: true, Dirty: i%3 == 0, Version: uint64(100 + i)}
	}
	return items
}

// After a server restart, the session sends what Reclaim reports in RECLAIMs
// of at most ReclaimMax items and then RECLAIM_DONE, all on the new connection
// before any other call, and then runs OnServerRestart(false).
func TestSessionReclaim(t *testing.T) {
	p := newTestPeer(t)
	items := reclaimItems(2*snfs1.ReclaimMax + 7)
	restarted := make(chan bool, 4)
	// Atomic: the reconnect that calls Reclaim follows the peer's restart
	// through a socket, which the race detector does not see as ordering.
	var collected atomic.Int32
	s := dialSession(t, p, client.SessionConfig{Name: "rc",
		Reclaim:         func(context.Context) []snfs1.ReclaimItem { collected.Add(1); return items },
		OnServerRestart: func(refused bool) { restarted <- refused }})
	ctx := testCtx(t)
	id := s.ClientID()
	if collected.Load() != 0 {
		t.Fatal("Reclaim ran at the first REGISTER")
	}
	p.restartKeeping()
	if _, err := s.Open(ctx, fileFH, state.Read); err != nil {
		t.Fatal(err)
	}
	select {
	case refused := <-restarted:
		if refused {
			t.Error("OnServerRestart(true); want false: the reclaim was taken")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("OnServerRestart did not run")
	}
	log := p.reclaimLog()
	if len(log) != 4 {
		t.Fatalf("%d calls %+v; want 3 RECLAIMs and a RECLAIM_DONE", len(log), log)
	}
	regs, _, _, _ := p.snapshot()
	var got []snfs1.ReclaimItem
	for i, r := range log {
		want := "RECLAIM"
		if i == 3 {
			want = "RECLAIM_DONE"
		}
		if r.proc != want || r.client != id || r.conn != regs[len(regs)-1].conn || r.opens != 0 || r.status != nfs3.OK {
			t.Errorf("call %d: %s client %d conn %d after %d opens, %v; want %s of client %d on the new connection %d before the OPEN",
				i, r.proc, r.client, r.conn, r.opens, r.status, want, id, regs[len(regs)-1].conn)
		}
		if len(r.items) > snfs1.ReclaimMax {
			t.Errorf("RECLAIM of %d items", len(r.items))
		}
		got = append(got, r.items...)
	}
	if len(got) != len(items) {
		t.Fatalf("%d items reclaimed; want %d", len(got), len(items))
	}
	for i := range items {
		if !bytes.Equal(got[i].File, items[i].File) || got[i].Version != items[i].Version || got[i].Dirty != items[i].Dirty {
			t.Fatalf("item %d: %+v; want %+v", i, got[i], items[i])
		}
	}
	if n := collected.Load(); n != 1 {
		t.Errorf("Reclaim ran %d times", n)
	}
	// A reconnect to the same server instance reclaims nothing.
	p.dropConns()
	if err := s.Null(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(p.reclaimLog()); n != 4 {
		t.Errorf("%d reclaim calls after a plain reconnect; want still 4", n)
	}
}

// After a server restart the session sends the locks ReclaimLocks holds
// first - LOCKs with reclaim TRUE and without block, on the new connection,
// with the new client id - then the RECLAIMs and RECLAIM_DONE; ReclaimLocks
// sees each answer and the new server verifier.
func TestSessionReclaimLocks(t *testing.T) {
	p := newTestPeer(t)
	restarted := make(chan bool, 4)
	var answers atomic.Int32
	var verf atomic.Value
	s := dialSession(t, p, client.SessionConfig{Name: "rl",
		Reclaim: func(context.Context) []snfs1.ReclaimItem { return reclaimItems(1) },
		ReclaimLocks: func(ctx context.Context, v snfs1.Verifier, lock func(a *snfs1.LockArgs) (*snfs1.LockRes, error)) error {
			verf.Store(v)
			for o := uint64(1); o <= 2; o++ {
				res, err := lock(&snfs1.LockArgs{File: fileFH, Owner: o, Type: snfs1.LockWrite, Offset: o, Length: 1, Block: true})
				if err != nil {
					return err
				}
				if res.Status == nfs3.OK && res.Stat == snfs1.LockGranted {
					answers.Add(1)
				}
			}
			return nil
		},
		OnServerRestart: func(refused bool) { restarted <- refused }})
	ctx := testCtx(t)
	p.restartKeeping()
	if _, err := s.Open(ctx, fileFH, state.Read); err != nil {
		t.Fatal(err)
	}
	if refused := <-restarted; refused {
		t.Fatal("OnServerRestart(true)")
	}
	log := p.reclaimLog()
	regs, _, _, _ := p.snapshot()
	want := []string{"LOCK", "LOCK", "RECLAIM", "RECLAIM_DONE"}
	if len(log) != len(want) {
		t.Fatalf("%d calls %+v; want %v", len(log), log, want)
	}
	for i, r := range log {
		if r.proc != want[i] || r.client != s.ClientID() || r.conn != regs[len(regs)-1].conn || r.opens != 0 {
			t.Errorf("call %d: %s client %d conn %d after %d opens; want %s of client %d on the new connection %d before the OPEN",
				i, r.proc, r.client, r.conn, r.opens, want[i], s.ClientID(), regs[len(regs)-1].conn)
		}
		if l := r.lock; l != nil && (!l.Reclaim || l.Block || l.Owner != uint64(i+1) || l.Offset != uint64(i+1)) {
			t.Errorf("LOCK %d: %+v; want a reclaim of owner %d without block", i, *l, i+1)
		}
	}
	if n := answers.Load(); n != 2 {
		t.Errorf("ReclaimLocks saw %d grants; want 2", n)
	}
	if v, _ := verf.Load().(snfs1.Verifier); v != s.ServerVerifier() {
		t.Errorf("ReclaimLocks got verifier %x; want the new %x", v, s.ServerVerifier())
	}
}

// A server that answers NOGRACE refused the reclaim: the session stops
// sending, sends no RECLAIM_DONE, and reports OnServerRestart(true).
func TestSessionReclaimRefused(t *testing.T) {
	p := newTestPeer(t)
	restarted := make(chan bool, 4)
	s := dialSession(t, p, client.SessionConfig{Name: "rf",
		Reclaim:         func(context.Context) []snfs1.ReclaimItem { return reclaimItems(snfs1.ReclaimMax + 1) },
		OnServerRestart: func(refused bool) { restarted <- refused }})
	p.mu.Lock()
	p.noGrace = true
	p.mu.Unlock()
	p.restartKeeping()
	if err := s.Null(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case refused := <-restarted:
		if !refused {
			t.Error("OnServerRestart(false) after NOGRACE")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("OnServerRestart did not run")
	}
	if log := p.reclaimLog(); len(log) != 1 || log[0].proc != "RECLAIM" || log[0].status != snfs1.ErrNoGrace {
		t.Errorf("calls %+v; want one RECLAIM answered NOGRACE", log)
	}
}

// A connection that breaks during the reclaim leaves it due: the next
// connection reclaims everything again (the server ignores what it already
// has), and OnServerRestart runs once.
func TestSessionReclaimInterrupted(t *testing.T) {
	p := newTestPeer(t)
	restarted := make(chan bool, 4)
	s := dialSession(t, p, client.SessionConfig{Name: "ri", Timeout: 2 * time.Second,
		Reclaim:         func(context.Context) []snfs1.ReclaimItem { return reclaimItems(snfs1.ReclaimMax + 1) },
		OnServerRestart: func(refused bool) { restarted <- refused }})
	p.mu.Lock()
	p.dropAt = 2 // the second batch
	p.mu.Unlock()
	p.restartKeeping()
	ctx := testCtx(t)
	for {
		err := s.Null(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal(err)
		}
	}
	select {
	case refused := <-restarted:
		if refused {
			t.Error("OnServerRestart(true)")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("OnServerRestart did not run")
	}
	var procs []string
	for _, r := range p.reclaimLog() {
		procs = append(procs, fmt.Sprintf("%s/%d", r.proc, len(r.items)))
	}
	want := "RECLAIM/1024 RECLAIM/1024 RECLAIM/1 RECLAIM_DONE/0"
	if strings.Join(procs, " ") != want {
		t.Errorf("calls %v; want %s (the first batch, then everything again on the next connection)", procs, want)
	}
	select {
	case <-restarted:
		t.Error("OnServerRestart ran twice")
	case <-time.After(50 * time.Millisecond):
	}
}

// Unregister ends the registration; a second one finds it gone and is no error.
func TestSessionUnregister(t *testing.T) {
	p := newTestPeer(t)
	s := dialSession(t, p, client.SessionConfig{Name: "un"})
	ctx := testCtx(t)
	if err := s.Unregister(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Unregister(ctx); err != nil {
		t.Fatalf("second UNREGISTER: %v", err)
	}
	log := p.reclaimLog()
	if len(log) != 2 || log[0].proc != "UNREGISTER" || log[0].status != nfs3.OK || log[1].status != snfs1.ErrStaleClientID {
		t.Errorf("calls %+v", log)
	}
}

// A handler that could not do the callback's work (state.Failed: its
// write-back did not reach the server) fails the call with SYSTEM_ERR, the
// RPC error docs/protocol.md 5.1 says fences the client for the file, rather
// than an answer saying done.
func TestSessionCallbackFailed(t *testing.T) {
	p := newTestPeer(t)
	s := dialSession(t, p, client.SessionConfig{Name: "failing", Handler: newRecorder(state.Failed)})
	ctx := testCtx(t)
	st, err := p.callBack(ctx, s.ClientID(), &snfs1.CallbackArgs{File: fileFH, Mode: state.Writeback})
	var re *sunrpc.RPCError
	if !errors.As(err, &re) || re.Accept != sunrpc.SystemErr {
		t.Errorf("CB_CALLBACK the handler failed: %v, %v; want SYSTEM_ERR", st, err)
	}
}

// TestSessionWaitsForProbe: a connection's first call goes after the
// session answered the server's probe of its callback path (the CB_NULL
// that follows REGISTER): until the server has read that answer it grants
// no caching, no permit and no directory promise (docs/protocol.md section
// 7). The session's first calls used to overtake a probe sent late (under
// load: a mount's first OPEN refused caching, its first GET_PERMIT refused
// and not asked again for a while). The peer holds its probe back a
// little: the OPEN after the dial must still come after its answer.
func TestSessionWaitsForProbe(t *testing.T) {
	p := newTestPeer(t)
	hold := make(chan struct{})
	p.mu.Lock()
	p.probeHold = hold
	p.mu.Unlock()
	time.AfterFunc(200*time.Millisecond, func() { close(hold) })
	s := dialSession(t, p, client.SessionConfig{Name: "probed"})
	if _, err := s.Open(testCtx(t), fileFH, state.Read); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	probes := append([]int(nil), p.probes...)
	p.mu.Unlock()
	if len(probes) != 1 || probes[0] != 0 {
		t.Fatalf("probes answered, with the opens seen before each: %v; want one, before any open", probes)
	}
}
