package tests

import (
	"context"
	"errors"
	"os"
	"snfs/state"
	"testing"
	"time"

	"snfs/client"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/sunrpc"
)

// cbRecorder is a CallbackHandler that answers CB_OK and reports each callback.
type cbRecorder chan state.CallbackMode

func (r cbRecorder) Callback(_ context.Context, _ nfs3.FH, mode state.CallbackMode, _ *nfs3.Fattr) state.Outcome {
	r <- mode
	return state.OK
}

// dialSNFS opens a session to e's server, skipping the test while the server
// does not serve the SNFS program.
func dialSNFS(t *testing.T, e *env, name string, h client.CallbackHandler) *client.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := client.DialSession(ctx, "tcp", e.addr, client.SessionConfig{Name: name, Handler: h, Logger: quietLogger()})
	var re *sunrpc.RPCError
	if errors.As(err, &re) && re.Accept == sunrpc.ProgUnavail {
		t.Skip("the server does not serve the SNFS program yet")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Disconnect() })
	return s
}

// TestSNFSSessionWriteback: A opens a file for writing with caching enabled;
// B's OPEN for reading calls A back (write back, perhaps invalidate) before it
// returns.
func TestSNFSSessionWriteback(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	if err := os.WriteFile(e.path("f"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	cbA := make(cbRecorder, 16)
	a := dialSNFS(t, e, "session-a", cbA)
	b := dialSNFS(t, e, "session-b", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// Until the server's CB_NULL on A's new connection is answered, OPENs
	// answer cache_enabled = false: open and close again until caching is on.
	var fh nfs3.FH
	for {
		var ok *snfs1.OpenOK
		var err error
		fh, ok, err = a.OpenName(ctx, e.root, "f", state.Write)
		if err != nil {
			t.Fatal(err)
		}
		if ok.CacheEnabled {
			break
		}
		if _, err := a.Close(ctx, fh, state.Write, false); err != nil {
			t.Fatal(err)
		}
		if ctx.Err() != nil {
			t.Fatal("A's OPEN never enabled caching")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := b.Open(ctx, fh, state.Read); err != nil {
		t.Fatal(err)
	}
	select {
	case mode := <-cbA:
		if mode != state.Writeback && mode != state.WritebackInvalidate {
			t.Errorf("A was called back with %v; want WRITEBACK or WRITEBACK_INVALIDATE", mode)
		}
	default:
		t.Fatal("B's OPEN returned before A was called back")
	}
	if _, err := b.Close(ctx, fh, state.Read, false); err != nil {
		t.Error(err)
	}
	if _, err := a.Close(ctx, fh, state.Write, false); err != nil {
		t.Error(err)
	}
}

// TestSNFSSessionServerRestart: after the server restarts, the session's next
// call reconnects and registers again, and OnServerRestart runs.
func TestSNFSSessionServerRestart(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	if err := os.WriteFile(e.path("f"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	restarted := make(chan struct{}, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := client.DialSession(ctx, "tcp", e.addr, client.SessionConfig{Name: "session-r", Logger: quietLogger(),
		OnServerRestart: func(bool) { restarted <- struct{}{} }})
	var re *sunrpc.RPCError
	if errors.As(err, &re) && re.Accept == sunrpc.ProgUnavail {
		t.Skip("the server does not serve the SNFS program yet")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer s.Disconnect()
	fh, _, err := s.OpenName(ctx, e.root, "f", state.Read)
	if err != nil {
		t.Fatal(err)
	}
	old := s.ServerVerifier()
	e.restart()
	if _, err := s.Open(ctx, fh, state.Read); err != nil {
		t.Fatal(err)
	}
	select {
	case <-restarted:
	case <-ctx.Done():
		t.Fatal("OnServerRestart did not run")
	}
	if s.ServerVerifier() == old {
		t.Errorf("server verifier %x unchanged after a restart", old)
	}
	if _, err := s.Close(ctx, fh, state.Read, false); err != nil {
		t.Error(err)
	}
}
