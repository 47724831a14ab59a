package consist

import (
	"context"
	"fmt"
	"time"

	"snfs/snfs1"
	"snfs/state"
	"snfs/sunrpc"
)

// Register records a REGISTER that came on conn: the client's id (durable: the
// same for the same name and boot verifier), and conn as its callback path. A
// new boot verifier for a known name means the client restarted: its old
// registration's opens and records are forgotten and it gets a new id.
func (d *Driver) Register(conn *sunrpc.Conn, name []byte, verf snfs1.Verifier) (snfs1.ClientID, error) {
	if conn == nil {
		return 0, fmt.Errorf("consist: REGISTER needs a connection to call back on (TCP)")
	}
	rec, _, err := d.rec.register(string(name), verf)
	if err != nil {
		return 0, err
	}
	d.endOldInstance(string(name), rec.id, conn)
	d.mu.Lock()
	var gone state.ClientID
	if old := d.byName[string(name)]; old != nil && old.id != rec.id {
		gone = old.mid
		d.unbindLocked(old, old.conn)
		delete(d.byID, old.id)
		delete(d.byMid, old.mid)
		d.dropCallersLocked(old)
	}
	cl := d.byID[rec.id]
	if cl == nil {
		d.nextMid++
		cl = &client{id: rec.id, mid: d.nextMid, name: string(name), bound: make(chan struct{}), permits: rec.permits,
			conns: map[*sunrpc.Conn]struct{}{}}
		d.byID[rec.id] = cl
		d.byMid[cl.mid] = cl
	}
	d.byName[string(name)] = cl
	if cl.conn != conn {
		d.unbindLocked(cl, cl.conn)
		cl.conn, cl.unbound = conn, make(chan struct{})
		close(cl.bound)
	}
	newConn := d.callers[conn] != cl
	if newConn {
		d.callers[conn] = cl
		cl.conns[conn] = struct{}{}
	}
	d.active.Store(true)
	d.mu.Unlock()
	conn.OnClose(func() {
		d.mu.Lock()
		d.unbindLocked(cl, conn)
		d.mu.Unlock()
	})
	if newConn {
		conn.OnServed(func() {
			d.mu.Lock()
			if d.callers[conn] == cl {
				delete(d.callers, conn)
			}
			delete(cl.conns, conn)
			d.mu.Unlock()
		})
	}
	now := d.now()
	if gone != 0 {
		d.log.Info("client restarted: its previous registration is forgotten", "client", string(name))
		d.do(d.m.ClientGone(now, gone))
		d.clientGone(gone)
	}
	d.do(d.m.Register(now, cl.mid))
	d.registeredInGrace(string(name), rec.id)
	return rec.id, nil
}

// Unregister applies an UNREGISTER of registration id (a clean unmount): the
// record is deleted durably, so that the next restart does not wait for the
// client, and its opens are closed as by CLOSE (it wrote everything back
// first). Its connection stays, as a plain client's.
func (d *Driver) Unregister(id snfs1.ClientID) error {
	d.mu.RLock()
	cl := d.byID[id]
	d.mu.RUnlock()
	if cl == nil {
		return ErrStaleClientID
	}
	if err := d.rec.unregister(map[string]snfs1.ClientID{cl.name: id}); err != nil {
		return err
	}
	d.mu.Lock()
	if d.byID[id] != cl { // registered again meanwhile
		d.mu.Unlock()
		return nil
	}
	d.unbindLocked(cl, cl.conn)
	delete(d.byID, id)
	delete(d.byMid, cl.mid)
	if d.byName[cl.name] == cl {
		delete(d.byName, cl.name)
	}
	d.dropCallersLocked(cl) // its connection stays, a plain client's
	d.mu.Unlock()
	d.log.Debug("client unregistered", "client", cl.name, "clientid", id)
	d.do(d.m.ClientGone(d.now(), cl.mid))
	d.clientGone(cl.mid)
	d.unregisteredInGrace(id)
	return nil
}

// oldInstanceWait bounds how long a REGISTER of a restarted client waits for
// the calls its old instance's connections are still serving (endOldInstance),
// beyond the callback timeout that bounds what they may wait for.
const oldInstanceWait = 2 * time.Second

// endOldInstance: a REGISTER of name with registration id, on conn, may come
// from a restarted instance of a client whose old registration is still
// known. Before that registration is forgotten (its opens, its record as a
// file's last writer), its connections are closed, so that no call of the
// old instance is read any more, and the calls they were serving are waited
// for, still counted as the old instance's (Driver.callers). Otherwise a call
// the old instance sent before it died, still in the network or in a
// handler, was applied afterwards as a plain NFSv3 client's: a write-back's
// SETATTR or WRITE then dropped the file's version (docs/protocol.md 9), and
// the new instance, finding the file changed under a version it no longer
// had, took its own cut-off write-back for another client's change (a
// conflict copy, the acknowledged data beside a half-written file). The wait
// is bounded: what a call may wait for (a callback, the file's queue) ends by
// the callback timeout.
func (d *Driver) endOldInstance(name string, id snfs1.ClientID, conn *sunrpc.Conn) {
	d.mu.RLock()
	var conns []*sunrpc.Conn
	if old := d.byName[name]; old != nil && old.id != id {
		for c := range old.conns {
			if c != conn {
				conns = append(conns, c)
			}
		}
	}
	d.mu.RUnlock()
	if len(conns) == 0 {
		return
	}
	for _, c := range conns {
		c.Close()
	}
	expired := make(chan struct{})
	t := d.clock.AfterFunc(d.cbTimeout+oldInstanceWait, func() { close(expired) })
	defer t.Stop()
	for _, c := range conns {
		select {
		case <-c.Served():
		case <-expired:
			d.log.Warn("client restarted: calls of its old instance still run; from now on they count as a plain client's", "client", name)
			return
		case <-d.ctx.Done():
			return
		}
	}
}

// dropCallersLocked forgets that cl's connections' calls are cl's (it
// unregistered, or a new instance replaced it): calls still read on them are
// a plain client's. mu held.
func (d *Driver) dropCallersLocked(cl *client) {
	for c := range cl.conns {
		if d.callers[c] == cl {
			delete(d.callers, c)
		}
	}
	clear(cl.conns)
}

// unbindLocked takes conn away from cl if it is cl's callback path. mu held.
func (d *Driver) unbindLocked(cl *client, conn *sunrpc.Conn) {
	if conn == nil || cl.conn != conn {
		return
	}
	cl.conn = nil
	cl.bound = make(chan struct{})
	close(cl.unbound)
}

// whileBound returns a context that ends when conn stops being table client
// c's callback path (or the driver stops); cancel it when done.
func (d *Driver) whileBound(c state.ClientID, conn *sunrpc.Conn) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(d.ctx)
	d.mu.RLock()
	var unbound chan struct{}
	if cl := d.byMid[c]; cl != nil && cl.conn == conn {
		unbound = cl.unbound
	}
	d.mu.RUnlock()
	if unbound == nil {
		cancel()
		return ctx, cancel
	}
	d.goOwned(func() {
		select {
		case <-unbound:
			cancel()
		case <-ctx.Done():
		}
	})
	return ctx, cancel
}

// Client returns the table client of a registration, or ErrStaleClientID.
func (d *Driver) Client(id snfs1.ClientID) (state.ClientID, error) {
	d.mu.RLock()
	cl := d.byID[id]
	d.mu.RUnlock()
	if cl == nil {
		return 0, ErrStaleClientID
	}
	return cl.mid, nil
}

// Caller returns the table client an NFSv3 call comes from: the protocol client
// registered on its connection, or else the plain client at its address.
func (d *Driver) Caller(call *sunrpc.Call) state.ClientID {
	d.mu.RLock()
	if call.Conn != nil {
		if cl := d.callers[call.Conn]; cl != nil {
			d.mu.RUnlock()
			return cl.mid
		}
	}
	ip := call.ClientIP().String()
	mid, ok := d.plain[ip]
	d.mu.RUnlock()
	if ok {
		return mid
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if mid, ok := d.plain[ip]; ok {
		return mid
	}
	d.nextMid++
	d.plain[ip] = d.nextMid
	return d.nextMid
}

// conn waits until the table client c has a callback path, for at most the
// callback timeout, and returns it (nil: none came).
func (d *Driver) conn(c state.ClientID) *sunrpc.Conn {
	ctx, cancel := context.WithTimeout(d.ctx, d.cbTimeout)
	defer cancel()
	return d.rebound(ctx, c, nil)
}

// clientName names a table client for the log.
func (d *Driver) clientName(c state.ClientID) string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if cl := d.byMid[c]; cl != nil {
		return cl.name
	}
	for ip, mid := range d.plain {
		if mid == c {
			return ip
		}
	}
	return fmt.Sprint(c)
}
