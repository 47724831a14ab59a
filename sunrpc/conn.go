package sunrpc

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"snfs/xdr"
)

// ErrConnClosed is returned by a call whose connection closed (or stopped
// reading) before its reply came: the peer went away, the connection failed, or
// its server is shutting down.
var ErrConnClosed = errors.New("sunrpc: connection closed")

// Conn is one RPC connection carrying calls in both directions, whichever side
// dialled: the server calls its clients back on the connections they opened
// (NFSv4.1's back channel, Linux's xprtsock backchannel), and a client serves
// those calls. A Conn owns the xid counter of its outgoing calls, the table of
// calls waiting for replies, and the writer that replies and calls share.
//
// Every record read is routed by message type before anything that can block:
// a REPLY goes to its waiting caller at once, a CALL to the program table. Calls
// never hold the reader: one waits for a worker in its own goroutine (unless its
// procedure says it is quick, Proc.Inline), so a server whose workers all wait
// for replies from their clients still reads those replies.
//
// Back-pressure is per connection: every call read holds part of the
// connection's memory budget (its request buffer and room for its reply, by
// capacity) until its reply is written, and the reader stops reading while the
// budget is spent. A peer that sends calls and never reads the replies therefore
// stops being read, holding at most its budget and no worker: a worker is
// released when its reply is built, before it is written. A reply write that
// makes no progress for the write timeout drops the connection. At most
// maxWorkers of the connection's calls run at once.
type Conn struct {
	id        uint64
	nc        net.Conn
	network   string // "tcp" or "udp"
	addr      net.Addr
	d         *dispatcher
	xids      *atomic.Uint32
	maxRecord int
	maxMem    int
	workers   chan struct{} // this connection's share of the dispatcher's workers
	log       *slog.Logger
	out       *combiner[outMsg]
	reader    io.Reader // the stream source (a pollReader on the server); nil for datagrams

	ctx      context.Context // handlers' context: cancelled when the reader stops
	cancel   context.CancelFunc
	rdone    chan struct{} // closed when the reader stops: no reply can arrive any more
	dead     chan struct{} // closed when nothing can be sent any more
	deadOnce sync.Once
	finished chan struct{} // closed when serve has returned
	async    atomic.Int32  // calls running in goroutines (the poll reader stays quiet meanwhile)
	callWG   sync.WaitGroup

	mu      sync.Mutex
	pending map[uint32]*pendingCall // outgoing calls waiting for replies; guarded by mu
	stopped bool                    // the reader stopped; guarded by mu
	onClose []func()                // guarded by mu
	onDone  []func()                // run once every call read is served (OnServed); guarded by mu
	served  bool                    // they ran; guarded by mu
	calls   int                     // calls read and not yet answered; guarded by mu
	mem     int                     // bytes held for them; guarded by mu
	waiting bool                    // the reader waits for room; guarded by mu
	room    chan struct{}           // wakes the reader (capacity 1)
}

// outMsg is a message handed to the writer: a reply (pooled buffer, held bytes
// released once written) or an outgoing call.
type outMsg struct {
	buf    *[]byte
	pooled bool
	held   int // budget bytes released after the write (replies only)
}

// connConfig is what a Conn is made with.
type connConfig struct {
	network      string
	d            *dispatcher
	xids         *atomic.Uint32 // shared across a client's reconnections; nil: the Conn's own
	maxRecord    int
	maxMem       int           // the per-connection budget
	maxWorkers   int           // the per-connection share of workers
	writeTimeout time.Duration // 0: none
	log          *slog.Logger
	parent       context.Context
	// reader wraps the stream (the server's poll reader); nil: read nc directly.
	reader func(nc net.Conn, busy *atomic.Int32) io.Reader
}

var connIDs atomic.Uint64

// newConn wraps nc. The caller runs serve, in a goroutine it owns.
func newConn(nc net.Conn, cfg connConfig) *Conn {
	c := &Conn{id: connIDs.Add(1), nc: nc, network: cfg.network, addr: nc.RemoteAddr(), d: cfg.d,
		xids: cfg.xids, maxRecord: cfg.maxRecord, maxMem: cfg.maxMem, log: cfg.log,
		workers: make(chan struct{}, max(1, cfg.maxWorkers)),
		rdone:   make(chan struct{}), dead: make(chan struct{}), finished: make(chan struct{}),
		pending: map[uint32]*pendingCall{}, room: make(chan struct{}, 1)}
	if c.xids == nil {
		c.xids = new(atomic.Uint32)
		var seed [4]byte
		rand.Read(seed[:])
		c.xids.Store(binary.BigEndian.Uint32(seed[:]))
	}
	c.ctx, c.cancel = context.WithCancel(cfg.parent)
	var w buffersWriter
	if c.stream() {
		w = newBuffersWriter(nc, cfg.writeTimeout)
		c.reader = nc
		if cfg.reader != nil {
			c.reader = cfg.reader(nc, &c.async)
		}
	} else {
		w = datagramWriter{nc}
	}
	c.out = newCombiner(w, func(m outMsg) []byte { return *m.buf }, c.written)
	return c
}

func (c *Conn) stream() bool { return c.network[:3] == "tcp" }

// ID identifies the connection among those of this process.
func (c *Conn) ID() uint64 { return c.id }

// RemoteAddr is the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.addr }

// Context is cancelled when the connection stops reading (the peer went away,
// Close, or the server shuts down).
func (c *Conn) Context() context.Context { return c.ctx }

// Done is closed when the connection stops reading: from then on no call made
// on it can be answered, and a state layer should forget it.
func (c *Conn) Done() <-chan struct{} { return c.rdone }

// OnClose arranges for f to run once when the connection stops reading (on the
// connection's reader goroutine: keep it short), or at once if it already has.
func (c *Conn) OnClose(f func()) { c.hook(&c.onClose, &c.stopped, f) }

// hook queues f on *q until *done (both guarded by mu), or runs it at once.
func (c *Conn) hook(q *[]func(), done *bool, f func()) {
	c.mu.Lock()
	if !*done {
		*q = append(*q, f)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	f()
}

// OnServed arranges for f to run once the connection has stopped reading and
// every call it read has been served (on the connection's goroutine: keep it
// short), or at once if that is so already. A state layer that counts calls
// by their connection (snfs's registrations) keeps the connection's identity
// until then: calls read before a close still run after it.
func (c *Conn) OnServed(f func()) { c.hook(&c.onDone, &c.served, f) }

// Served is closed once the connection has stopped reading and every call it
// read has been served (OnServed).
func (c *Conn) Served() <-chan struct{} { return c.finished }

// Close closes the connection: calls waiting for replies on it fail with
// ErrConnClosed. It does not wait for the calls being served.
func (c *Conn) Close() error {
	c.markDead()
	return closeNC(c.nc)
}

// closeNC shuts a stream's socket down before closing this descriptor of it.
// close(2) ends a socket only with its last descriptor: a copy held elsewhere
// (a child of this process between fork and exec, whose close-on-exec can wait
// on a FUSE flush of a mount this process serves) would keep the connection
// open, the peer waiting for its call timeout, while shutdown(2) acts on the
// socket whoever holds it.
func closeNC(nc net.Conn) error {
	if sc, ok := nc.(interface {
		CloseRead() error
		CloseWrite() error
	}); ok {
		sc.CloseWrite() // the FIN, after what is queued
		sc.CloseRead()
	}
	return nc.Close()
}

func (c *Conn) markDead() { c.deadOnce.Do(func() { close(c.dead) }) }

// serve reads until the connection fails or is closed, then waits for the calls
// it started and closes the connection.
func (c *Conn) serve() {
	defer close(c.finished)
	var err error
	if c.stream() {
		err = c.readStream()
	} else {
		err = c.readDatagrams()
	}
	shutdown := isTimeout(err) || errors.Is(err, context.Canceled) // the server's Shutdown stopped the reader
	if !shutdown {
		// The peer went (or the connection failed): calls not yet started
		// are dropped, as their replies could not be delivered.
		c.markDead()
		if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, ErrConnClosed) {
			c.log.Debug("rpc connection closed", "remote", c.addr, "err", err)
		}
	}
	c.mu.Lock()
	c.stopped = true
	fs := c.onClose
	c.onClose = nil
	c.mu.Unlock()
	for _, f := range fs {
		f()
	}
	close(c.rdone)
	c.cancel()
	c.callWG.Wait() // calls already started still run (and reply, on shutdown)
	c.markDead()
	closeNC(c.nc)
	c.mu.Lock()
	c.served = true
	fs = c.onDone
	c.onDone = nil
	c.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

func (c *Conn) readStream() error {
	br := bufio.NewReaderSize(c.reader, 64<<10)
	for {
		if err := c.waitRoom(); err != nil {
			return err
		}
		bp := getBuf()
		rec, err := readRecord(br, *bp, c.maxRecord)
		*bp = rec
		if err != nil {
			putBuf(bp)
			return err
		}
		c.receive(bp, br.Buffered() == 0)
	}
}

func (c *Conn) readDatagrams() error {
	dgram := make([]byte, 65536)
	for {
		if err := c.waitRoom(); err != nil {
			return err
		}
		n, err := c.nc.Read(dgram)
		if err != nil {
			if isTimeout(err) {
				continue
			}
			var oe *net.OpError
			if errors.As(err, &oe) && !errors.Is(err, net.ErrClosed) {
				continue // e.g. ECONNREFUSED from an ICMP error; keep listening
			}
			return err
		}
		bp := getBuf()
		*bp = append((*bp)[:0], dgram[:n]...)
		c.receive(bp, true)
	}
}

// waitRoom returns once the connection's budget allows reading another record.
// It never waits while no call is held, so one call of any size can proceed.
func (c *Conn) waitRoom() error {
	c.mu.Lock()
	for c.calls > 0 && c.mem >= c.maxMem {
		c.waiting = true
		c.mu.Unlock()
		select {
		case <-c.room:
		case <-c.dead:
			return ErrConnClosed
		case <-c.ctx.Done():
			return c.ctx.Err()
		}
		c.mu.Lock()
	}
	c.mu.Unlock()
	return nil
}

// receive routes one record: a reply to its caller, a call to the programs.
func (c *Conn) receive(bp *[]byte, quiet bool) {
	rec := *bp
	if len(rec) >= 8 && binary.BigEndian.Uint32(rec[4:]) == msgReply {
		c.routeReply(bp)
		return
	}
	c.startCall(bp, quiet)
}

func (c *Conn) routeReply(bp *[]byte) {
	rec := *bp
	xid := binary.BigEndian.Uint32(rec)
	c.mu.Lock()
	p := c.pending[xid]
	c.mu.Unlock()
	if p == nil { // late (its caller gave up) or unknown
		putBuf(bp)
		return
	}
	if p.routed != nil {
		// Only the reader touches p.seen: a duplicate reply is not seen twice.
		if p.seen {
			putBuf(bp)
			return
		}
		p.seen = true
		p.routed(rec)
	}
	if len(rec) <= 16<<10 {
		rec = append([]byte(nil), rec...)
		putBuf(bp)
	} // else the caller keeps the pooled buffer itself
	select {
	case p.ch <- rec:
	default: // a duplicate reply; the first one wins
	}
}

// pendingCall is an outgoing call waiting for its reply.
type pendingCall struct {
	ch chan []byte
	// routed, if set, runs on the reader with the reply record before it is
	// handed over (CallRouted); seen: it ran. Both only touched by the reader.
	routed func(rec []byte)
	seen   bool
}

// startCall accounts for the call in *bp and runs it: inline on the reader when
// nothing else is buffered and its procedure says it never waits, else in a
// goroutine that waits for a worker.
func (c *Conn) startCall(bp *[]byte, quiet bool) {
	p := c.d.lookup(*bp)
	held := cap(*bp) + defaultBufSize
	if p != nil && p.MaxReply > defaultBufSize {
		held += p.MaxReply - defaultBufSize
	}
	c.mu.Lock()
	c.calls++
	c.mem += held
	c.mu.Unlock()
	if quiet && inline(p, *bp) {
		c.serveCall(p, bp, held, false)
		return
	}
	c.async.Add(1)
	c.callWG.Add(1)
	go func() {
		defer c.callWG.Done()
		defer c.async.Add(-1)
		if !c.acquireWorker() {
			putBuf(bp)
			c.release(held)
			return
		}
		c.serveCall(p, bp, held, true)
	}()
}

// acquireWorker takes a slot of this connection's share and one of the
// dispatcher's, unless the connection dies first (its call then goes unanswered,
// as it would have anyway).
func (c *Conn) acquireWorker() bool {
	select {
	case c.workers <- struct{}{}:
	case <-c.dead:
		return false
	}
	select {
	case c.d.sem <- struct{}{}:
		return true
	case <-c.dead:
		<-c.workers
		return false
	}
}

func (c *Conn) serveCall(p *Proc, bp *[]byte, held int, worker bool) {
	rb := getBuf()
	if p != nil && cap(*rb) < p.MaxReply+4 {
		// Room for the largest reply at once: grown by appending, its
		// capacity would end up to twice what it needs.
		*rb = make([]byte, 0, p.MaxReply+4)
	}
	reply, deferred := c.d.dispatch(c.ctx, *bp, origin{network: c.network, addr: c.addr, conn: c, held: held}, (*rb)[:0])
	putBuf(bp)
	if worker {
		<-c.d.sem
		<-c.workers
	}
	if deferred {
		putBuf(rb) // the Deferred builds its own, and keeps held until it replies
		return
	}
	if reply == nil {
		putBuf(rb)
		c.release(held)
		return
	}
	*rb = reply
	c.sendReply(rb, held)
}

// sendReply hands a reply (nil: none) to the writer; the call's budget, held
// so far, becomes the reply buffer's capacity until it is written.
func (c *Conn) sendReply(rb *[]byte, held int) {
	if rb == nil {
		c.release(held)
		return
	}
	reply := *rb
	putMarker(reply, len(reply)-4)
	c.mu.Lock()
	c.mem += cap(reply) - held
	c.mu.Unlock()
	c.send(outMsg{buf: rb, pooled: true, held: cap(reply)})
}

// Serving reports the calls read on c and not yet answered (or given up).
// The reader counts a call before it reads the next record: a caller that
// got a reply on c and then sees Serving() == 0 knows that every call that
// reached it before that reply has been served (snfs's leases:
// docs/protocol.md 10, 20.4).
func (c *Conn) Serving() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

// release gives back a call's share of the budget once it is answered.
func (c *Conn) release(held int) {
	c.mu.Lock()
	c.calls--
	c.mem -= held
	wake := c.waiting
	c.waiting = false
	c.mu.Unlock()
	if wake {
		select {
		case c.room <- struct{}{}:
		default:
		}
	}
}

// written is the combiner's release: called once per message after its write.
func (c *Conn) written(m outMsg) {
	if m.pooled {
		putBuf(m.buf)
	}
	if m.held > 0 {
		c.release(m.held)
	}
}

// send hands m to the writer; a failed write (including one that made no
// progress for the write timeout) drops the connection.
func (c *Conn) send(m outMsg) {
	if err := c.out.write(m); err != nil {
		c.log.Debug("rpc write failed; dropping the connection", "remote", c.addr, "err", err)
		c.Close()
	}
}

// Call sends a call for prog/vers/proc with credential cred on this connection
// and waits for the reply, decoding the results into res (either may be nil). It
// is sent once: it fails with an error wrapping ErrConnClosed if the connection
// goes before the reply comes, and with ctx's error when ctx ends first.
func (c *Conn) Call(ctx context.Context, prog, vers, proc uint32, cred OpaqueAuth, args xdr.Encoder, res xdr.Decoder) error {
	xid := c.xids.Add(1)
	msg := encodeCallMsg(xid, prog, vers, proc, cred, args)
	rec, err := c.roundTrip(ctx, xid, msg, 0, nil)
	if err != nil {
		return fmt.Errorf("sunrpc: call %d/%d/%d to %s: %w", prog, vers, proc, c.addr, err)
	}
	return decodeResults(rec, proc, res)
}

// CallRouted is Call, and routed, if not nil, runs on the connection's reader
// as soon as the reply is read - with the error Call returns for it (nil, or
// why the reply or its results did not decode; res is decoded by then) -
// before the reader reads the next record: whatever the peer sent after its
// reply finds routed's work done (a server applies a callback's answer before
// the client's next call). routed must not block. It does not run when no
// reply comes (ctx ends first, or the connection closes); when it ran, it has
// the call's outcome, even if ctx ended before Call returned.
func (c *Conn) CallRouted(ctx context.Context, prog, vers, proc uint32, cred OpaqueAuth, args xdr.Encoder, res xdr.Decoder, routed func(error)) error {
	if routed == nil {
		return c.Call(ctx, prog, vers, proc, cred, args, res)
	}
	xid := c.xids.Add(1)
	msg := encodeCallMsg(xid, prog, vers, proc, cred, args)
	var derr error // the reply's decoding, by the reader before it hands the record over
	_, err := c.roundTrip(ctx, xid, msg, 0, func(rec []byte) {
		derr = decodeResults(rec, proc, res)
		routed(derr)
	})
	if err != nil {
		return fmt.Errorf("sunrpc: call %d/%d/%d to %s: %w", prog, vers, proc, c.addr, err)
	}
	return derr
}

// errCallTimeout is roundTrip's answer when timeout passed without a reply.
var errCallTimeout = errors.New("sunrpc: no reply within the timeout")

// roundTrip sends msg (a call with this xid, record mark included) and waits for
// its reply: ErrConnClosed if the connection stops reading first,
// errCallTimeout after timeout (if > 0), or ctx's error. routed, if set, runs
// on the reader with the reply before it is handed over (CallRouted).
func (c *Conn) roundTrip(ctx context.Context, xid uint32, msg []byte, timeout time.Duration, routed func(rec []byte)) ([]byte, error) {
	ch := make(chan []byte, 1)
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return nil, ErrConnClosed
	}
	c.pending[xid] = &pendingCall{ch: ch, routed: routed}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, xid)
		c.mu.Unlock()
	}()
	c.send(outMsg{buf: &msg})
	var expire <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expire = t.C
	}
	select {
	case rec := <-ch:
		return rec, nil
	case <-ctx.Done():
		select { // a handler's context ends because the reader stopped: say so
		case <-c.rdone:
			return nil, ErrConnClosed
		default:
		}
		return nil, ctx.Err()
	case <-c.rdone:
		select { // a reply routed just before the reader stopped still counts
		case rec := <-ch:
			return rec, nil
		default:
		}
		return nil, ErrConnClosed
	case <-expire:
		return nil, errCallTimeout
	}
}

// encodeCallMsg builds a call record, its record mark included (a datagram
// writer skips the mark).
func encodeCallMsg(xid, prog, vers, proc uint32, cred OpaqueAuth, args xdr.Encoder) []byte {
	w := xdr.NewWriter(make([]byte, 0, 256))
	w.Uint32(0)
	EncodeCall(w, &CallHeader{XID: xid, Prog: prog, Vers: vers, Proc: proc, Cred: cred, Verf: nullVerf})
	if args != nil {
		args.Encode(w)
	}
	msg := w.Bytes()
	putMarker(msg, len(msg)-4)
	return msg
}

// decodeResults checks a reply's header and decodes its results into res.
func decodeResults(rec []byte, proc uint32, res xdr.Decoder) error {
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

// datagramWriter sends each message as one datagram, without its record mark.
type datagramWriter struct{ nc net.Conn }

func (d datagramWriter) writeBuffers(bufs [][]byte) error {
	var first error
	for _, b := range bufs {
		if _, err := d.nc.Write(b[4:]); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
