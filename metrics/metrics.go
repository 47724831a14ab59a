// Package metrics keeps the server's counters and histograms, on
// github.com/prometheus/client_golang, and serves them in the Prometheus text
// format with the Go runtime's and the process's own metrics. It resolves every
// series once (per procedure when sunrpc registers a program, per export when the
// server creates it), so the request path touches no label map and no
// registry-wide lock. It owns no goroutines and knows nothing of NFS beyond the
// names it is given.
package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// LatencyBuckets are the upper bounds (seconds) of the RPC latency histogram.
var LatencyBuckets = []float64{25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1, 5}

// BatchBuckets are the upper bounds of the write-gathering batch size histogram.
var BatchBuckets = []float64{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128}

// Registry holds the server's metric families.
type Registry struct {
	reg *prometheus.Registry

	rpcTotal    *prometheus.CounterVec
	rpcSeconds  *prometheus.HistogramVec
	gatherBatch *prometheus.HistogramVec
	gatherWait  *prometheus.CounterVec
	fsync       *prometheus.CounterVec
	attrHits    *prometheus.CounterVec
	attrMisses  *prometheus.CounterVec
}

// New returns a registry with the server's families and the Go runtime and
// process collectors.
func New() *Registry {
	r := &Registry{reg: prometheus.NewRegistry()}
	call := []string{"program", "version", "proc"}
	r.rpcTotal = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "snfs_server_rpc_total",
		Help: "RPC calls served, by program, version and procedure."}, call)
	r.rpcSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "snfs_server_rpc_duration_seconds",
		Help: "Time to serve an RPC call, by procedure.", Buckets: LatencyBuckets}, call)
	exp := []string{"export"}
	r.gatherBatch = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "snfs_server_write_gather_batch_size",
		Help: "Stable WRITEs and COMMITs covered by one flush.", Buckets: BatchBuckets}, exp)
	r.gatherWait = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "snfs_server_write_gather_wait_seconds_total",
		Help: "Time spent waiting to gather more writes before a flush."}, exp)
	r.fsync = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "snfs_server_fsync_total",
		Help: "fsync and fdatasync calls, by export."}, exp)
	r.attrHits = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "snfs_server_attr_cache_hits_total",
		Help: "READDIRPLUS entries whose attributes came from the attribute cache."}, exp)
	r.attrMisses = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "snfs_server_attr_cache_misses_total",
		Help: "READDIRPLUS entries whose attributes were read from the file system."}, exp)
	r.reg.MustRegister(r.rpcTotal, r.rpcSeconds, r.gatherBatch, r.gatherWait, r.fsync, r.attrHits, r.attrMisses,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// Handler serves the registry at /metrics.
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{Registry: r.reg})
}

// MustRegister adds collectors of other packages (the consistency table's).
func (r *Registry) MustRegister(cs ...prometheus.Collector) { r.reg.MustRegister(cs...) }

// Gatherer returns the underlying registry, for tests and other exporters.
func (r *Registry) Gatherer() prometheus.Gatherer { return r.reg }

// ResolveCall implements sunrpc.CallResolver: the series of one procedure, made
// (at zero) now and observed by the returned function on every call.
func (r *Registry) ResolveCall(program string, vers uint32, proc string) func(time.Duration) {
	v := strconv.FormatUint(uint64(vers), 10)
	total := r.rpcTotal.WithLabelValues(program, v, proc)
	seconds := r.rpcSeconds.WithLabelValues(program, v, proc)
	return func(d time.Duration) {
		total.Inc()
		seconds.Observe(d.Seconds())
	}
}

// ObserveCall implements sunrpc.Observer for procedures that were not resolved
// (it looks the series up on every call).
func (r *Registry) ObserveCall(program string, vers uint32, proc string, d time.Duration) {
	r.ResolveCall(program, vers, proc)(d)
}

// Export is one export's series, resolved once.
type Export struct {
	GatherBatch prometheus.Observer // stable WRITEs and COMMITs per flush
	GatherWait  prometheus.Counter  // seconds waited to gather
	Fsync       prometheus.Counter  // flushes
	AttrHits    prometheus.Counter  // READDIRPLUS attributes from the cache
	AttrMisses  prometheus.Counter  // READDIRPLUS attributes read from the file system
}

// Export returns the series of the export at path (made at zero now).
func (r *Registry) Export(path string) *Export {
	return &Export{
		GatherBatch: r.gatherBatch.WithLabelValues(path),
		GatherWait:  r.gatherWait.WithLabelValues(path),
		Fsync:       r.fsync.WithLabelValues(path),
		AttrHits:    r.attrHits.WithLabelValues(path),
		AttrMisses:  r.attrMisses.WithLabelValues(path),
	}
}
