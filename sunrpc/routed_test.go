package sunrpc

import (
	"context"
	"encoding/binary"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"snfs/xdr"
)

// TestCallRoutedBeforeNextCall: the peer answers a call made with CallRouted
// and, in the same write, sends a call of its own; routed has run by the time
// that call's handler runs, every time (the reader runs it before it reads on).
// With Call, the caller's goroutine learns of the reply in its own time.
func TestCallRoutedBeforeNextCall(t *testing.T) {
	var routed atomic.Bool
	bound := make(chan *Conn, 1)
	s := &Server{}
	s.Register(&Program{Name: "routed", Number: testProg, Versions: map[uint32][]Proc{1: {
		{Name: "BIND", Handler: func(ctx context.Context, c *Call, a *xdr.Reader, w *xdr.Writer) error {
			bound <- c.Conn
			return nil
		}},
		{Name: "CHECK", Handler: func(ctx context.Context, c *Call, a *xdr.Reader, w *xdr.Writer) error {
			if routed.Load() {
				w.Uint32(1)
			} else {
				w.Uint32(0)
			}
			return nil
		}},
	}}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.ServeTCP(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	nc, br := rawConn(t, ln.Addr().String())
	if _, err := nc.Write(encodeCallMsg(1, testProg, 1, 0, nullVerf, nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := readRecord(br, nil, 1<<16); err != nil {
		t.Fatal(err)
	}
	conn := <-bound
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 300 {
		routed.Store(false)
		done := make(chan error, 1)
		go func() {
			done <- conn.CallRouted(ctx, cbProg, 1, 0, nullVerf, nil, nil, func(err error) {
				if err == nil {
					routed.Store(true)
				}
			})
		}()
		call, err := readRecord(br, nil, 1<<16)
		if err != nil {
			t.Fatal(err)
		}
		w := xdr.NewWriter(nil)
		w.Uint32(0)
		encodeAccepted(w, binary.BigEndian.Uint32(call), Success)
		reply := w.Bytes()
		putMarker(reply, len(reply)-4)
		next := uint32(1000 + i)
		if _, err := nc.Write(append(reply, encodeCallMsg(next, testProg, 1, 1, nullVerf, nil)...)); err != nil {
			t.Fatal(err)
		}
		rec, err := readRecord(br, nil, 1<<16)
		if err != nil {
			t.Fatal(err)
		}
		if binary.BigEndian.Uint32(rec) != next {
			t.Fatalf("reply to xid %d, want %d", binary.BigEndian.Uint32(rec), next)
		}
		if v := binary.BigEndian.Uint32(rec[len(rec)-4:]); v != 1 {
			t.Fatalf("round %d: the call sent after the reply ran before routed", i)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
