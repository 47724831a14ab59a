package tests

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"snfs/client"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
)

// pinnedHandler is a pinned holder's callback handler: at each CB_WRITEBACK it
// sends what its kernel wrote into its cache since the last one (here: one
// WRITE of held bytes, once) and answers CB_PINNED.
type pinnedHandler struct {
	mu    sync.Mutex
	n     *client.NFS
	fh    nfs3.FH
	held  []byte // written by the holder's application, not sent yet
	calls int
}

func (p *pinnedHandler) Callback(ctx context.Context, fh nfs3.FH, mode state.CallbackMode, _ *nfs3.Fattr) state.Outcome {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if p.held != nil && bytes.Equal(fh, p.fh) {
		res, err := p.n.Write(ctx, p.fh, 0, p.held, nfs3.FileSync)
		if err != nil || res.Status != nfs3.OK {
			return state.Failed
		}
		p.held = nil
	}
	return state.Pinned
}

// TestSNFSGracePinnedHolder: A is a pinned holder of f (docs/protocol.md
// 10.1): its application wrote bytes its client has not sent; B has f open
// for writing beside it. The server restarts. B reclaims first: its WRITE of f
// waits for the end of grace (JUKEBOX), since A, not back yet, may hold bytes
// B's must not be overwritten by (7.1). Once A has reclaimed (caching and
// dirty, as a pinned holder reports itself), B's WRITE calls A back first:
// A's held bytes reach the server before B's, and the file ends with B's,
// the later write. Before, B's WRITE was served during grace, and after it
// (A reclaimed as a plain caching writer) A's bytes went later over B's.
func TestSNFSGracePinnedHolder(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	f := snfsCreate(t, e, "pinned")
	h := &pinnedHandler{fh: f, held: bytes.Repeat([]byte("A"), 100)}
	a := dialGrace(t, e, "pinned-a", h)
	b := dialGrace(t, e, "pinned-b", nil)
	h.n = a.NFS()
	// What the two held before the restart, as each reports it: A a caching
	// writer with dirty data (a pinned holder reports so), B a non-caching
	// writer.
	a.items = []snfs1.ReclaimItem{{File: f, Writers: 1, Caching: true, Dirty: true, Version: 1}}
	b.items = []snfs1.ReclaimItem{{File: f, Writers: 1, Version: 1}}
	a.holding.Store(true) // A reconnects but reclaims only when let
	restartGrace(e, time.Hour)
	if b.comeBack(t) {
		t.Fatal("b's reclaim refused")
	}
	write := func() nfs3.Status {
		t.Helper()
		res, err := b.NFS().Write(ctx, f, 0, bytes.Repeat([]byte("B"), 100), nfs3.FileSync)
		if err != nil {
			t.Fatal(err)
		}
		return res.Status
	}
	if st := write(); st != nfs3.ErrJukebox {
		t.Fatalf("B's WRITE of a file it reclaimed without caching, during grace with A not back: %v; want NFS3ERR_JUKEBOX", st)
	}
	close(a.hold)
	if a.comeBack(t) {
		t.Fatal("a's reclaim refused")
	}
	waitGrace(t, e)
	if st := write(); st != nfs3.OK {
		t.Fatalf("B's WRITE after grace: %v", st)
	}
	h.mu.Lock()
	calls, held := h.calls, h.held
	h.mu.Unlock()
	if calls == 0 || held != nil {
		t.Fatalf("B's WRITE went on without A's write-back first (A called back %d times, %d bytes still held)", calls, len(held))
	}
	res, err := e.nfs.Read(ctx, f, 0, 200)
	if err != nil || res.Status != nfs3.OK {
		t.Fatal(res.Status, err)
	}
	if !bytes.Equal(res.Data, bytes.Repeat([]byte("B"), 100)) {
		t.Fatalf("the file holds %q; want B's bytes (written last)", res.Data)
	}
}
