package metrics

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ClientSources are the mount's counters the client registry reads at each
// scrape (snfs mode; nfs mode has only the RPC counts).
type ClientSources struct {
	WrittenBackBytes    func() uint64
	WriteBacksCancelled func() uint64
	DirtyBytes          func() int64
	CacheHits           func() uint64
	CacheHitBytes       func() uint64
	XattrHits           func() uint64 // extended-attribute reads served from the cache
	PassthroughOpens    func() uint64
	ListingsKept        func() uint64 // either mode
	// Callbacks by mode name.
	Callbacks map[string]func() uint64
	// Recovery (nil: not registered): conflict copies made by reintegration,
	// files the server answered SNFS_ERR_FENCED for, files reclaimed after
	// server restarts.
	Conflicts, Fenced, Reclaimed func() uint64
	// Pinned: callbacks that made the mount a file's pinned holder (its
	// kernel writes the file through passthrough).
	Pinned func() uint64
	// NameCache: the name cache's counters (directories under promises) by
	// event: hit, miss, fill, break, eviction, release, renewal.
	NameCache map[string]func() uint64
}

// Client holds a mount's metric families: snfs_client_rpc_total (it is the
// sunrpc.Observer of the mount's calls) and, with ClientSources, the
// write-back, dirty data, cache and callback families.
type Client struct {
	reg      *prometheus.Registry
	rpcTotal *prometheus.CounterVec
	// calls holds rpcTotal's series by callKey, resolved once: every mount
	// counts every call (snfs stat MOUNTPOINT), and a lookup by label
	// values costs several times a map load.
	calls sync.Map
}

// callKey names one series of snfs_client_rpc_total.
type callKey struct {
	program, proc string
	vers          uint32
}

// NewClient returns a client registry with snfs_client_rpc_total and the Go
// runtime and process collectors.
func NewClient() *Client {
	c := &Client{reg: prometheus.NewRegistry()}
	c.rpcTotal = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "snfs_client_rpc_total",
		Help: "RPC calls made that got a reply, by program, version and procedure (like nfsstat -c)."},
		[]string{"program", "version", "proc"})
	c.reg.MustRegister(c.rpcTotal, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return c
}

// Register adds the families of src that are set (all of them in snfs
// mode), read at each scrape. Call once.
func (c *Client) Register(src ClientSources) {
	counter := func(name, help string, f func() uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f()) })
	}
	if src.WrittenBackBytes != nil { // snfs mode
		c.reg.MustRegister(
			counter("snfs_client_written_back_bytes_total", "Bytes of dirty data written back to the server.", src.WrittenBackBytes),
			counter("snfs_client_writebacks_cancelled_total", "Files whose pending write-back a delete or truncation cancelled.", src.WriteBacksCancelled),
			counter("snfs_client_cache_hits_total", "Reads the mount served from the cache directory without a READ.", src.CacheHits),
			counter("snfs_client_cache_hit_bytes_total", "Bytes of those reads.", src.CacheHitBytes),
		)
	}
	if src.DirtyBytes != nil { // else RegisterStatus's (status.go)
		c.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "snfs_client_dirty_bytes",
			Help: "Dirty data in the cache directory waiting for write-back."}, func() float64 { return float64(src.DirtyBytes()) }))
	}
	if src.XattrHits != nil {
		c.reg.MustRegister(counter("snfs_client_xattr_cache_hits_total",
			"Extended-attribute reads (getxattr, listxattr) the mount served from a cached file's attributes.", src.XattrHits))
	}
	if src.PassthroughOpens != nil {
		c.reg.MustRegister(counter("snfs_client_passthrough_opens_total",
			"Opens whose reads and writes the kernel does on the cache file itself (FUSE passthrough).", src.PassthroughOpens))
	}
	for _, m := range []struct {
		name, help string
		f          func() uint64
	}{
		{"snfs_client_listings_kept_total", "Directory listings the kernel asked for again that the mount answered from the copy it kept, without a call.", src.ListingsKept},
		{"snfs_client_conflicts_total", "Conflicts kept: dirty data of a file the server's copy of which changed meanwhile, saved beside it.", src.Conflicts},
		{"snfs_client_fenced_total", "Files the server answered SNFS_ERR_FENCED for.", src.Fenced},
		{"snfs_client_reclaimed_files_total", "Files reported in RECLAIMs after server restarts.", src.Reclaimed},
		{"snfs_client_pinned_total", "Callbacks that made the mount a file's pinned holder: its kernel writes the file through passthrough, and other clients' requests wait for its write-backs.", src.Pinned},
	} {
		if m.f != nil {
			c.reg.MustRegister(counter(m.name, m.help, m.f))
		}
	}
	for event, f := range src.NameCache {
		c.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "snfs_client_name_cache_events_total",
			Help:        "The name cache's work (directories cached under promises): lookups answered from a listing (hit) or not (miss), listings made (fill), promises broken (break), listings dropped for room (eviction), promises given back (release) and renewed (renewal).",
			ConstLabels: prometheus.Labels{"event": event}},
			func() float64 { return float64(f()) }))
	}
	for mode, f := range src.Callbacks {
		c.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "snfs_client_callbacks_total",
			Help: "Callbacks received from the server, by mode.", ConstLabels: prometheus.Labels{"mode": mode}},
			func() float64 { return float64(f()) }))
	}
}

// ObserveCall implements sunrpc.Observer.
func (c *Client) ObserveCall(program string, vers uint32, proc string, _ time.Duration) {
	k := callKey{program, proc, vers}
	if v, ok := c.calls.Load(k); ok {
		v.(prometheus.Counter).Inc()
		return
	}
	ctr := c.rpcTotal.WithLabelValues(program, strconv.FormatUint(uint64(vers), 10), proc)
	c.calls.Store(k, ctr)
	ctr.Inc()
}

// Handler serves the registry at /metrics.
func (c *Client) Handler() http.Handler {
	return promhttp.HandlerFor(c.reg, promhttp.HandlerOpts{Registry: c.reg})
}

// Gatherer returns the underlying registry, for tests.
func (c *Client) Gatherer() prometheus.Gatherer { return c.reg }
