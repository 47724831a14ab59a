package consist

import (
	"context"
	"fmt"

	"snfs/snfs1"
	"snfs/state"
	"snfs/xdr"
)

// OnClientGone sets fn to be called with a registration's table client when
// the registration ends: UNREGISTER, or a REGISTER under the same name with a
// new boot verifier (the client restarted). The lock driver releases the
// client's locks then (docs/protocol.md, "LOCK"). Set it before serving.
func (d *Driver) OnClientGone(fn func(state.ClientID)) { d.gone = fn }

func (d *Driver) clientGone(c state.ClientID) {
	d.doDirs(d.dirs.ClientGone(d.now(), c))
	d.doPermits(d.permits.ClientGone(d.now(), c))
	if d.gone != nil {
		d.gone(c)
	}
}

// Registered reports whether table client c is a protocol client's live
// registration.
func (d *Driver) Registered(c state.ClientID) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.byMid[c] != nil
}

// CallClient makes one call of the callback program on table client c's
// callback path (CB_GRANTED), waiting for a path for at most the callback
// timeout (or until ctx ends). The answer is decoded into res.
func (d *Driver) CallClient(ctx context.Context, c state.ClientID, proc uint32, args xdr.Encoder, res xdr.Decoder) error {
	wctx, cancel := context.WithTimeout(ctx, d.cbTimeout)
	conn := d.rebound(wctx, c, nil)
	cancel()
	if conn == nil {
		return fmt.Errorf("consist: client %s has no callback path", d.clientName(c))
	}
	err := conn.Call(ctx, snfs1.CBProgram, snfs1.CBVersion, proc, noAuth, args, res)
	if err != nil {
		return fmt.Errorf("consist: %s to %s: %w", snfs1.CBProcNames[proc], d.clientName(c), err)
	}
	return nil
}
