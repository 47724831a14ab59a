package metrics

import (
	"testing"
	"time"
)

// BenchmarkObserveCall is the metrics cost of one served RPC call as the request
// path pays it (the function resolved once per procedure at registration), one
// goroutine at a time and from every P at once. "lookup" is ObserveCall, which
// resolves the series on every call, for callers that did not resolve.
func BenchmarkObserveCall(b *testing.B) {
	r := New()
	observe := r.ResolveCall("nfs", 3, "GETATTR")
	b.Run("serial", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			observe(120 * time.Microsecond)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				observe(120 * time.Microsecond)
			}
		})
	})
	b.Run("lookup", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			r.ObserveCall("nfs", 3, "GETATTR", 120*time.Microsecond)
		}
	})
}

// BenchmarkClientObserveCall is what a mount pays per call for its
// snfs_client_rpc_total (every mount counts, for snfs stat MOUNTPOINT).
func BenchmarkClientObserveCall(b *testing.B) {
	c := NewClient()
	for i := 0; i < b.N; i++ {
		c.ObserveCall("nfs", 3, "GETATTR", 120*time.Microsecond)
	}
}
