package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"snfs/metrics"
	"snfs/mount/vfs"
)

// clientMetrics registers v's snfs-mode counters (if any) in reg.
func clientMetrics(reg *metrics.Client, v *vfs.FS) {
	st := v.SNFSStats()
	if st == nil {
		reg.Register(metrics.ClientSources{ListingsKept: v.Stats().ListingsKept.Load})
		return
	}
	cbs := map[string]func() uint64{}
	for _, m := range vfs.CallbackModes {
		cbs[m.String()] = func() uint64 { return st.CallbacksByMode(m) }
	}
	reg.Register(metrics.ClientSources{
		WrittenBackBytes:    st.WriteBackBytes.Load,
		WriteBacksCancelled: st.Cancelled.Load,
		DirtyBytes:          v.DirtyBytes,
		CacheHits:           st.CacheHits.Load,
		CacheHitBytes:       st.CacheHitBytes.Load,
		XattrHits:           st.XattrHits.Load,
		PassthroughOpens:    st.PassthroughOpens.Load,
		ListingsKept:        v.Stats().ListingsKept.Load,
		Callbacks:           cbs,
		Conflicts:           st.Conflicts.Load,
		Fenced:              st.Fenced.Load,
		Reclaimed:           st.Reclaimed.Load,
		Pinned:              st.Pinned.Load,
	})
}

// serveMetrics serves reg at http://addr/metrics until the returned stop is
// called.
func serveMetrics(addr string, reg *metrics.Client, log *slog.Logger) (stop func(), err error) {
	ml, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index) // as snfs serve: profiles of a slow mount
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.Handle("/metrics", reg.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ml)
	}()
	log.Info("metrics", "addr", ml.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
	}, nil
}
