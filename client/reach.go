package client

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"snfs/sunrpc"
)

// Reach is what a client knows of whether it reaches its server, for
// `snfs status` (docs/mount.md, "Status"): it is connected while a
// connection to the server is open (its connect hook, a session's REGISTER
// included, succeeded, and it has not closed) and the server watch does not
// take the server as not responding (calls waited NotRespondingAfter with
// none answered). It makes no call of its own: an idle client whose server
// hangs without closing the connection is taken as connected until a call
// waits. It is fed by the connection's hooks (Hook, a Session's own) and the
// watch (TrackServerState), and read by State; safe for concurrent use.
type Reach struct {
	addr string
	now  func() time.Time

	mu         sync.Mutex
	conn       uint64    // the open connection's ID; 0: none
	hung       bool      // the watch took the server as not responding
	connected  bool      // conn != 0 && !hung, as last published
	since      time.Time // when connected last changed (or NewReach)
	reason     string    // why not connected: the latest cause seen
	restarts   int       // server restarts seen (a session's REGISTER said so)
	recovering bool      // from a restart seen until the client's recovery ended
	offline    time.Time // since when the client serves from its cache alone (SetOffline); zero: not
}

// ReachState is a Reach at one moment.
type ReachState struct {
	Addr      string
	Connected bool
	// Since is when Connected last changed (the client's start, before any
	// change).
	Since time.Time
	// Reason says why the client is not connected ("" when it is): the
	// connection closed, the server not responding, the error of the
	// latest attempt to connect again.
	Reason string
	// Recovering: the server restarted and this client has not finished
	// its recovery (a session's reclaim, and what the client does after it:
	// SessionConfig.OnServerRestart).
	Recovering bool
	// ServerRestarts counts the server restarts this client has seen.
	ServerRestarts int
	// Offline: the client took the server as gone and serves what it has
	// cached, failing the rest at once (a mount's disconnected operation,
	// docs/mount.md), since OfflineSince.
	Offline      bool
	OfflineSince time.Time
}

// NewReach returns a Reach of the server at addr, not connected yet.
func NewReach(addr string) *Reach {
	r := &Reach{addr: addr, now: time.Now}
	r.since = r.now()
	r.reason = "not connected yet"
	return r
}

// State returns the client's reachability now.
func (r *Reach) State() ReachState {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := ReachState{Addr: r.addr, Connected: r.connected, Since: r.since,
		Recovering: r.recovering, ServerRestarts: r.restarts, Offline: !r.offline.IsZero(), OfflineSince: r.offline}
	if !r.connected {
		st.Reason = r.reason
	}
	return st
}

// publishLocked recomputes connected, moving since when it changes.
func (r *Reach) publishLocked() {
	c := r.conn != 0 && !r.hung
	if c != r.connected {
		r.connected, r.since = c, r.now()
	}
}

// up: connection id opened and its connect hook succeeded.
func (r *Reach) up(id uint64) {
	r.mu.Lock()
	r.conn = id
	r.publishLocked()
	r.mu.Unlock()
}

// down: connection id closed. A connection that is no longer the current
// one (its successor already up) changes nothing.
func (r *Reach) down(id uint64) {
	r.mu.Lock()
	if r.conn == id {
		r.conn = 0
		r.reason = "connection to " + r.addr + " closed"
		r.publishLocked()
	}
	r.mu.Unlock()
}

// failed: an attempt to connect again failed with err (the reason shown
// while not connected).
func (r *Reach) failed(err error) {
	r.mu.Lock()
	if r.conn == 0 && err != nil {
		r.reason = err.Error()
	}
	r.mu.Unlock()
}

// watched is the server watch's report (sunrpc.WithServerWatch).
func (r *Reach) watched(down bool) {
	r.mu.Lock()
	r.hung = down
	if down {
		r.reason = "server " + r.addr + " not responding"
	}
	r.publishLocked()
	r.mu.Unlock()
}

// restarted: the server restarted; the client's recovery begins.
func (r *Reach) restarted() {
	r.mu.Lock()
	r.restarts++
	r.recovering = true
	r.mu.Unlock()
}

// recovered returns what to call when the client's recovery from the
// latest restart seen ends: it ends the recovery unless the server
// restarted again meanwhile (that restart's recovery ends it).
func (r *Reach) recovered() (done func()) {
	r.mu.Lock()
	gen := r.restarts
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		if r.restarts == gen {
			r.recovering = false
		}
		r.mu.Unlock()
	}
}

// Hook is a connect hook (sunrpc.WithOnConnect) for a plain client (nfs
// mode's NFS connection): it runs next (if not nil), then takes the
// connection as up until it closes.
func (r *Reach) Hook(next func(ctx context.Context, c *sunrpc.Conn) error) func(ctx context.Context, c *sunrpc.Conn) error {
	return func(ctx context.Context, c *sunrpc.Conn) error {
		if next != nil {
			if err := next(ctx, c); err != nil {
				return err
			}
		}
		r.connOpened(c)
		return nil
	}
}

// connOpened takes c as the open connection until it closes.
func (r *Reach) connOpened(c *sunrpc.Conn) {
	id := c.ID()
	r.up(id)
	c.OnClose(func() { r.down(id) })
}

// TrackServerState is LogServerState that also tells r (if not nil) when
// the server stops answering and when it answers again.
func TrackServerState(log *slog.Logger, addr string, after time.Duration, r *Reach) sunrpc.DialOption {
	if after == 0 {
		after = NotRespondingAfter
	}
	return sunrpc.WithServerWatch(after, func(down bool, d time.Duration) {
		if down {
			log.Warn("server "+addr+" not responding, still trying", "waited", d.Round(time.Millisecond))
		} else {
			log.Info("server "+addr+" OK", "unanswered_for", d.Round(time.Millisecond))
		}
		if r != nil {
			r.watched(down)
		}
	})
}

// Reach returns whether the session reaches its server now: its connection
// (registered on), the server watch, and its recovery after a server restart.
func (s *Session) Reach() ReachState { return s.reach.State() }

// SetOffline records that the client's user took the server as gone (true,
// since now) or back (false): a mount's disconnected operation.
func (r *Reach) SetOffline(off bool) {
	r.mu.Lock()
	switch {
	case off && r.offline.IsZero():
		r.offline = r.now()
	case !off:
		r.offline = time.Time{}
	}
	r.mu.Unlock()
}

// SetOffline is the session's Reach's SetOffline.
func (s *Session) SetOffline(off bool) { s.reach.SetOffline(off) }
