package sunrpc

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"snfs/xdr"
)

// The two-way test program (testProg version 3 on a twoWay server) and the
// callback program its clients serve.
const (
	cbProg = testProg + 1

	twNull     = 0
	twEcho     = 1 // sleeps arg ms, returns arg
	twCallback = 2 // calls the caller back (cbProg proc 1) with arg, returns the answer
	twWait     = 3 // says it started on started, waits for its context to end, reports on canceled
	twBig      = 4 // returns 1 MiB
	twBind     = 5 // remembers the caller's connection under arg
	twSameXID  = 6 // calls back with the xid of the call it serves
	twSleep    = 7 // sleeps 500 ms
	twDefer    = 8 // defers its reply (arg+1) to another goroutine, says so on deferred, replies when release is closed; arg 0: drops it
)

type twoWay struct {
	s           *Server
	addr        string
	started     chan struct{} // twWait: a call began
	canceled    chan error    // twWait: the context's error when it ended
	deferred    chan struct{} // twDefer: a call deferred its reply
	release     chan struct{} // twDefer: closed, the deferred replies are sent
	releaseOnce sync.Once
	cbErr       chan error // twCallback: callback failures

	mu    sync.Mutex
	bound map[uint32]*Conn // guarded by mu
	binds int              // guarded by mu
}

// waitFor waits (at most 10 s) for what a handler reports on ch.
func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("waited 10 s for %s", what)
	}
}

func (tw *twoWay) conn(name uint32) *Conn {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	return tw.bound[name]
}

func newTwoWay(t *testing.T, s *Server) *twoWay {
	t.Helper()
	tw := &twoWay{s: s, started: make(chan struct{}, 16), canceled: make(chan error, 16), cbErr: make(chan error, 16),
		deferred: make(chan struct{}, 16), release: make(chan struct{}), bound: map[uint32]*Conn{}}
	callback := func(ctx context.Context, c *Call, a *xdr.Reader, w *xdr.Writer) error {
		v := a.Uint32()
		var res u32res
		if err := c.Conn.Call(ctx, cbProg, 1, 1, nullVerf, u32(v), &res); err != nil {
			tw.cbErr <- err
			return err
		}
		w.Uint32(res.v)
		return nil
	}
	sameXID := func(ctx context.Context, c *Call, a *xdr.Reader, w *xdr.Writer) error {
		v := a.Uint32()
		rec, err := c.Conn.roundTrip(ctx, c.XID, encodeCallMsg(c.XID, cbProg, 1, 1, nullVerf, u32(v)), 0, nil)
		if err != nil {
			return err
		}
		var res u32res
		if err := decodeResults(rec, 1, &res); err != nil {
			return err
		}
		w.Uint32(res.v)
		return nil
	}
	s.Register(&Program{Name: "twoway", Number: testProg, Versions: map[uint32][]Proc{3: {
		twNull: {Name: "NULL", Handler: func(context.Context, *Call, *xdr.Reader, *xdr.Writer) error { return nil }},
		twEcho: {Name: "ECHO", Handler: func(ctx context.Context, c *Call, a *xdr.Reader, w *xdr.Writer) error {
			v := a.Uint32()
			time.Sleep(time.Duration(v) * time.Millisecond)
			w.Uint32(v)
			return nil
		}},
		twCallback: {Name: "CALLBACK", Handler: callback},
		twWait: {Name: "WAIT", Handler: func(ctx context.Context, c *Call, a *xdr.Reader, w *xdr.Writer) error {
			tw.started <- struct{}{}
			<-ctx.Done()
			tw.canceled <- ctx.Err()
			return nil
		}},
		twBig: {Name: "BIG", MaxReply: 1<<20 + 1024, Handler: func(ctx context.Context, c *Call, a *xdr.Reader, w *xdr.Writer) error {
			w.Opaque(make([]byte, 1<<20))
			return nil
		}},
		twBind: {Name: "BIND", Handler: func(ctx context.Context, c *Call, a *xdr.Reader, w *xdr.Writer) error {
			v := a.Uint32()
			tw.mu.Lock()
			tw.bound[v] = c.Conn
			tw.binds++
			tw.mu.Unlock()
			return nil
		}},
		twSameXID: {Name: "SAMEXID", Handler: sameXID},
		twSleep: {Name: "SLEEP", Handler: func(ctx context.Context, c *Call, a *xdr.Reader, w *xdr.Writer) error {
			time.Sleep(500 * time.Millisecond)
			return nil
		}},
		twDefer: {Name: "DEFER", Cache: true, Handler: func(ctx context.Context, c *Call, a *xdr.Reader, w *xdr.Writer) error {
			v := a.Uint32()
			d := c.Defer()
			if v == 0 {
				d.Drop()
				return nil
			}
			tw.deferred <- struct{}{}
			go func() {
				<-tw.release
				d.Reply(func(w *xdr.Writer) error { w.Uint32(v + 1); return nil })
			}()
			return nil
		}},
	}}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tw.addr = ln.Addr().String()
	go s.ServeTCP(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	// Before the shutdown (cleanups run last first): a test that failed
	// before releasing its deferred replies leaves no goroutine waiting.
	t.Cleanup(tw.releaseDeferred)
	return tw
}

// releaseDeferred lets the DEFER calls' replies go (once).
func (tw *twoWay) releaseDeferred() { tw.releaseOnce.Do(func() { close(tw.release) }) }

// callbackProgram answers cbProg proc 1 with its argument + 1000.
func callbackProgram() *Program {
	return &Program{Name: "cb", Number: cbProg, Versions: map[uint32][]Proc{1: {
		{Name: "NULL", Handler: func(context.Context, *Call, *xdr.Reader, *xdr.Writer) error { return nil }},
		{Name: "PLUS1000", Handler: func(ctx context.Context, c *Call, a *xdr.Reader, w *xdr.Writer) error {
			v := a.Uint32()
			if a.Err() != nil {
				return ErrGarbageArgs
			}
			w.Uint32(v + 1000)
			return nil
		}},
	}}}
}

func dialTwoWay(t *testing.T, addr string, opts ...DialOption) *Client {
	t.Helper()
	c, err := Dial(context.Background(), "tcp", addr, testProg, 3, append([]DialOption{WithPrograms(callbackProgram())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rawConn is a hand-driven TCP client: it writes call records and reads what
// it is sent, nothing more.
func rawConn(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc, bufio.NewReader(nc)
}

// TestCallbackUnderLoad: handlers that call their client back and wait for the
// answer, while that client has 64 calls in flight and the server only 2
// workers: no deadlock, every call answered. (A reader that waited for a worker
// before reading would never reach the callbacks' replies.)
func TestCallbackUnderLoad(t *testing.T) {
	tw := newTwoWay(t, &Server{MaxInFlight: 2})
	c := dialTwoWay(t, tw.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var res u32res
			if i%4 == 0 {
				if err := c.Call(ctx, twCallback, u32(i), &res); err != nil || res.v != uint32(i)+1000 {
					t.Errorf("callback %d: %v, %d", i, err, res.v)
				}
				return
			}
			if err := c.Call(ctx, twEcho, u32(2), &res); err != nil || res.v != 2 {
				t.Errorf("echo %d: %v, %d", i, err, res.v)
			}
		}()
	}
	wg.Wait()
}

// TestCallbackToVanishedClient: a callback whose client goes away while it is
// out fails promptly with ErrConnClosed, and so does one made on a connection
// that is already gone.
func TestCallbackToVanishedClient(t *testing.T) {
	tw := newTwoWay(t, &Server{})
	nc, br := rawConn(t, tw.addr)
	nc.Write(encodeCallMsg(1, testProg, 3, twCallback, nullVerf, u32(5)))
	rec, err := readRecord(br, nil, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	h, err := DecodeCall(xdr.NewReader(rec))
	if err != nil || h.Prog != cbProg {
		t.Fatalf("expected the callback, got %+v, %v", h, err)
	}
	closed := time.Now()
	nc.Close() // without answering
	select {
	case err := <-tw.cbErr:
		if !errors.Is(err, ErrConnClosed) {
			t.Fatalf("callback failed with %v, want ErrConnClosed", err)
		}
		if d := time.Since(closed); d > 2*time.Second {
			t.Fatalf("callback failed %v after the client went", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("callback still waiting 10 s after its client went")
	}

	c := dialTwoWay(t, tw.addr)
	if err := c.Call(context.Background(), twBind, u32(1), nil); err != nil {
		t.Fatal(err)
	}
	conn := tw.conn(1)
	c.Close()
	select {
	case <-conn.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("server never noticed the client closing")
	}
	start := time.Now()
	err = conn.Call(context.Background(), cbProg, 1, 1, nullVerf, u32(1), nil)
	if !errors.Is(err, ErrConnClosed) || time.Since(start) > time.Second {
		t.Fatalf("call on a closed connection: %v after %v", err, time.Since(start))
	}
}

// TestXIDCollisionBothWays: a callback that carries the xid of the client's own
// call still pending on the same connection is told apart by message type: each
// reply reaches its own caller.
func TestXIDCollisionBothWays(t *testing.T) {
	tw := newTwoWay(t, &Server{})
	c := dialTwoWay(t, tw.addr)
	for i := range 20 {
		var res u32res
		if err := c.Call(context.Background(), twSameXID, u32(i), &res); err != nil || res.v != uint32(i)+1000 {
			t.Fatalf("call %d: %v, %d", i, err, res.v)
		}
	}
}

// TestHandlerCanceledOnDisconnect: a handler's context ends when its client's
// connection goes, and when the server shuts down.
func TestHandlerCanceledOnDisconnect(t *testing.T) {
	tw := newTwoWay(t, &Server{})
	nc, _ := rawConn(t, tw.addr)
	nc.Write(encodeCallMsg(1, testProg, 3, twWait, nullVerf, nil))
	waitFor(t, tw.started, "the WAIT call to start")
	nc.Close()
	select {
	case err := <-tw.canceled:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("handler context ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("handler context not canceled 10 s after its client went")
	}

	c := dialTwoWay(t, tw.addr)
	done := make(chan error, 1)
	go func() { done <- c.Call(context.Background(), twWait, nil, nil) }()
	waitFor(t, tw.started, "the WAIT call to start")
	if err := tw.s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-tw.canceled; !errors.Is(err, context.Canceled) {
		t.Fatalf("handler context ended with %v on shutdown", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the call in flight at shutdown: %v", err)
	}
}

// TestReconnectRebinds: a client's served programs and its connect hook carry
// over to a new connection: after the server drops the first, the hook binds
// the second, and calls back reach the client on it.
func TestReconnectRebinds(t *testing.T) {
	tw := newTwoWay(t, &Server{})
	const name = 42
	c := dialTwoWay(t, tw.addr, WithOnConnect(func(ctx context.Context, conn *Conn) error {
		return conn.Call(ctx, testProg, 3, twBind, nullVerf, u32(name), nil)
	}))
	ctx := context.Background()
	first := tw.conn(name)
	var res u32res
	if first == nil {
		t.Fatal("the connect hook did not run at Dial")
	}
	if err := first.Call(ctx, cbProg, 1, 1, nullVerf, u32(1), &res); err != nil || res.v != 1001 {
		t.Fatalf("callback on the first connection: %v, %d", err, res.v)
	}
	first.Close()
	<-first.Done()
	if err := c.Call(ctx, twEcho, u32(0), &res); err != nil {
		t.Fatal(err)
	}
	second := tw.conn(name)
	if second == first || second.ID() == first.ID() {
		t.Fatal("the client's new connection was not bound")
	}
	if err := second.Call(ctx, cbProg, 1, 1, nullVerf, u32(2), &res); err != nil || res.v != 1002 {
		t.Fatalf("callback on the new connection: %v, %d", err, res.v)
	}
}

// flood pipelines copies of call on a new connection and never reads a reply,
// until its writes fail (the server dropped it: the result) or for at most d;
// then it closes the connection.
//
// Its receive buffer is set small before it connects, so that the replies it
// never reads fill it (and the server's send buffer, which cannot grow behind
// a small window) after a few thousand calls, not a few hundred thousand: a
// race-instrumented server on a loaded machine answers too few null calls in d
// to fill the buffers a default socket autotunes to.
func flood(t *testing.T, addr string, call []byte, d time.Duration) <-chan error {
	dl := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 16<<10)
		}); err != nil {
			return err
		}
		return serr
	}}
	nc, err := dl.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	out := make(chan error, 1)
	batch := make([]byte, 0, 64*len(call))
	for range 64 {
		batch = append(batch, call...)
	}
	go func() {
		defer nc.Close()
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			nc.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			if _, err := nc.Write(batch); err != nil && !isTimeout(err) {
				out <- err
				return
			}
		}
		out <- nil
	}()
	return out
}

func heapAlloc() uint64 {
	var ms runtime.MemStats
	for range 3 {
		runtime.GC()
	}
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestStalledClientsCannotStallOthers: connections that pipeline calls (small
// ones, 1 MiB replies, and calls that hold a worker for a while) and never read
// their replies stop being read, hold a bounded share of workers and memory, and
// are dropped once their replies cannot be written; meanwhile another client's
// calls complete promptly, and memory returns to its idle level afterwards.
func TestStalledClientsCannotStallOthers(t *testing.T) {
	tw := newTwoWay(t, &Server{MaxInFlight: 4, ReplyTimeout: time.Second})
	c := dialTwoWay(t, tw.addr)
	ctx := context.Background()
	if err := c.Call(ctx, twNull, nil, nil); err != nil {
		t.Fatal(err)
	}
	idle := heapAlloc()

	floods := []<-chan error{
		flood(t, tw.addr, encodeCallMsg(1, testProg, 3, twNull, nullVerf, nil), time.Minute),
		flood(t, tw.addr, encodeCallMsg(2, testProg, 3, twBig, nullVerf, nil), time.Minute),
	}
	sleepy := flood(t, tw.addr, encodeCallMsg(3, testProg, 3, twSleep, nullVerf, nil), 3*time.Second)
	time.Sleep(500 * time.Millisecond)

	var peak uint64
	for i := range 100 {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		var res u32res
		err := c.Call(cctx, twEcho, u32(0), &res)
		cancel()
		if err != nil {
			t.Fatalf("call %d of the well-behaved client: %v", i, err)
		}
		if i%25 == 0 {
			peak = max(peak, heapAlloc())
		}
	}
	// Two floods at 16 MiB each, plus what one call may overshoot.
	if grown := int64(peak) - int64(idle); grown > 64<<20 {
		t.Errorf("heap grew by %d MiB under the floods", grown>>20)
	}
	for i, f := range floods {
		select {
		case err := <-f:
			if err == nil {
				t.Errorf("flood %d was never dropped", i)
			}
		case <-time.After(70 * time.Second):
			t.Fatalf("flood %d still running", i)
		}
	}
	<-sleepy
	// The sleepy connection's calls run out; then memory goes back.
	deadline := time.Now().Add(30 * time.Second)
	for {
		now := heapAlloc()
		if int64(now)-int64(idle) < 8<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("heap %d MiB above idle after the floods ended", (int64(now)-int64(idle))>>20)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestConnIDsDistinct: every connection has its own identity.
func TestConnIDsDistinct(t *testing.T) {
	tw := newTwoWay(t, &Server{})
	seen := map[uint64]bool{}
	for i := range 5 {
		c := dialTwoWay(t, tw.addr)
		if err := c.Call(context.Background(), twBind, u32(100+i), nil); err != nil {
			t.Fatal(err)
		}
		id := tw.conn(uint32(100 + i)).ID()
		if seen[id] {
			t.Fatalf("connection id %d reused", id)
		}
		seen[id] = true
	}
	var n atomic.Int32
	conn := tw.conn(100)
	conn.OnClose(func() { n.Add(1) })
	conn.Close()
	<-conn.Done()
	conn.OnClose(func() { n.Add(1) })
	if n.Load() != 2 {
		t.Fatalf("OnClose ran %d times, want 2 (one registered before, one after)", n.Load())
	}
}

// TestDeferredReplies: a handler that defers its reply frees its worker at once
// (with one worker, other calls are served meanwhile), and the reply sent later
// from another goroutine reaches the caller; a dropped one releases the call's
// budget.
func TestDeferredReplies(t *testing.T) {
	tw := newTwoWay(t, &Server{MaxInFlight: 1, DRC: NewDRC(100, 1<<20)})
	c := dialTwoWay(t, tw.addr)
	ctx := context.Background()
	var wg sync.WaitGroup
	var late atomic.Int32
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var res u32res
			if err := c.Call(ctx, twDefer, u32(1000+i), &res); err != nil || res.v != uint32(1001+i) {
				t.Errorf("deferred call %d: %v, %d", i, err, res.v)
			}
			late.Add(1)
		}()
	}
	for range 8 { // the eight are deferred, holding no worker
		waitFor(t, tw.deferred, "the DEFER calls to defer")
	}
	var res u32res
	if err := c.Call(ctx, twEcho, u32(1), &res); err != nil || res.v != 1 {
		t.Fatalf("echo with every deferred call outstanding: %v", err)
	}
	if n := late.Load(); n != 0 {
		t.Fatalf("%d deferred calls answered before their time", n)
	}
	tw.releaseDeferred()
	wg.Wait()

	// A dropped call gets no reply: the caller's own timeout ends it.
	dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := c.Call(dctx, twDefer, u32(0), nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("dropped call: %v", err)
	}
	if err := c.Call(ctx, twEcho, u32(0), &res); err != nil {
		t.Fatal(err)
	}
}

// TestCloseWithCopyHeld: Close ends the connection for the peer even while
// another descriptor of its socket is open (a forked child's copy before its
// exec): the peer reads EOF, and does not wait for its own call timeout.
func TestCloseWithCopyHeld(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	cp, err := nc.(*net.TCPConn).File() // a second descriptor of the socket
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close()
	c := newConn(nc, connConfig{network: "tcp", parent: context.Background(), log: slog.Default()})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := peer.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("peer read %d, %v after Close with a copy held; want EOF", n, err)
	}
}
