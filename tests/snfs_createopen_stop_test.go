package tests

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"snfs/nfs3"
	"snfs/server"
	"snfs/snfs1"
	"snfs/state"
	"snfs/sunrpc"
	"snfs/xdr"
)

// CREATE_OPEN whose reply does not reach its client at once: the server
// stops while its open waits (docs/protocol.md 4.21: the file is made, so
// the reply must outlive the server like any saved reply), or the client's
// connection goes.

// stallBreaks is a session's callback handler that records each callback
// and answers none until release is closed (or the callback's context ends).
// mount/cachemgr's tests have a copy (createopen_test.go): another package,
// and no test helper package for one type.
type stallBreaks struct {
	called  chan nfs3.FH
	release chan struct{}
}

func newStallBreaks() *stallBreaks {
	return &stallBreaks{called: make(chan nfs3.FH, 16), release: make(chan struct{})}
}

func (b *stallBreaks) Callback(ctx context.Context, fh nfs3.FH, _ state.CallbackMode, _ *nfs3.Fattr) state.Outcome {
	b.called <- append(nfs3.FH(nil), fh...)
	select {
	case <-b.release:
	case <-ctx.Done():
	}
	return state.OK
}

// TestSNFSCreateOpenReplySavedAtStop: a GUARDED CREATE_OPEN made its file
// and waits, before its open, for the break of another client's promise on
// the directory when the server shuts down gracefully. Its reply is saved
// all the same, with the open part not granted (JUKEBOX): the client's
// retransmission after the restart is answered from it (the file made, by
// the old server: its verifier), not executed again (the grace period's
// JUKEBOX, then NFS3ERR_EXIST for the file the client made itself, which
// an application's O_CREAT|O_EXCL open reported as EEXIST). Before, the
// reply was dropped (or made after the reply cache was closed) unsaved.
func TestSNFSCreateOpenReplySavedAtStop(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D := permitEnv(t)
	holder := newStallBreaks()
	defer close(holder.release)
	a := dialSNFS(t, e, "createopen-stop-holder", holder)
	p := newProtoClient(t, e, "createopen-stop")
	// The server's boot verifier, from a CREATE_OPEN answered before.
	before := p.createOpen(e.root, "before", nfs3.Guarded)
	ok(t, "CREATE_OPEN", before.Status, nil)
	ok(t, "its open", before.Open.Status, nil)
	p.close(before.File, state.Write, false)
	verf := before.ServerVerf
	promise(t, a, D)

	mode := uint32(0o644)
	p.mu.Lock()
	args := &snfs1.CreateOpenArgs{Client: p.id, Create: nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: D, Name: "x"},
		Mode: nfs3.Guarded, Attr: nfs3.Sattr{Mode: &mode}}}
	p.mu.Unlock()
	xid := p.rpc.NextXID()
	cx, cancel := context.WithCancel(context.Background())
	sent := make(chan error, 1)
	go func() {
		var res snfs1.CreateOpenRes
		sent <- p.rpc.CallXID(cx, xid, snfs1.ProcCreateOpen, args, &res)
	}()
	select {
	case fh := <-holder.called:
		if !bytes.Equal(fh, D) {
			t.Fatalf("the holder was called back about %x; want its promise's directory %x", fh, D)
		}
	case err := <-sent:
		cancel()
		t.Fatalf("CREATE_OPEN answered (%v) before the holder's promise was broken", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("the holder's promise on the directory was never broken")
	}
	if _, err := os.Stat(e.path("d/x")); err != nil {
		cancel()
		t.Fatalf("the file is not made while the open waits: %v", err)
	}
	// The client gives up on this try; its retransmission (same xid, same
	// arguments) goes to the restarted server.
	cancel()
	<-sent
	restartGrace(e, time.Hour)

	again := p.createOpenXID(xid, D, "x", nfs3.Guarded, 0, nil)
	ok(t, "CREATE_OPEN retransmitted after the restart", again.Status, nil)
	if !bytes.Equal(again.File, e.lookup(D, "x")) {
		t.Fatalf("the replayed reply names %x; want the file made", again.File)
	}
	if again.Open.Status != nfs3.ErrJukebox {
		t.Fatalf("the replayed reply's open part: %v; want NFS3ERR_JUKEBOX (not granted: the server stopped)", again.Open.Status)
	}
	if again.ServerVerf != verf {
		t.Fatalf("the replayed reply's server verifier %x; want the stopped server's %x", again.ServerVerf, verf)
	}
}

// TestSNFSCreateOpenReplyAfterConnectionLoss: a CREATE_OPEN whose open
// waits for another client's callback while the creator's connection goes
// (its call timed out: the client drops the connection and sends the call
// again, same xid, on a new one) is counted once the callback is answered,
// and its reply, made for a connection that is gone, is kept in the reply
// cache: the retransmission gets it, the open it reports is the one the
// server counts, and after the creator's CLOSE none of its opens is left
// (another client's OPEN for writing may cache). No open stays counted that
// no client knows of.
func TestSNFSCreateOpenReplyAfterConnectionLoss(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	// No recall back-off: the holder's recall must not keep the file from
	// being cached once everyone closed it.
	e := newEnvWith(t, "rw,no_root_squash", func(c *server.Config) { c.Table.RecallBackoff = time.Nanosecond })
	h := newProtoClient(t, e, "createopen-conn-holder")
	b := newProtoClient(t, e, "createopen-conn-other")
	c := newProtoClientWith(t, e, "createopen-conn", func(context.Context, *sunrpc.Call, *xdr.Reader, *xdr.Writer) error { return nil },
		sunrpc.WithTimeout(time.Second))
	h.probed(e, "scratch-h")
	b.probed(e, "scratch-b")
	c.probed(e, "scratch-c")
	if err := os.WriteFile(e.path("held"), []byte("data"), 0o666); err != nil {
		t.Fatal(err)
	}
	fh := e.lookup(e.root, "held")
	h.openCaching(fh, state.Write)
	called, release := make(chan struct{}, 16), make(chan struct{})
	h.setAnswer(func(*snfs1.CallbackArgs) state.Outcome {
		called <- struct{}{}
		<-release
		return state.OK
	})
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()

	mode := uint32(0o644)
	c.mu.Lock()
	args := &snfs1.CreateOpenArgs{Client: c.id, Create: nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: e.root, Name: "held"},
		Mode: nfs3.Unchecked, Attr: nfs3.Sattr{Mode: &mode}}}
	c.mu.Unlock()
	conns := c.connects.Load()
	type answer struct {
		res snfs1.CreateOpenRes
		err error
	}
	done := make(chan answer, 1)
	go func() {
		cx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var a answer
		a.err = c.rpc.Call(cx, snfs1.ProcCreateOpen, args, &a.res)
		done <- a
	}()
	select {
	case <-called:
	case a := <-done:
		t.Fatalf("CREATE_OPEN answered (%v, %v) before the holder was called back", a.res.Status, a.err)
	case <-time.After(30 * time.Second):
		t.Fatal("the holder was never called back")
	}
	// The call times out while the open waits: its connection is dropped
	// and a new one made for the retransmission.
	deadline := time.Now().Add(30 * time.Second)
	for c.connects.Load() == conns {
		select {
		case a := <-done:
			t.Fatalf("CREATE_OPEN answered (%v, open %v, %v) while the holder's callback waits, before its call timed out", a.res.Status, a.res.Open.Status, a.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the creator's connection was never replaced")
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	released = true
	a := <-done
	ok(t, "CREATE_OPEN", a.res.Status, a.err)
	ok(t, "its open", a.res.Open.Status, nil)
	if !bytes.Equal(a.res.File, fh) {
		t.Fatalf("CREATE_OPEN answered %x; want the held file %x", a.res.File, fh)
	}
	c.close(fh, state.Write, false)
	h.close(fh, state.Write, false)
	if w := b.openOrFatal(t, fh, state.Write); !w.CacheEnabled {
		t.Error("another client's OPEN for writing may not cache: an open of the creator's is still counted")
	}
	b.close(fh, state.Write, false)
}

// TestSNFSCreateOpenDeferredReplySavedAtStop: as
// TestSNFSCreateOpenReplySavedAtStop, for a CREATE_OPEN whose reply was
// deferred before its create (an UNCHECKED one truncating a file another
// client caches: that client is called back first) and whose open then
// waits, on a goroutine of the driver's (the parked request's
// continuation), for the break of a promise on the directory when the
// server stops. Before, that wait ended in an RPC SYSTEM_ERR, unsaved.
// Meanwhile the driver serves other requests' callbacks (the review's
// suspicion that the wait blocks it: it holds only its own goroutine).
func TestSNFSCreateOpenDeferredReplySavedAtStop(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	h := newProtoClient(t, e, "createopen-dstop-holder")
	p := newProtoClient(t, e, "createopen-dstop")
	h.probed(e, "scratch-h")
	before := p.createOpen(e.root, "before", nfs3.Guarded)
	ok(t, "CREATE_OPEN", before.Status, nil)
	ok(t, "its open", before.Open.Status, nil)
	p.close(before.File, state.Write, false)
	verf := before.ServerVerf
	if err := os.WriteFile(e.path("held"), []byte("data"), 0o666); err != nil {
		t.Fatal(err)
	}
	fh := e.lookup(e.root, "held")
	h.openCaching(fh, state.Write)
	if err := os.WriteFile(e.path("other"), []byte("data"), 0o666); err != nil {
		t.Fatal(err)
	}
	other := e.lookup(e.root, "other")
	h.openCaching(other, state.Write)
	q := newProtoClient(t, e, "createopen-dstop-reader")
	breaks := newStallBreaks()
	defer close(breaks.release)
	a := dialSNFS(t, e, "createopen-dstop-promise", breaks)
	promise(t, a, e.root)

	mode, zero := uint32(0o644), uint64(0)
	p.mu.Lock()
	args := &snfs1.CreateOpenArgs{Client: p.id, Create: nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: e.root, Name: "held"},
		Mode: nfs3.Unchecked, Attr: nfs3.Sattr{Mode: &mode, Size: &zero}}}
	p.mu.Unlock()
	xid := p.rpc.NextXID()
	cx, cancel := context.WithCancel(context.Background())
	sent := make(chan error, 1)
	go func() {
		var res snfs1.CreateOpenRes
		sent <- p.rpc.CallXID(cx, xid, snfs1.ProcCreateOpen, args, &res)
	}()
	select {
	case <-breaks.called:
	case err := <-sent:
		cancel()
		t.Fatalf("CREATE_OPEN answered (%v) before the promise on the directory was broken", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("the promise on the directory was never broken")
	}
	if len(h.got()) == 0 {
		cancel()
		t.Fatal("the file's holder was not called back before the create")
	}
	if st, err := os.Stat(e.path("held")); err != nil || st.Size() != 0 {
		cancel()
		t.Fatalf("the file is not truncated while the open waits: %v %v", st, err)
	}
	// The wait holds a goroutine of the request's own (a parked request's
	// continuation), not the driver's senders or sweeper: another OPEN
	// that needs a callback is answered meanwhile.
	seen := len(h.got())
	q.openOrFatal(t, other, state.Read)
	called := false
	for _, cb := range h.got()[seen:] {
		called = called || bytes.Equal(cb.File, other)
	}
	if !called {
		cancel()
		t.Fatal("the other file's writer was not called back for the reader's OPEN")
	}
	q.close(other, state.Read, false)
	cancel()
	<-sent
	restartGrace(e, time.Hour)

	again := p.createOpenXID(xid, e.root, "held", nfs3.Unchecked, 0, &zero)
	ok(t, "CREATE_OPEN retransmitted after the restart", again.Status, nil)
	if !bytes.Equal(again.File, fh) || again.ServerVerf != verf || again.Open.Status != nfs3.ErrJukebox {
		t.Fatalf("the replayed reply: file %x, verifier %x, open %v; want %x, the stopped server's %x, NFS3ERR_JUKEBOX",
			again.File, again.ServerVerf, again.Open.Status, fh, verf)
	}
}

// TestSNFSCreateReplySavedAtStop: the same for NFSv3 CREATE, whose reply
// waits for the break of a promise on the directory when the server stops:
// the breaks end with the driver and the reply is saved (the reply cache is
// closed after the driver's stop), so the retransmission after the restart
// gets it rather than NFS3ERR_EXIST for the file it made.
func TestSNFSCreateReplySavedAtStop(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D := permitEnv(t)
	holder := newStallBreaks()
	defer close(holder.release)
	a := dialSNFS(t, e, "create-stop-holder", holder)
	p := newProtoClient(t, e, "create-stop")
	promise(t, a, D)

	mode := uint32(0o644)
	args := &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: D, Name: "x"}, Mode: nfs3.Guarded, Attr: nfs3.Sattr{Mode: &mode}}
	xid := p.rpc.NextXID()
	cx, cancel := context.WithCancel(context.Background())
	sent := make(chan error, 1)
	go func() {
		var res nfs3.CreateRes
		sent <- p.nfs().CallXID(cx, xid, nfs3.ProcCreate, args, &res)
	}()
	select {
	case <-holder.called:
	case err := <-sent:
		cancel()
		t.Fatalf("CREATE answered (%v) before the holder's promise was broken", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("the holder's promise on the directory was never broken")
	}
	cancel()
	<-sent
	restartGrace(e, time.Hour)

	var res nfs3.CreateRes
	cx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	err := p.nfs().CallXID(cx2, xid, nfs3.ProcCreate, args, &res)
	ok(t, "CREATE retransmitted after the restart", res.Status, err)
	if !bytes.Equal(res.Object, e.lookup(D, "x")) {
		t.Fatalf("the replayed reply names %x; want the file made", res.Object)
	}
}
