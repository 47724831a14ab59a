package sunrpc

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestCallGate: a call the gate refuses is not sent (the non-idempotent
// COUNT does not count) and fails with the gate's error; a call let through
// runs under the gate's context (cut, it ends early) and end is given the
// call's own error (nil for an answered call, the context's for a cut one)
// and returns what the caller gets.
func TestCallGate(t *testing.T) {
	echoing := make(chan uint32, 1)
	_, addr, counter := testServerEchoing(t, echoing)
	refuse := errors.New("refused by the gate")
	cutErr := errors.New("cut by the gate")
	var closed atomic.Bool
	var cut atomic.Pointer[context.CancelFunc]
	var seen []error
	var seenProcs []uint32
	gate := func(ctx context.Context, prog, vers, proc uint32) (context.Context, func(error) error, error) {
		if closed.Load() {
			return nil, nil, refuse
		}
		gctx, cancel := context.WithCancel(ctx)
		cut.Store(&cancel)
		return gctx, func(err error) error {
			seen, seenProcs = append(seen, err), append(seenProcs, proc)
			if err != nil && gctx.Err() != nil && ctx.Err() == nil {
				return cutErr
			}
			return err
		}, nil
	}
	c := dial(t, "tcp", addr, 3, WithCallGate(gate))
	ctx := context.Background()
	var res u32res
	if err := c.Call(ctx, 2, u32(0), &res); err != nil || res.v != 1 {
		t.Fatalf("COUNT through the gate: %v, %d", err, res.v)
	}
	if len(seen) != 1 || seen[0] != nil || seenProcs[0] != 2 {
		t.Fatalf("end saw %v for procs %v; want one nil for proc 2", seen, seenProcs)
	}
	// Cut while in flight: ECHO sleeps 2 s on the server; cut once its
	// handler has begun.
	go func() {
		<-echoing
		(*cut.Load())()
	}()
	start := time.Now()
	err := c.Call(ctx, 1, u32(2000), &res)
	if !errors.Is(err, cutErr) || time.Since(start) > time.Second {
		t.Fatalf("a cut call: %v after %v; want the gate's error at once", err, time.Since(start))
	}
	if len(seen) != 2 || !errors.Is(seen[1], context.Canceled) {
		t.Fatalf("end saw %v; want the cut call's context error second", seen)
	}
	closed.Store(true)
	if err := c.Call(ctx, 2, u32(0), &res); !errors.Is(err, refuse) {
		t.Fatalf("a refused call: %v; want the gate's error", err)
	}
	closed.Store(false)
	if err := c.Call(ctx, 2, u32(0), &res); err != nil || res.v != 2 || counter.Load() != 2 {
		t.Fatalf("COUNT after the refused one: %v, %d (counter %d); want 2: the refused call was not sent", err, res.v, counter.Load())
	}
}
