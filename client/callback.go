package client

import (
	"context"
	"fmt"
	"snfs/state"

	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/sunrpc"
	"snfs/xdr"
)

// CallbackHandler does what a server's CB_CALLBACK asks (docs/protocol.md,
// "CALLBACK"): write the file's dirty data back (mode.WritesBack, with NFSv3
// WRITE and COMMIT on the session's NFS client: the server serves them while
// the callback is out), drop its cached data and stop caching
// (mode.Invalidates), or give the file back (state.Relinquish). It answers only
// once the work is done: state.OK, state.TreatAsClosed (every open of the file
// was a delayed close: the client must send no CLOSE for them and must OPEN
// again), state.Stale (it holds nothing of the file) or state.Pinned; or
// state.Failed when the work could not be done (a write-back that did not
// reach the server): the callback is then answered with an RPC error
// (SYSTEM_ERR), and the server fences the client for the file.
//
// The FUSE client implements it. Callback runs on a goroutine of the session's
// connection, concurrently with other callbacks and with the client's own
// calls; it must not wait for an OPEN of the same file by its own client (the
// server may be holding that OPEN until this callback is answered). ctx ends
// when the connection the callback came on goes away. The answer must come
// within Session.CallbackTimeout, or the server fences the client for the file.
//
// attr is what the CALLBACK carried: nothing from snfs serve, and nothing to
// rely on from any server (docs/protocol.md section 5.1).
type CallbackHandler interface {
	Callback(ctx context.Context, fh nfs3.FH, mode state.CallbackMode, attr *nfs3.Fattr) state.Outcome
}

// callbackProgram is SNFS_CB as a session serves it on its connection: CB_NULL
// (the server's check that the callback path works) and CB_CALLBACK through h.
// A nil h answers CB_STALE to every callback. probed, if not nil, is told of
// each CB_NULL once its reply is handed to the connection: whatever is sent
// on it afterwards goes out after that reply (sunrpc's writer keeps the
// order), so the server has verified the path when it reads it.
func callbackProgram(h CallbackHandler, probed func(*sunrpc.Conn), gate *handBackGate) *sunrpc.Program {
	cb := func(ctx context.Context, call *sunrpc.Call, args *xdr.Reader, res *xdr.Writer) error {
		var a snfs1.CallbackArgs
		if err := a.Decode(args); err != nil {
			return fmt.Errorf("snfs CB_CALLBACK: %w: %w", sunrpc.ErrGarbageArgs, err)
		}
		st := state.Stale
		ans := &cbAnswer{g: gate}
		defer func() {
			if ans.armed.Load() {
				ans.g.release() // after the reply is queued below
			}
		}()
		if h != nil {
			// a.File aliases the request buffer, reused once this returns: the
			// handler gets a copy it may keep.
			st = h.Callback(context.WithValue(ctx, handBackKey{}, ans), append(nfs3.FH(nil), a.File...), a.Mode, a.Attr)
		}
		if st > state.MaxAnswer {
			// The handler could not do the work (its write-back did not
			// reach the server): the callback fails with an RPC error and
			// the server fences this client for the file (docs/protocol.md
			// 5.1), rather than an answer saying done.
			return fmt.Errorf("snfs CB_CALLBACK: %v: %w", st, sunrpc.ErrSystem)
		}
		if ans.armed.Load() && call.Conn != nil {
			// A hand-back: queued on the connection before the OPENs
			// waiting for it are sent (handback.go).
			call.Defer().Reply(func(w *xdr.Writer) error {
				(&snfs1.CallbackRes{Status: st}).Encode(w)
				return nil
			})
			return nil
		}
		(&snfs1.CallbackRes{Status: st}).Encode(res)
		return nil
	}
	granted := func(ctx context.Context, call *sunrpc.Call, args *xdr.Reader, res *xdr.Writer) error {
		var a snfs1.GrantedArgs
		if err := a.Decode(args); err != nil {
			return fmt.Errorf("snfs CB_GRANTED: %w: %w", sunrpc.ErrGarbageArgs, err)
		}
		st := snfs1.GrantedUnwanted
		if g, ok := h.(GrantHandler); ok {
			st = g.Granted(ctx, &a)
		}
		(&snfs1.GrantedRes{Status: st}).Encode(res)
		return nil
	}
	null := func(_ context.Context, call *sunrpc.Call, _ *xdr.Reader, _ *xdr.Writer) error {
		if probed == nil || call.Conn == nil {
			return nil
		}
		call.Defer().Reply(func(*xdr.Writer) error { return nil })
		probed(call.Conn)
		return nil
	}
	return &sunrpc.Program{Name: "SNFS_CB", Number: snfs1.CBProgram,
		Versions: map[uint32][]sunrpc.Proc{snfs1.CBVersion: {
			snfs1.CBProcNull:     {Name: snfs1.CBProcNames[snfs1.CBProcNull], Handler: null, Inline: sunrpc.Always},
			snfs1.CBProcCallback: {Name: snfs1.CBProcNames[snfs1.CBProcCallback], Handler: cb},
			snfs1.CBProcGranted:  {Name: snfs1.CBProcNames[snfs1.CBProcGranted], Handler: granted},
		}}}
}
