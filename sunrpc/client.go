package sunrpc

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"snfs/xdr"
)

// ErrClientClosed is returned by calls on a closed Client.
var ErrClientClosed = errors.New("sunrpc: client closed")

// Client calls one program version at one address. It is safe for concurrent use:
// on TCP any number of calls share one connection and replies are matched by xid.
// A call whose connection breaks, or that gets no reply within Timeout, is sent
// again with the same xid (on a new connection for TCP), so that the server's
// duplicate request cache recognises it. Calls end when their context does.
type Client struct {
	*transport
	auth OpaqueAuth
}

// transport is the connection state shared by a Client and its WithAuth views.
type transport struct {
	network, addr string
	prog, vers    uint32
	timeout       time.Duration // before resending a call
	maxRecord     int
	xid           atomic.Uint32

	mu      sync.Mutex
	cur     *clientConn            // guarded by mu; nil when not connected
	pending map[uint32]chan []byte // guarded by mu
	closed  bool                   // guarded by mu
	wg      sync.WaitGroup         // reader goroutines
}

type clientConn struct {
	nc   net.Conn
	dead chan struct{} // closed when the reader stops
	// Calls go out through a combiner: calls made while another is being written
	// share its writev, so many calls in flight cost one system call per batch.
	out *combiner[[]byte]
}

// DialOption configures Dial.
type DialOption func(*transport)

// WithTimeout sets how long a call waits for its reply before it is sent again.
func WithTimeout(d time.Duration) DialOption { return func(t *transport) { t.timeout = d } }

// Dial connects to prog/vers at addr over network ("tcp" or "udp"). The client
// authenticates with AUTH_SYS as the current process unless WithAuth says otherwise.
func Dial(ctx context.Context, network, addr string, prog, vers uint32, opts ...DialOption) (*Client, error) {
	t := &transport{network: network, addr: addr, prog: prog, vers: vers,
		pending: map[uint32]chan []byte{}, maxRecord: 8 << 20}
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
	var seed [4]byte
	rand.Read(seed[:])
	t.xid.Store(binary.BigEndian.Uint32(seed[:]))
	if _, err := t.conn(ctx); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	auth := EncodeAuthSys(AuthSysParams{MachineName: host, UID: uint32(os.Getuid()), GID: uint32(os.Getgid())})
	return &Client{transport: t, auth: auth}, nil
}

// WithAuth returns a client that shares c's connection but sends credential a.
func (c *Client) WithAuth(a OpaqueAuth) *Client { return &Client{transport: c.transport, auth: a} }

// NextXID returns a fresh transaction id (for callers that use CallXID).
func (c *Client) NextXID() uint32 { return c.xid.Add(1) }

// Close closes the connection and fails pending calls.
func (t *transport) Close() error {
	t.mu.Lock()
	t.closed = true
	cur := t.cur
	t.cur = nil
	t.mu.Unlock()
	if cur != nil {
		cur.nc.Close()
	}
	t.wg.Wait()
	return nil
}

func (t *transport) stream() bool { return t.network[:3] == "tcp" }

// conn returns the live connection, dialling if there is none.
func (t *transport) conn(ctx context.Context) (*clientConn, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, ErrClientClosed
	}
	if t.cur != nil {
		return t.cur, nil
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, t.network, t.addr)
	if err != nil {
		return nil, fmt.Errorf("sunrpc: dial %s %s: %w", t.network, t.addr, err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	cc := &clientConn{nc: nc, dead: make(chan struct{}), out: newCombiner(nc, 0, func(b []byte) []byte { return b }, nil)}
	t.cur = cc
	t.wg.Add(1)
	go t.readLoop(cc)
	return cc, nil
}

// send writes msg on a stream connection, combined with other calls' (see
// clientConn.out). A failed write drops the connection; every call it carried sees
// cc.dead and is resent.
func (t *transport) send(cc *clientConn, msg []byte) {
	if err := cc.out.write(msg); err != nil {
		t.drop(cc)
	}
}

func (t *transport) drop(cc *clientConn) {
	t.mu.Lock()
	if t.cur == cc {
		t.cur = nil
	}
	t.mu.Unlock()
	cc.nc.Close()
}

func (t *transport) readLoop(cc *clientConn) {
	defer t.wg.Done()
	defer close(cc.dead)
	defer t.drop(cc)
	var br *bufio.Reader
	if t.stream() {
		br = bufio.NewReaderSize(cc.nc, 64<<10)
	}
	dgram := make([]byte, 65536)
	for {
		var rec []byte
		if br != nil {
			var err error
			rec, err = readRecord(br, nil, t.maxRecord)
			if err != nil {
				return
			}
		} else {
			n, err := cc.nc.Read(dgram)
			if err != nil {
				if isTimeout(err) {
					continue
				}
				var oe *net.OpError
				if errors.As(err, &oe) && !errors.Is(err, net.ErrClosed) {
					continue // e.g. ECONNREFUSED from an ICMP error; keep listening
				}
				return
			}
			rec = append([]byte(nil), dgram[:n]...)
		}
		if len(rec) < 4 {
			continue
		}
		xid := binary.BigEndian.Uint32(rec)
		t.mu.Lock()
		ch := t.pending[xid]
		t.mu.Unlock()
		if ch != nil {
			select {
			case ch <- rec:
			default: // a duplicate reply; the first one wins
			}
		}
	}
}

// Call invokes proc with args and decodes the results into res (either may be nil).
func (c *Client) Call(ctx context.Context, proc uint32, args xdr.Encoder, res xdr.Decoder) error {
	return c.CallXID(ctx, c.NextXID(), proc, args, res)
}

// CallXID is Call with a caller-chosen xid; tests use it to retransmit on purpose.
func (c *Client) CallXID(ctx context.Context, xid, proc uint32, args xdr.Encoder, res xdr.Decoder) error {
	w := xdr.NewWriter(make([]byte, 0, 256))
	w.Uint32(0)
	EncodeCall(w, &CallHeader{XID: xid, Prog: c.prog, Vers: c.vers, Proc: proc, Cred: c.auth, Verf: nullVerf})
	if args != nil {
		args.Encode(w)
	}
	msg := w.Bytes()
	putMarker(msg, len(msg)-4)
	if !c.stream() {
		msg = msg[4:]
	}
	rec, err := c.roundTrip(ctx, xid, msg)
	if err != nil {
		return err
	}
	r := xdr.NewReader(rec)
	if _, err := decodeReply(r); err != nil {
		return err
	}
	if res != nil {
		if err := res.Decode(r); err != nil {
			return fmt.Errorf("sunrpc: decoding results of proc %d: %w", proc, err)
		}
	}
	return nil
}

func (t *transport) roundTrip(ctx context.Context, xid uint32, msg []byte) ([]byte, error) {
	ch := make(chan []byte, 1)
	t.mu.Lock()
	t.pending[xid] = ch
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		delete(t.pending, xid)
		t.mu.Unlock()
	}()
	timeout := t.timeout
	backoff := 10 * time.Millisecond
	for {
		cc, err := t.conn(ctx)
		if err != nil {
			if errors.Is(err, ErrClientClosed) || ctx.Err() != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return nil, err
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
		if t.stream() {
			t.send(cc, msg)
		} else if _, err := cc.nc.Write(msg); err != nil {
			t.drop(cc)
			continue
		}
		timer := time.NewTimer(timeout)
		select {
		case rec := <-ch:
			timer.Stop()
			return rec, nil
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		case <-cc.dead:
			timer.Stop()
			t.mu.Lock()
			closed := t.closed
			t.mu.Unlock()
			if closed {
				return nil, ErrClientClosed
			}
		case <-timer.C:
			if t.stream() {
				t.drop(cc) // resend on a fresh connection, as RPC over TCP does
			} else if timeout < 16*time.Second {
				timeout *= 2
			}
		}
	}
}
