package sunrpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"snfs/xdr"
)

const testProg = 0x20000099

type u32 uint32

func (v u32) Encode(w *xdr.Writer) { w.Uint32(uint32(v)) }

type u32res struct{ v uint32 }

func (r *u32res) Decode(x *xdr.Reader) error { r.v = x.Uint32(); return x.Err() }

// testServer serves a program with: 0 NULL, 1 ECHO (returns its argument, after
// sleeping that many milliseconds), 2 COUNT (non-idempotent: increments a counter).
func testServer(t *testing.T) (*Server, string, *atomic.Int64) {
	t.Helper()
	return testServerEchoing(t, nil)
}

// testServerEchoing is testServer telling echoing (if not nil, never
// blocking) the argument of each ECHO as its handler begins.
func testServerEchoing(t *testing.T, echoing chan<- uint32) (*Server, string, *atomic.Int64) {
	t.Helper()
	var counter atomic.Int64
	echo := func(ctx context.Context, c *Call, a *xdr.Reader, w *xdr.Writer) error {
		v := a.Uint32()
		if a.Err() != nil {
			return ErrGarbageArgs
		}
		select {
		case echoing <- v:
		default:
		}
		time.Sleep(time.Duration(v) * time.Millisecond)
		w.Uint32(v)
		return nil
	}
	count := func(ctx context.Context, c *Call, a *xdr.Reader, w *xdr.Writer) error {
		a.Uint32()
		time.Sleep(50 * time.Millisecond)
		w.Uint32(uint32(counter.Add(1)))
		return nil
	}
	s := &Server{DRC: NewDRC(100, 1<<20)}
	s.Register(&Program{Name: "test", Number: testProg, Versions: map[uint32][]Proc{
		2: {{Name: "NULL", Handler: func(context.Context, *Call, *xdr.Reader, *xdr.Writer) error { return nil }}},
		3: {
			{Name: "NULL", Handler: func(context.Context, *Call, *xdr.Reader, *xdr.Writer) error { return nil }},
			{Name: "ECHO", Handler: echo},
			{Name: "COUNT", Cache: true, Handler: count},
			{Name: "PANIC", Handler: func(context.Context, *Call, *xdr.Reader, *xdr.Writer) error { panic("boom") }},
		},
	}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	go s.ServeTCP(ln)
	go s.ServeUDP(pc)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return s, ln.Addr().String(), &counter
}

func dial(t *testing.T, network, addr string, vers uint32, opts ...DialOption) *Client {
	t.Helper()
	c, err := Dial(context.Background(), network, addr, testProg, vers, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestRPCErrors(t *testing.T) {
	_, addr, _ := testServer(t)
	ctx := context.Background()
	for _, network := range []string{"tcp", "udp"} {
		t.Run(network, func(t *testing.T) {
			c := dial(t, network, addr, 3)
			var e *RPCError
			if err := c.Call(ctx, 9, nil, nil); !errors.As(err, &e) || e.Accept != ProcUnavail {
				t.Errorf("unknown proc: %v", err)
			}
			if err := c.Call(ctx, 1, nil, nil); !errors.As(err, &e) || e.Accept != GarbageArgs {
				t.Errorf("missing args: %v", err)
			}
			if err := c.Call(ctx, 3, nil, nil); !errors.As(err, &e) || e.Accept != SystemErr {
				t.Errorf("panicking handler: %v", err)
			}
			c4, err := Dial(ctx, network, addr, testProg, 4)
			if err != nil {
				t.Fatal(err)
			}
			defer c4.Close()
			if err := c4.Call(ctx, 0, nil, nil); !errors.As(err, &e) || !e.Mismatch || e.Low != 2 || e.High != 3 {
				t.Errorf("wrong version: %v", err)
			}
			cp, err := Dial(ctx, network, addr, testProg+1, 3)
			if err != nil {
				t.Fatal(err)
			}
			defer cp.Close()
			if err := cp.Call(ctx, 0, nil, nil); !errors.As(err, &e) || e.Accept != ProgUnavail {
				t.Errorf("unknown program: %v", err)
			}
			bad := c.WithAuth(OpaqueAuth{Flavor: 6, Body: []byte{1, 2, 3, 4}})
			if err := bad.Call(ctx, 0, nil, nil); !errors.As(err, &e) || !e.Denied || e.Auth != AuthBadCred {
				t.Errorf("unknown flavor: %v", err)
			}
			garbled := c.WithAuth(OpaqueAuth{Flavor: AuthSys, Body: []byte{0, 0, 0, 1}})
			if err := garbled.Call(ctx, 0, nil, nil); !errors.As(err, &e) || !e.Denied || e.Auth != AuthBadCred {
				t.Errorf("malformed AUTH_SYS: %v", err)
			}
			var res u32res
			if err := c.Call(ctx, 1, u32(5), &res); err != nil || res.v != 5 {
				t.Errorf("echo: %v %d", err, res.v)
			}
		})
	}
}

// TestConcurrentOutOfOrder sends a slow call and a fast one on one connection; the
// fast one must come back first.
func TestConcurrentOutOfOrder(t *testing.T) {
	_, addr, _ := testServer(t)
	c := dial(t, "tcp", addr, 3)
	ctx := context.Background()
	var order []uint32
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, d := range []uint32{300, 1} {
		wg.Add(1)
		go func(d uint32) {
			defer wg.Done()
			var res u32res
			if err := c.Call(ctx, 1, u32(d), &res); err != nil {
				t.Error(err)
			}
			mu.Lock()
			order = append(order, res.v)
			mu.Unlock()
		}(d)
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	if len(order) != 2 || order[0] != 1 {
		t.Fatalf("replies in order %v; want the fast call first", order)
	}
}

// rawCall writes a call as several record-marking fragments and reads the reply.
func TestMultiFragmentRecord(t *testing.T) {
	_, addr, _ := testServer(t)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var w xdr.Writer
	EncodeCall(&w, &CallHeader{XID: 42, Prog: testProg, Vers: 3, Proc: 1, Cred: OpaqueAuth{}, Verf: OpaqueAuth{}})
	w.Uint32(3)
	msg := w.Bytes()
	var out bytes.Buffer
	for i := 0; i < len(msg); i += 7 {
		end := min(i+7, len(msg))
		h := uint32(end - i)
		if end == len(msg) {
			h |= lastFragment
		}
		binary.Write(&out, binary.BigEndian, h)
		out.Write(msg[i:end])
	}
	conn.Write(out.Bytes())
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	rec, err := readRecord(bufio.NewReader(conn), nil, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	r := xdr.NewReader(rec)
	xid, err := decodeReply(r)
	if err != nil || xid != 42 || r.Uint32() != 3 {
		t.Fatalf("xid %d err %v", xid, err)
	}
}

func TestOversizedRecordClosesConnection(t *testing.T) {
	s, addr, _ := testServer(t)
	_ = s
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	binary.Write(conn, binary.BigEndian, uint32(lastFragment|0x7fffffff))
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(make([]byte, 4)); err == nil {
		t.Fatal("server answered an oversized record")
	}
	// The server is still alive for others.
	c := dial(t, "tcp", addr, 3)
	if err := c.Call(context.Background(), 0, nil, nil); err != nil {
		t.Fatal(err)
	}
}

// TestDRC retransmits a non-idempotent call with the same xid: while it runs the
// duplicate is dropped, after it completes the saved reply comes back, and the
// handler ran once.
func TestDRC(t *testing.T) {
	s, addr, counter := testServer(t)
	ctx := context.Background()
	c := dial(t, "tcp", addr, 3)
	xid := c.NextXID()
	var a, b u32res
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := c.CallXID(ctx, xid, 2, u32(0), &a); err != nil {
			t.Error(err)
		}
	}()
	// The first call has reached the cache (its handler runs for 50 ms).
	for deadline := time.Now().Add(10 * time.Second); !s.DRC.holds(xid); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first call never reached the duplicate request cache")
		}
	}
	// A second connection, as after a reconnect, sends the same call while it runs.
	c2 := dial(t, "tcp", addr, 3, WithTimeout(200*time.Millisecond))
	if err := c2.CallXID(ctx, xid, 2, u32(0), &b); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if a.v != 1 || b.v != 1 || counter.Load() != 1 {
		t.Fatalf("replies %d %d, handler ran %d times", a.v, b.v, counter.Load())
	}
	hits, drops := s.DRC.Stats()
	if hits < 1 || drops < 1 {
		t.Fatalf("DRC hits %d drops %d", hits, drops)
	}
	// Same xid, different arguments: a different call.
	if err := c.CallXID(ctx, xid, 2, u32(1), &a); err != nil || a.v != 2 {
		t.Fatalf("different args: %v %d", err, a.v)
	}
}

// holds reports whether the cache has an entry, in progress or done, for a
// call with this xid.
func (d *DRC) holds(xid uint32) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for k := range d.entries {
		if k.XID == xid {
			return true
		}
	}
	return false
}

func TestDRCBounded(t *testing.T) {
	d := NewDRC(10, 1<<20)
	for i := 0; i < 1000; i++ {
		k := DRCKey{Addr: "a", XID: uint32(i)}
		d.start(k)
		d.finish(k, []byte("reply"))
	}
	if len(d.entries) != 10 || d.lru.Len() != 10 {
		t.Fatalf("%d entries", len(d.entries))
	}
}

func TestUDPRetransmit(t *testing.T) {
	// A UDP "server" that drops the first datagram and answers the second: the
	// client must resend with the same xid.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	xids := make(chan uint32, 4)
	go func() {
		buf := make([]byte, 65536)
		for i := 0; ; i++ {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			h, err := DecodeCall(xdr.NewReader(buf[:n]))
			if err != nil {
				continue
			}
			xids <- h.XID
			if i == 0 {
				continue
			}
			var w xdr.Writer
			encodeAccepted(&w, h.XID, Success)
			pc.WriteTo(w.Bytes(), from)
		}
	}()
	c, err := Dial(context.Background(), "udp", pc.LocalAddr().String(), testProg, 3, WithTimeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Call(context.Background(), 0, nil, nil); err != nil {
		t.Fatal(err)
	}
	if a, b := <-xids, <-xids; a != b {
		t.Fatalf("retransmission used xid %d, first %d", b, a)
	}
}

func TestShutdownFinishesInFlight(t *testing.T) {
	s := &Server{}
	started := make(chan struct{}, 1)
	s.Register(&Program{Name: "t", Number: testProg, Versions: map[uint32][]Proc{3: {
		{Name: "SLOW", Handler: func(ctx context.Context, c *Call, a *xdr.Reader, w *xdr.Writer) error {
			select {
			case started <- struct{}{}:
			default:
			}
			time.Sleep(200 * time.Millisecond)
			w.Uint32(9)
			return nil
		}}}}})
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go s.ServeTCP(ln)
	c := dial(t, "tcp", ln.Addr().String(), 3)
	done := make(chan error, 1)
	var res u32res
	go func() { done <- c.Call(context.Background(), 0, nil, &res) }()
	<-started // the call is in flight
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil || res.v != 9 {
		t.Fatalf("in-flight call: %v %d", err, res.v)
	}
}

// tcpPair returns both ends of a loopback TCP connection, closed at the test's end.
func tcpPair(t *testing.T) (client, srv net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	srv, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return client, srv
}

// TestCombinedReplyWrites: replies handed to one connection's writer from many
// goroutines at once (as a released batch of gathered writes is) each arrive once,
// whole and in one record, and each is released once written.
func TestCombinedReplyWrites(t *testing.T) {
	client, srv := tcpPair(t)
	var released atomic.Int64
	c := newCombiner(newBuffersWriter(srv, 0), func(b *[]byte) []byte { return *b },
		func(b *[]byte) { released.Add(1) })
	const n, rounds = 32, 50
	var wg sync.WaitGroup
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				rb := getBuf()
				*rb = append(*rb, 0, 0, 0, 0)
				*rb = binary.BigEndian.AppendUint32(*rb, uint32(g<<16|r))
				*rb = append(*rb, bytes.Repeat([]byte{byte(g)}, 100+g*37)...)
				putMarker(*rb, len(*rb)-4)
				if err := c.write(rb); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	seen := map[uint32]bool{}
	br := bufio.NewReader(client)
	for range n * rounds {
		rec, err := readRecord(br, nil, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		id := binary.BigEndian.Uint32(rec)
		g := int(id >> 16)
		if seen[id] || g >= n || !bytes.Equal(rec[4:], bytes.Repeat([]byte{byte(g)}, 100+g*37)) {
			t.Fatalf("reply %x: duplicate or damaged (%d bytes)", id, len(rec))
		}
		seen[id] = true
	}
	wg.Wait()
	if got := released.Load(); got != n*rounds {
		t.Fatalf("%d replies released, want %d", got, n*rounds)
	}
}

// TestTCPReconnectResends: many calls in flight on one TCP connection (their writes
// combined); the server reads them all and drops the connection without replying.
// Every call is sent again on a fresh connection with its own xid, and returns.
func TestTCPReconnectResends(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const calls = 16
	first := make(chan map[uint32]bool, 1)
	second := make(chan map[uint32]bool, 1)
	go func() {
		for conn := 0; conn < 2; conn++ {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			br := bufio.NewReader(nc)
			seen := map[uint32]bool{}
			for len(seen) < calls {
				rec, err := readRecord(br, nil, 1<<20)
				if err != nil {
					break
				}
				h, err := DecodeCall(xdr.NewReader(rec))
				if err != nil {
					break
				}
				seen[h.XID] = true
				if conn == 1 {
					var w xdr.Writer
					w.Uint32(0)
					encodeAccepted(&w, h.XID, Success)
					b := w.Bytes()
					putMarker(b, len(b)-4)
					nc.Write(b)
				}
			}
			if conn == 0 {
				nc.Close()
				first <- seen
			} else {
				second <- seen
				defer nc.Close()
			}
		}
	}()
	c := dial(t, "tcp", ln.Addr().String(), 3)
	var wg sync.WaitGroup
	for range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Call(context.Background(), 0, nil, nil); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	a, b := <-first, <-second
	if len(a) != calls {
		t.Fatalf("first connection got %d calls, want %d", len(a), calls)
	}
	for x := range a {
		if !b[x] {
			t.Errorf("xid %d was not resent on the new connection", x)
		}
	}
}
