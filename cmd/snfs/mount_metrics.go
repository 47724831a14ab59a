package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strings"
	"time"

	"snfs/metrics"
	"snfs/mount"
	"snfs/mount/cachemgr"
	"snfs/mount/vfs"
)

// clientMetrics registers v's snfs-mode counters (if any) in reg.
func clientMetrics(reg *metrics.Client, v *vfs.FS) {
	sn := cachemgr.SNFS(v)
	if sn == nil {
		reg.Register(metrics.ClientSources{ListingsKept: v.Stats().ListingsKept.Load})
		return
	}
	st := sn.SNFSStats()
	cbs := map[string]func() uint64{}
	for _, m := range cachemgr.CallbackModes {
		cbs[m.String()] = func() uint64 { return st.CallbacksByMode(m) }
	}
	names := map[string]func() uint64{}
	for _, e := range cachemgr.NameCacheEvents {
		names[e] = func() uint64 { return sn.NameCacheCount(e) }
	}
	reg.Register(metrics.ClientSources{
		WrittenBackBytes:    st.WriteBackBytes.Load,
		WriteBacksCancelled: st.Cancelled.Load,
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
		NameCache:           names,
	})
}

// statusMetrics registers the gauges of snfs status (metrics.MountStatus)
// of m in reg, both modes.
func statusMetrics(reg *metrics.Client, m *mount.Mount) {
	reg.RegisterStatus(m.Mode == mount.SNFS, func() metrics.MountStatus { return statusGauges(m.Status()) })
}

// statusGauges are st's figures that are numbers.
func statusGauges(st mount.Status) metrics.MountStatus {
	g := metrics.MountStatus{Connected: st.Connection.Connected, ConnectionChanged: st.Connection.Since,
		DirtyBytes: st.Dirty.Bytes, DirtyFiles: st.Dirty.Files, Recovering: st.Connection.Recovering,
		Disconnected: st.Connection.Offline}
	if st.Dirty.OldestSeconds != nil {
		g.DirtyOldest = secondsDuration(*st.Dirty.OldestSeconds)
	}
	if s := st.SNFS; s != nil {
		g.PermitsHeld, g.Conflicts = s.Permits.Held, s.Conflicts.Count
		g.LogRecords, g.LogBytes, g.LogOldest = s.Log.Records, s.Log.Bytes, secondsDuration(s.Log.OldestSeconds)
	}
	return g
}

func secondsDuration(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// statusHandler serves m's Status in JSON (GET /status on the stats socket:
// snfs status MOUNTPOINT).
func statusHandler(m *mount.Mount) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(m.Status())
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

// statsSocket is the unix socket on which the mount of dir serves its
// metrics for `snfs stat MOUNTPOINT`: beside its pid file, named after dir,
// or after a hash of it where that name would not fit in a socket address
// (108 bytes).
func statsSocket(dir string) string {
	if p := strings.TrimSuffix(pidFile(dir), ".pid") + ".stats.sock"; len(p) < 100 {
		return p
	}
	h := sha256.Sum256([]byte(dir))
	return filepath.Join(runDir(), hex.EncodeToString(h[:12])+".stats.sock")
}

// serveStatsSocket serves reg's /metrics and the mount's status (/status,
// for snfs status MOUNTPOINT) on statsSocket(dir) until the returned stop is
// called. Every mount does, with or without --metrics: a
// unix socket is reachable from this machine only and needs no port, so that
// `snfs stat MOUNTPOINT` works on any mount. It is readable by every user,
// as nfsstat's /proc/net/rpc/nfs is; the profiles stay on --metrics. A
// failure is logged, not fatal: the mount works without it.
func serveStatsSocket(dir string, reg *metrics.Client, status http.Handler, log *slog.Logger) (stop func()) {
	path := statsSocket(dir)
	os.MkdirAll(runDir(), 0o755)
	os.Remove(path) // left by a mount process that did not end cleanly
	ln, err := net.Listen("unix", path)
	if err == nil {
		err = os.Chmod(path, 0o666)
	}
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		log.Warn("no stats socket: snfs stat "+dir+" will not work", "err", err)
		return func() {}
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", reg.Handler())
	mux.Handle("/status", status)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	log.Debug("stats socket", "path", path)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx) // closes ln, which removes the socket file
		<-done
	}
}
