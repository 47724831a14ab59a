package fusefs

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// TestReqContext: a request's context ends with the kernel's interrupt and
// with the mount's life, whether Done was asked for before or after; it says
// Canceled when Done is closed; requests leave no goroutine behind.
func TestReqContext(t *testing.T) {
	closed := func(ctx context.Context) bool {
		select {
		case <-ctx.Done():
			return true
		case <-time.After(5 * time.Second):
			return false
		}
	}
	life, stop := context.WithCancel(context.Background())
	defer stop()
	b := &bridge{life: life}

	// Interrupted before anything waits.
	intr := make(chan struct{})
	ctx, end := b.reqCtx(&fuse.Context{Cancel: intr})
	if ctx.Err() != nil {
		t.Fatalf("fresh request: %v", ctx.Err())
	}
	close(intr)
	if !errors.Is(ctx.Err(), context.Canceled) || !closed(ctx) {
		t.Fatalf("interrupted before Done: Err %v", ctx.Err())
	}
	end()

	// Interrupted while waiting.
	intr = make(chan struct{})
	ctx, end = b.reqCtx(&fuse.Context{Cancel: intr})
	done := ctx.Done()
	select {
	case <-done:
		t.Fatal("Done closed without an interrupt")
	default:
	}
	close(intr)
	if !closed(ctx) || !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("interrupted while waiting: Err %v", ctx.Err())
	}
	end()

	// Requests that end without an interrupt leave no goroutine behind (end
	// stops the watcher), whether they waited or not.
	before := runtime.NumGoroutine()
	for i := range 100 {
		ctx, end := b.reqCtx(&fuse.Context{Cancel: make(chan struct{})})
		if i%2 == 0 {
			_ = ctx.Done()
		}
		end()
	}
	for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > before; {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after 100 requests ended, %d before", runtime.NumGoroutine(), before)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// The mount's life ends: every request's context ends.
	intr = make(chan struct{})
	ctx, end = b.reqCtx(&fuse.Context{Cancel: intr})
	defer end()
	_ = ctx.Done()
	stop()
	if !closed(ctx) || !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("life ended: Err %v", ctx.Err())
	}
}

// TestReqContextGrace: an interrupt ends a request only once the request has
// waited the grace (a signal unrelated to a server that does not answer
// must not fail a request served a moment later).
func TestReqContextGrace(t *testing.T) {
	life, stop := context.WithCancel(context.Background())
	defer stop()
	const grace = 300 * time.Millisecond
	b := &bridge{life: life, intrGrace: grace}

	// Interrupted at once, Done asked for afterwards: closed only at the grace.
	intr := make(chan struct{})
	start := time.Now()
	ctx, end := b.reqCtx(&fuse.Context{Cancel: intr})
	close(intr)
	if ctx.Err() != nil {
		t.Fatalf("interrupted within the grace: Err %v, want nil", ctx.Err())
	}
	<-ctx.Done()
	if waited := time.Since(start); waited < grace {
		t.Fatalf("Done closed after %v, before the grace %v", waited, grace)
	}
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("after the grace: Err %v, want Canceled", ctx.Err())
	}
	end()

	// A request that ends within the grace is not cancelled.
	intr = make(chan struct{})
	ctx, end = b.reqCtx(&fuse.Context{Cancel: intr})
	done := ctx.Done()
	close(intr)
	end() // the request was answered
	<-done
	if ctx.Err() == nil {
		t.Fatal("ended request: Err nil")
	}

	// Interrupted after the grace: Done closed from the start.
	intr = make(chan struct{})
	ctx, end = b.reqCtx(&fuse.Context{Cancel: intr})
	defer end()
	time.Sleep(grace)
	close(intr)
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("interrupted past the grace: Err %v, want Canceled", ctx.Err())
	}
	select {
	case <-ctx.Done():
	default:
		t.Fatal("interrupted past the grace: Done not closed")
	}
}
