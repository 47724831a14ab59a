package sunrpc

import (
	"context"
	"net"
	"testing"
	"time"

	"snfs/xdr"
)

// BenchmarkNullRoundTrip measures one synchronous NULL call over loopback TCP: the
// transport's own latency, with nothing to do in the handler.
func BenchmarkNullRoundTrip(b *testing.B) { benchNull(b) }

// BenchmarkNullRoundTripWatched is BenchmarkNullRoundTrip with a server watch
// (WithServerWatch, as a mount's client has): its cost per call.
func BenchmarkNullRoundTripWatched(b *testing.B) {
	benchNull(b, WithServerWatch(15*time.Second, func(bool, time.Duration) {}))
}

func benchNull(b *testing.B, opts ...DialOption) {
	s := &Server{}
	s.Register(&Program{Name: "t", Number: testProg, Versions: map[uint32][]Proc{3: {
		{Name: "NULL", Handler: func(context.Context, *Call, *xdr.Reader, *xdr.Writer) error { return nil }}}}})
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go s.ServeTCP(ln)
	defer s.Shutdown(context.Background())
	c, err := Dial(context.Background(), "tcp", ln.Addr().String(), testProg, 3, opts...)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := c.Call(context.Background(), 0, nil, nil); err != nil {
			b.Fatal(err)
		}
	}
}
