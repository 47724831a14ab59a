package client

import (
	"context"
	"sync"
	"sync/atomic"
)

// Hand-back answers before later OPENs (docs/protocol.md 5.1, "CALLBACK").
//
// CB_TREAT_AS_CLOSED and CB_STALE hand the file back: the server drops every
// open it counts for this client of the file when it applies the answer.
// The client decides so only while no OPEN of the file is in flight, and
// the server applies an answer before anything the client sent after it on
// the connection. Between the handler's decision and its answer reaching
// the connection's writer, an application's open could still send an OPEN
// of the file: the server would grant it first (the client's old opens
// still counted) and then drop it with the answer, while the client goes on
// caching under it. Another client's write open was then let in without a
// callback, and the first client's appends, cached under an open the
// server no longer counted, ended as a false conflict copy
// (TestMountSNFSAppendServerKills, CI of 146986e).
//
// So a handler that decides to hand a file back says so (HandingBack, with
// the callback's context), and until the session has handed that answer to
// the connection's writer, no OPEN, OPEN_NAME or CREATE_OPEN is sent: one
// decided after it goes out after it (the writer keeps the order). The wait
// is the few instructions between the decision and the reply's queueing;
// nothing in it waits for an OPEN.

// handBackGate counts the hand-back answers decided and not yet queued.
type handBackGate struct {
	mu   sync.Mutex
	n    int           // guarded by mu
	free chan struct{} // closed when n drops to 0; nil while n == 0; guarded by mu
}

func (g *handBackGate) hold() {
	g.mu.Lock()
	if g.n == 0 {
		g.free = make(chan struct{})
	}
	g.n++
	g.mu.Unlock()
}

func (g *handBackGate) release() {
	g.mu.Lock()
	g.n--
	if g.n == 0 {
		close(g.free)
		g.free = nil
	}
	g.mu.Unlock()
}

// wait returns once no hand-back answer is decided and unqueued (or ctx
// ends): those decided before it was called are queued. (One decided later
// concerns a file with no OPEN in flight, not the caller's, which is in
// flight from before it waits; waiting for it too costs only its queueing.)
func (g *handBackGate) wait(ctx context.Context) error {
	g.mu.Lock()
	ch := g.free
	g.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// handBackKey is the context key of a callback's answer (cbAnswer).
type handBackKey struct{}

// cbAnswer is one callback being served: armed once its handler said it
// hands the file back.
type cbAnswer struct {
	g     *handBackGate
	armed atomic.Bool
}

// HandingBack tells the session serving the callback whose context ctx is
// that its answer will hand the file back (CB_TREAT_AS_CLOSED, CB_STALE):
// the session sends no OPEN until that answer is queued on the connection.
// The handler calls it when it decides, before it lets an OPEN of the file
// begin (for the FUSE client, under the lock its OPENs begin under). A ctx
// that is not a callback's is ignored.
func HandingBack(ctx context.Context) {
	if a, _ := ctx.Value(handBackKey{}).(*cbAnswer); a != nil && a.armed.CompareAndSwap(false, true) {
		a.g.hold()
	}
}

// NotHandingBack takes back a HandingBack of the same callback: its answer
// is decided later (or is not a hand-back), and no OPEN waits meanwhile.
func NotHandingBack(ctx context.Context) {
	if a, _ := ctx.Value(handBackKey{}).(*cbAnswer); a != nil && a.armed.CompareAndSwap(true, false) {
		a.g.release()
	}
}
