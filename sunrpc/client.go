package sunrpc

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"snfs/xdr"
)

// ErrClientClosed is returned by calls on a closed Client.
var ErrClientClosed = errors.New("sunrpc: client closed")

// Client calls programs at one address over one connection at a time, and serves
// the calls its server sends back on that connection (WithPrograms). It is safe
// for concurrent use: on TCP any number of calls share the connection and replies
// are matched by xid. A call whose connection breaks, or that gets no reply within
// the timeout, is sent again with the same xid (on a new connection for TCP), so
// that the server's duplicate request cache recognises it. Calls end when their
// context does.
//
// A Client has a default program and version (Dial's); Program returns a view of
// the same connection for another one, so NFS, MOUNT and a side protocol share
// one connection.
type Client struct {
	*transport
	prog, vers uint32
	auth       OpaqueAuth
}

// transport is the connection state shared by a Client and its views.
type transport struct {
	network, addr string
	timeout       time.Duration // before resending a call
	maxRecord     int
	xid           atomic.Uint32
	d             *dispatcher // the programs this client serves
	onConnect     func(ctx context.Context, c *Conn) error
	observer      Observer        // told about every call that got a reply; may be nil
	names         CallNames       // names observed calls; nil: numbers
	watch         *serverWatch    // WithServerWatch's; may be nil
	gate          CallGate        // WithCallGate's; may be nil
	ctx           context.Context // handlers' base context, cancelled by Close
	cancel        context.CancelFunc

	mu      sync.Mutex
	cur     *Conn          // guarded by mu; nil when not connected
	dialing chan struct{}  // guarded by mu; closed when the dial in progress ends
	closed  bool           // guarded by mu
	wg      sync.WaitGroup // the connections' serve goroutines; added to under mu while !closed
}

// DialOption configures Dial.
type DialOption func(*transport)

// WithTimeout sets how long a call waits for its reply before it is sent again.
func WithTimeout(d time.Duration) DialOption { return func(t *transport) { t.timeout = d } }

// WithPrograms makes the client serve these programs to calls its server sends
// on the client's connection (a callback program). They keep being served on
// every new connection after a reconnect.
func WithPrograms(ps ...*Program) DialOption {
	return func(t *transport) {
		for _, p := range ps {
			t.d.register(p)
		}
	}
}

// WithOnConnect runs f on every new connection before any other call uses it:
// the place to tell the server which client this connection belongs to (so its
// calls back reach the new connection after a reconnect). f calls the server
// with c.Call. If f fails, the connection is closed and the dial fails (a call
// waiting for it retries).
func WithOnConnect(f func(ctx context.Context, c *Conn) error) DialOption {
	return func(t *transport) { t.onConnect = f }
}

// CallGate decides, before a call is sent, whether it goes: it returns the
// context the call runs under (it may end sooner than the caller's) and end,
// which is given the call's error and returns the one the caller gets; or
// an error, and the call fails with it, unsent. A client whose server may
// be taken as gone (a mount's disconnected operation) fails its calls at
// once then, and cuts those in flight.
type CallGate func(ctx context.Context, prog, vers, proc uint32) (context.Context, func(error) error, error)

// WithCallGate passes every call made through the client (and its Program
// views) through g. Calls a connect hook makes with Conn.Call do not pass.
func WithCallGate(g CallGate) DialOption { return func(t *transport) { t.gate = g } }

// CallNames names a call's program and procedure for an Observer (sunrpc
// knows no program's names).
type CallNames func(prog, vers, proc uint32) (program, procName string)

// WithObserver tells o about every call made through the client (and its
// Program views) that got a reply, accepted or not, with the time from the
// first send to the reply; names names them (nil: the numbers in decimal).
// Calls a connect hook makes with Conn.Call are not observed.
func WithObserver(o Observer, names CallNames) DialOption {
	return func(t *transport) { t.observer, t.names = o, names }
}

// Dial connects to prog/vers at addr over network ("tcp" or "udp"). The client
// authenticates with AUTH_SYS as the current process unless WithAuth says otherwise.
func Dial(ctx context.Context, network, addr string, prog, vers uint32, opts ...DialOption) (*Client, error) {
	t := &transport{network: network, addr: addr, maxRecord: 8 << 20,
		d: newDispatcher(64, slog.Default(), nil, nil)}
	switch network {
	case "tcp", "tcp4", "tcp6":
		t.timeout = 60 * time.Second
	case "udp", "udp4", "udp6":
		t.timeout = time.Second
	default:
		return nil, fmt.Errorf("sunrpc: unsupported network %q", network)
	}
	for _, o := range opts {
		o(t)
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	var seed [4]byte
	rand.Read(seed[:])
	t.xid.Store(binary.BigEndian.Uint32(seed[:]))
	if _, err := t.conn(ctx); err != nil {
		t.Close()
		return nil, err
	}
	host, _ := os.Hostname()
	auth := EncodeAuthSys(AuthSysParams{MachineName: host, UID: uint32(os.Getuid()), GID: uint32(os.Getgid())})
	return &Client{transport: t, prog: prog, vers: vers, auth: auth}, nil
}

// WithAuth returns a client that shares c's connection but sends credential a.
func (c *Client) WithAuth(a OpaqueAuth) *Client {
	return &Client{transport: c.transport, prog: c.prog, vers: c.vers, auth: a}
}

// Program returns a client that shares c's connection and credential but calls
// prog/vers.
func (c *Client) Program(prog, vers uint32) *Client {
	return &Client{transport: c.transport, prog: prog, vers: vers, auth: c.auth}
}

// NextXID returns a fresh transaction id (for callers that use CallXID).
func (c *Client) NextXID() uint32 { return c.xid.Add(1) }

// Close closes the connection, fails pending calls, and waits for the calls the
// client was serving.
func (t *transport) Close() error {
	t.mu.Lock()
	t.closed = true
	cur := t.cur
	t.cur = nil
	t.mu.Unlock()
	t.cancel()
	if cur != nil {
		cur.Close()
	}
	if t.watch != nil {
		t.watch.stop()
	}
	t.wg.Wait()
	return nil
}

func (t *transport) stream() bool { return t.network[:3] == "tcp" }

// conn returns the live connection, dialling (and running the connect hook) if
// there is none. Concurrent callers wait for one dial.
func (t *transport) conn(ctx context.Context) (*Conn, error) {
	for {
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return nil, ErrClientClosed
		}
		if t.cur != nil {
			c := t.cur
			t.mu.Unlock()
			return c, nil
		}
		if wait := t.dialing; wait != nil {
			t.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		done := make(chan struct{})
		t.dialing = done
		t.mu.Unlock()
		c, err := t.dial(ctx)
		t.mu.Lock()
		t.dialing = nil
		close(done)
		if err == nil && t.closed {
			c.Close()
			err = ErrClientClosed
		}
		if err == nil {
			t.cur = c
		}
		t.mu.Unlock()
		return c, err
	}
}

// dial makes a new connection, serves it, and runs the connect hook on it.
func (t *transport) dial(ctx context.Context) (*Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, t.network, t.addr)
	if err != nil {
		// net's error already names the operation, network and address
		// ("dial tcp 127.0.0.1:2049: connect: connection refused"): wrapping
		// it in the same words again doubled them in the user's message.
		return nil, err
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	// Counted under mu, as Close sets closed before its Wait: a Close
	// while connect(2) ran has waited already, and the connection would be
	// served, and the connect hook run, on a closed client.
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		closeNC(nc)
		return nil, ErrClientClosed
	}
	t.wg.Add(1)
	t.mu.Unlock()
	network := "tcp"
	if !t.stream() {
		network = "udp"
	}
	c := newConn(nc, connConfig{network: network, d: t.d, xids: &t.xid, maxRecord: t.maxRecord,
		maxMem: 16 << 20, maxWorkers: cap(t.d.sem), log: t.d.log, parent: t.ctx})
	c.OnClose(func() {
		t.mu.Lock()
		if t.cur == c {
			t.cur = nil
		}
		t.mu.Unlock()
	})
	go func() {
		defer t.wg.Done()
		c.serve()
	}()
	if t.onConnect != nil {
		if err := t.onConnect(ctx, c); err != nil {
			c.Close()
			return nil, fmt.Errorf("sunrpc: connect hook on %s: %w", t.addr, err)
		}
	}
	return c, nil
}

// drop closes c and stops handing it out.
func (t *transport) drop(c *Conn) {
	t.mu.Lock()
	if t.cur == c {
		t.cur = nil
	}
	t.mu.Unlock()
	c.Close()
}

// Call invokes proc of the client's program with args and decodes the results
// into res (either may be nil).
func (c *Client) Call(ctx context.Context, proc uint32, args xdr.Encoder, res xdr.Decoder) error {
	return c.CallXID(ctx, c.NextXID(), proc, args, res)
}

// CallXID is Call with a caller-chosen xid; tests use it to retransmit on purpose.
func (c *Client) CallXID(ctx context.Context, xid, proc uint32, args xdr.Encoder, res xdr.Decoder) (err error) {
	if c.gate != nil {
		gctx, end, gerr := c.gate(ctx, c.prog, c.vers, proc)
		if gerr != nil {
			return gerr
		}
		ctx = gctx
		defer func() { err = end(err) }() // err: the call's, named result
	}
	msg := encodeCallMsg(xid, c.prog, c.vers, proc, c.auth, args)
	var start time.Time
	if c.observer != nil {
		start = time.Now()
	}
	rec, err := c.roundTrip(ctx, xid, msg)
	if err != nil {
		return err
	}
	if c.observer != nil {
		c.observe(c.prog, c.vers, proc, time.Since(start))
	}
	return decodeResults(rec, proc, res)
}

func (t *transport) roundTrip(ctx context.Context, xid uint32, msg []byte) (rec []byte, err error) {
	if w := t.watch; w != nil {
		w.begin()
		defer func() { w.done(err == nil) }()
	}
	timeout := t.timeout
	backoff := 10 * time.Millisecond
	for {
		c, err := t.conn(ctx)
		if err != nil {
			if errors.Is(err, ErrClientClosed) {
				return nil, err
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if backoff < time.Second {
				backoff *= 2
			}
			continue
		}
		rec, err := c.roundTrip(ctx, xid, msg, timeout, nil)
		switch {
		case err == nil:
			return rec, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.Is(err, errCallTimeout):
			if t.stream() {
				t.drop(c) // resend on a fresh connection, as RPC over TCP does
			} else if timeout < 16*time.Second {
				timeout *= 2
			}
		default: // the connection went: resend on a new one unless closed
			t.drop(c)
			t.mu.Lock()
			closed := t.closed
			t.mu.Unlock()
			if closed {
				return nil, ErrClientClosed
			}
		}
	}
}

// observe tells the observer about one call that got a reply.
func (t *transport) observe(prog, vers, proc uint32, d time.Duration) {
	var pn, name string
	if t.names != nil {
		pn, name = t.names(prog, vers, proc)
	} else {
		pn, name = strconv.FormatUint(uint64(prog), 10), strconv.FormatUint(uint64(proc), 10)
	}
	t.observer.ObserveCall(pn, vers, name, d)
}
