package cachemgr

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"snfs/nfs3"
	"snfs/state"
)

// TestDiscGate: the call gate of a disconnected-operation mount, without a
// server: NULL always goes; online, a call (NULL too) runs under a context
// that going offline cuts, and the cut call's error becomes ErrDisconnected; offline,
// a call is refused unsent; an answered call moves lastOK.
func TestDiscGate(t *testing.T) {
	d := newDisc(time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx := context.Background()
	if _, _, err := d.gate(ctx, 1, 1, 0); err != nil {
		t.Fatalf("NULL online: %v", err)
	}
	gctx, end, err := d.gate(ctx, 1, 1, 5)
	if err != nil {
		t.Fatal(err)
	}
	// An hour old: the answer's time differs from it without waiting for
	// the clock to tick.
	before := time.Now().Add(-time.Hour).UnixNano()
	d.lastOK.Store(before)
	if err := end(nil); err != nil || d.lastOK.Load() == before {
		t.Fatalf("an answered call: end %v, lastOK moved %v", err, d.lastOK.Load() != before)
	}
	if gctx.Err() == nil {
		t.Fatal("the gate's context outlives its call's end")
	}
	// In flight as the mount goes offline: a call, and a NULL (a lease
	// renewal's).
	gctx, end, err = d.gate(ctx, 1, 1, 5)
	if err != nil {
		t.Fatal(err)
	}
	nullCtx, nullEnd, err := d.gate(ctx, 1, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	d.off.Store(true)
	d.endCut()
	d.mu.Unlock()
	for _, c := range []context.Context{gctx, nullCtx} {
		select {
		case <-c.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("a call in flight was not cut when the mount went offline")
		}
	}
	if err := end(gctx.Err()); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("the cut call's error: %v; want ErrDisconnected", err)
	}
	if err := nullEnd(nullCtx.Err()); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("a NULL in flight as the mount went offline: error %v; want ErrDisconnected", err)
	}
	if _, _, err := d.gate(ctx, 1, 1, 5); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("a call offline: %v; want ErrDisconnected, unsent", err)
	}
	if _, _, err := d.gate(ctx, 1, 1, 0); err != nil {
		t.Fatalf("NULL offline (the probe): %v", err)
	}
	// A call cut by its own context (an interrupt) keeps that error.
	d.mu.Lock()
	d.cut, d.endCut = context.WithCancel(context.Background())
	d.off.Store(false)
	d.mu.Unlock()
	cctx, cancel := context.WithCancel(ctx)
	gctx, end, _ = d.gate(cctx, 1, 1, 5)
	cancel()
	if err := end(gctx.Err()); !errors.Is(err, context.Canceled) {
		t.Fatalf("a call its caller cancelled: %v; want context.Canceled", err)
	}
}

// TestDiscOwed: CLOSEs are owed only for ErrDisconnected, and a server
// restart drops them.
func TestDiscOwed(t *testing.T) {
	d := newDisc(time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)))
	fh := nfs3.FH{1, 2, 3}
	if d.owe(fh, state.Read, false, errors.New("other")) || d.owe(fh, state.Read, false, nil) {
		t.Fatal("a CLOSE owed for an error other than ErrDisconnected")
	}
	if !d.owe(fh, state.Write, true, ErrDisconnected) || len(d.owed) != 1 || !d.owed[0].dirty || d.owed[0].mode != state.Write {
		t.Fatalf("owed: %+v", d.owed)
	}
	fh[0] = 9 // the record keeps its own copy
	if d.owed[0].fh[0] != 1 {
		t.Fatal("the owed CLOSE shares the caller's handle")
	}
	d.dropOwed()
	if len(d.owed) != 0 {
		t.Fatal("dropOwed kept them")
	}
	var nd *discState
	if nd.owe(fh, state.Read, false, ErrDisconnected) || nd.offline() || nd.wroteOffline(fh, true) {
		t.Fatal("a mount without disconnected operation owes or is offline")
	}
	nd.dropOwed()
	nd.noteWrite(fh)
}
