package consist

import (
	"context"
	"errors"
	"time"

	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
	"snfs/sunrpc"
)

var noAuth = sunrpc.OpaqueAuth{Flavor: sunrpc.AuthNone}

// sendCallback sends one CALLBACK in its own goroutine, once a sender slot is
// free: the table's deadline starts when it is written (CallbackSent), so
// callbacks queued behind others do not time out for it.
func (d *Driver) sendCallback(cb state.Callback) {
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		outcome := state.Failed
		defer func() {
			if d.tracing() {
				d.trace("table: callback done", cb.Handle, "client", d.clientName(cb.Client), "mode", cb.Mode, "outcome", outcome)
			}
			d.do(d.m.CallbackDone(time.Now(), cb, outcome))
		}()
		if !d.acquireSender() {
			return
		}
		defer func() { <-d.senders }()
		conn := d.conn(cb.Client)
		if conn == nil {
			d.log.Info("callback not sent: the client has no connection", "client", d.clientName(cb.Client), "mode", cb.Mode)
			return
		}
		var attr = d.attrOf(cb.Handle)
		ctx, cancel := context.WithTimeout(d.ctx, d.cbTimeout)
		defer cancel()
		d.m.CallbackSent(time.Now(), cb)
		start := time.Now()
		var res snfs1.CallbackRes
		var err error
		for {
			err = conn.Call(ctx, snfs1.CBProgram, snfs1.CBVersion, snfs1.CBProcCallback, noAuth,
				&snfs1.CallbackArgs{File: cb.Handle, Mode: snfs1.CallbackMode(cb.Mode), Attr: attr}, &res)
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
		d.met.callbackSent(cb.Mode, time.Since(start), err)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				d.met.timeouts.Inc()
			}
			d.log.Info("callback failed", "client", d.clientName(cb.Client), "mode", cb.Mode, "err", err)
			return
		}
		switch res.Status {
		case snfs1.CBOK:
			outcome = state.OK
		case snfs1.CBTreatAsClosed:
			outcome = state.TreatAsClosed
		case snfs1.CBStale:
			outcome = state.Stale
		case snfs1.CBPinned:
			outcome = state.Pinned
		}
	}()
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
// callback path answered.
func (d *Driver) sendProbe(c state.ClientID) {
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		ok := false
		defer func() { d.m.CallbackPathVerified(time.Now(), c, ok) }()
		if !d.acquireSender() {
			return
		}
		defer func() { <-d.senders }()
		conn := d.conn(c)
		if conn == nil {
			return
		}
		ctx, cancel := context.WithTimeout(d.ctx, d.cbTimeout)
		defer cancel()
		err := conn.Call(ctx, snfs1.CBProgram, snfs1.CBVersion, snfs1.CBProcNull, noAuth, nil, nil)
		if err != nil {
			d.log.Info("callback path probe failed: no caching for this client until one answers", "client", d.clientName(c), "err", err)
		}
		ok = err == nil
	}()
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
