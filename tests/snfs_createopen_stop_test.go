package tests

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
)

// CREATE_OPEN whose open part is still waiting when the server stops
// (docs/protocol.md 4.21): the file is made, so the reply must outlive the
// server like any saved reply.

// stallBreaks is a session's callback handler that records each callback
// and answers none until release is closed (or the callback's context ends).
type stallBreaks struct {
	called  chan nfs3.FH
	release chan struct{}
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
	e := newEnv(t, "rw,no_root_squash")
	if err := os.Mkdir(e.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	D := e.lookup(e.root, "d")
	holder := &stallBreaks{called: make(chan nfs3.FH, 16), release: make(chan struct{})}
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
