package consist

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
	"snfs/sunrpc"
)

var noAuth = sunrpc.OpaqueAuth{Flavor: sunrpc.AuthNone}

// sendCallback sends one CALLBACK in its own goroutine, once a sender slot is
// free: the table's deadline starts when it is written (CallbackSent), so
// callbacks queued behind others do not time out for it. The answer is
// applied by the connection's reader (CallRouted), before anything the client
// sent after it: an OPEN the client sends after answering CB_TREAT_AS_CLOSED
// is not undone by that answer. The table times the callback out (Tick) at
// its deadline; the driver keeps listening for another CallbackTimeout
// without its sender slot, and hands a late answer to the table, which
// applies the ones that are safe to apply (state.Machine.CallbackDone).
func (d *Driver) sendCallback(cb state.Callback) {
	d.sendCallbackTo(cb, func(now time.Time) { d.m.CallbackSent(now, cb) },
		func(now time.Time, o state.Outcome) { d.do(d.m.CallbackDone(now, cb, o)) })
}

// sendCallbackTo is sendCallback for the table whose callback cb is: sent
// reports it written, done how it ended (exactly once).
func (d *Driver) sendCallbackTo(cb state.Callback, sent func(time.Time), done func(time.Time, state.Outcome)) {
	d.goOwned(func() {
		var once sync.Once
		report := func(outcome state.Outcome) {
			once.Do(func() {
				if d.tracing() {
					d.trace("table: callback done", cb.Handle, "client", d.clientName(cb.Client), "mode", cb.Mode, "outcome", outcome)
				}
				done(d.now(), outcome)
			})
		}
		defer report(state.Failed)
		if !d.acquireSender() {
			return
		}
		release := d.releaseAfter(d.cbTimeout)
		defer release()
		conn := d.conn(cb.Client)
		if conn == nil {
			d.log.Info("callback not sent: the client has no connection", "client", d.clientName(cb.Client), "mode", cb.Mode)
			return
		}
		ctx, cancel := context.WithTimeout(d.ctx, 2*d.cbTimeout)
		defer cancel()
		sent(d.now())
		start := time.Now() // for the latency metric: real time
		late := d.clock.AfterFunc(d.cbTimeout, func() { d.met.timeouts.Inc() })
		defer late.Stop()
		var res snfs1.CallbackRes
		var timed atomic.Bool // the answer's round trip was counted (on the reader)
		routed := func(err error) {
			late.Stop()
			if err != nil {
				report(state.Failed)
				return
			}
			// Timed before the outcome is applied: the request waiting for
			// this answer may be answered at once, and a reader of the
			// metrics after it must find the round trip counted.
			timed.Store(true)
			d.met.callbackSent(cb.Mode, time.Since(start), nil)
			report(res.Status) // the decoder accepts only answers (OK to state.MaxAnswer)
		}
		var err error
		for {
			err = conn.CallRouted(ctx, snfs1.CBProgram, snfs1.CBVersion, snfs1.CBProcCallback, noAuth,
				// No attributes (docs/protocol.md section 5.1): read
				// now, they may be stale by the time the client acts.
				&snfs1.CallbackArgs{File: cb.Handle, Mode: cb.Mode}, &res, routed)
			if err == nil || !errors.Is(err, sunrpc.ErrConnClosed) {
				break
			}
			// The connection broke under the call. A client that merely lost
			// its connection registers again at once: the same callback goes
			// to it there, within the same deadline (section 13).
			next := d.rebound(ctx, cb.Client, conn)
			if next == nil {
				break
			}
			d.log.Debug("callback sent again on the client's new connection", "client", d.clientName(cb.Client), "mode", cb.Mode)
			conn = next
		}
		if err != nil && !timed.Load() {
			d.met.callbackSent(cb.Mode, time.Since(start), err)
		}
		if err != nil {
			d.log.Info("callback failed", "client", d.clientName(cb.Client), "mode", cb.Mode, "err", err)
		}
	})
}

// releaseAfter gives the sender slot back after dl, or when the returned
// function is called, whichever comes first: the slots bound the callbacks
// being sent and answered in time, not the ones waited for past their
// deadline.
func (d *Driver) releaseAfter(dl time.Duration) func() {
	var once sync.Once
	release := func() { once.Do(func() { <-d.senders }) }
	t := d.clock.AfterFunc(dl, release)
	return func() {
		t.Stop()
		release()
	}
}

// rebound waits, until ctx ends, for table client c to have a callback path
// other than old (its connection that broke, or nil), and returns it; nil if
// none came or c is gone.
func (d *Driver) rebound(ctx context.Context, c state.ClientID, old *sunrpc.Conn) *sunrpc.Conn {
	for {
		d.mu.RLock()
		cl := d.byMid[c]
		if cl == nil {
			d.mu.RUnlock()
			return nil
		}
		conn, bound := cl.conn, cl.bound
		d.mu.RUnlock()
		if conn != nil && conn != old {
			return conn
		}
		if conn == old {
			// Not unbound yet (the connection's close is being handled):
			// bound is still the old, closed channel.
			bound = nil
		}
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-bound:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil
		}
		t.Stop()
	}
}

// sendProbe sends a CB_NULL to c in its own goroutine and reports whether its
// callback path answered. The answer is applied by the connection's reader
// (CallRouted): an OPEN the client sends after answering finds its path
// verified. The probe has no deadline of its own: it waits for the answer as
// long as c keeps that callback path (its sender slot only for
// CallbackTimeout), so a late answer still verifies the path; meanwhile the
// client's OPENs get no caching, and no second probe is sent. When the path
// moves to a new connection (a REGISTER) the probe goes again there; it fails
// when the client has no connection for CallbackTimeout, or is gone.
func (d *Driver) sendProbe(c state.ClientID) {
	d.goOwned(func() {
		var once sync.Once
		report := func(ok bool) {
			once.Do(func() { d.m.CallbackPathVerified(d.now(), c, ok) })
		}
		defer report(false)
		if !d.acquireSender() {
			return
		}
		release := d.releaseAfter(d.cbTimeout)
		defer release()
		var answered atomic.Bool // set by the connection's reader
		var old *sunrpc.Conn
		for {
			wctx, cancel := context.WithTimeout(d.ctx, d.cbTimeout)
			conn := d.rebound(wctx, c, old)
			cancel()
			if conn == nil {
				return
			}
			pctx, stop := d.whileBound(c, conn)
			err := conn.CallRouted(pctx, snfs1.CBProgram, snfs1.CBVersion, snfs1.CBProcNull, noAuth, nil, nil,
				func(err error) { answered.Store(true); report(err == nil) })
			moved := pctx.Err() != nil && d.ctx.Err() == nil
			stop()
			if err == nil || answered.Load() || d.ctx.Err() != nil {
				return
			}
			if !moved && !errors.Is(err, sunrpc.ErrConnClosed) {
				d.log.Info("callback path probe failed: no caching for this client until one answers", "client", d.clientName(c), "err", err)
				return
			}
			old = conn
		}
	})
}

func (d *Driver) acquireSender() bool {
	select {
	case d.senders <- struct{}{}:
		return true
	case <-d.ctx.Done():
		return false
	}
}

func (d *Driver) attrOf(handle []byte) *nfs3.Fattr {
	if d.attr == nil {
		return nil
	}
	return d.attr(handle)
}
