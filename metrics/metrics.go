// Package metrics keeps the server's counters and histograms and writes them in the
// Prometheus text exposition format. It implements sunrpc.Observer for per-procedure
// call counts and latencies. It owns no goroutines and knows nothing of NFS beyond
// the names it is given.
package metrics

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"sync"
	"time"
)

// LatencyBuckets are the upper bounds (seconds) of the RPC latency histogram.
var LatencyBuckets = []float64{25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1, 5}

// Histogram is a fixed-bucket histogram.
type Histogram struct {
	bounds []float64
	counts []uint64 // per bucket, not cumulative; last is +Inf
	sum    float64
	n      uint64
}

func newHistogram(bounds []float64) *Histogram {
	return &Histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

func (h *Histogram) observe(v float64) {
	i := sort.SearchFloat64s(h.bounds, v)
	h.counts[i]++
	h.sum += v
	h.n++
}

// Registry holds every metric. Safe for concurrent use.
type Registry struct {
	mu       sync.Mutex
	families map[string]*family     // guarded by mu
	calls    map[callKey]callSeries // guarded by mu: per-call series, labels rendered once
}

type callKey struct {
	program string
	vers    uint32
	proc    string
}

type callSeries struct{ total, seconds *series }

type family struct {
	name, help, typ string
	bounds          []float64
	series          map[string]*series // by rendered label set
}

type series struct {
	labels string
	value  float64
	hist   *Histogram
}

// New returns an empty registry.
func New() *Registry {
	return &Registry{families: map[string]*family{}, calls: map[callKey]callSeries{}}
}

// Labels renders label pairs ("k1", "v1", "k2", "v2") in the exposition syntax.
func Labels(kv ...string) string {
	var b strings.Builder
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", kv[i], kv[i+1])
	}
	return b.String()
}

func (r *Registry) get(name, help, typ string, bounds []float64, labels string) *series {
	f := r.families[name]
	if f == nil {
		f = &family{name: name, help: help, typ: typ, bounds: bounds, series: map[string]*series{}}
		r.families[name] = f
	}
	s := f.series[labels]
	if s == nil {
		s = &series{labels: labels}
		if typ == "histogram" {
			s.hist = newHistogram(f.bounds)
		}
		f.series[labels] = s
	}
	return s
}

// Add adds v to a counter.
func (r *Registry) Add(name, help, labels string, v float64) {
	r.mu.Lock()
	r.get(name, help, "counter", nil, labels).value += v
	r.mu.Unlock()
}

// Observe records v in a histogram with the given bucket bounds.
func (r *Registry) Observe(name, help string, bounds []float64, labels string, v float64) {
	r.mu.Lock()
	r.get(name, help, "histogram", bounds, labels).hist.observe(v)
	r.mu.Unlock()
}

const (
	rpcTotal   = "snfs_server_rpc_total"
	rpcSeconds = "snfs_server_rpc_duration_seconds"
)

// callSeriesLocked returns the series of one procedure. Called with mu held.
func (r *Registry) callSeriesLocked(program string, vers uint32, proc string) callSeries {
	k := callKey{program, vers, proc}
	cs, ok := r.calls[k]
	if !ok {
		l := Labels("program", program, "version", fmt.Sprint(vers), "proc", proc)
		cs = callSeries{
			total:   r.get(rpcTotal, "RPC calls served, by program, version and procedure.", "counter", nil, l),
			seconds: r.get(rpcSeconds, "Time to serve an RPC call, by procedure.", "histogram", LatencyBuckets, l),
		}
		r.calls[k] = cs
	}
	return cs
}

// Declare makes a program's procedures appear (at zero) before they are called.
func (r *Registry) Declare(program string, vers uint32, procs []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range procs {
		r.callSeriesLocked(program, vers, p)
	}
}

// ObserveCall implements sunrpc.Observer.
func (r *Registry) ObserveCall(program string, vers uint32, proc string, d time.Duration) {
	r.mu.Lock()
	cs := r.callSeriesLocked(program, vers, proc)
	cs.total.value++
	cs.seconds.hist.observe(d.Seconds())
	r.mu.Unlock()
}

// WriteText writes every metric in the Prometheus text format.
func (r *Registry) WriteText(w io.Writer) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := make([]string, 0, len(r.families))
	for n := range r.families {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		f := r.families[n]
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", f.name, f.help, f.name, f.typ)
		keys := make([]string, 0, len(f.series))
		for k := range f.series {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			s := f.series[k]
			if s.hist == nil {
				fmt.Fprintf(&b, "%s{%s} %s\n", f.name, s.labels, fmtFloat(s.value))
				continue
			}
			sep := ""
			if s.labels != "" {
				sep = ","
			}
			var cum uint64
			for i, bound := range s.hist.bounds {
				cum += s.hist.counts[i]
				fmt.Fprintf(&b, "%s_bucket{%s%sle=\"%s\"} %d\n", f.name, s.labels, sep, fmtFloat(bound), cum)
			}
			cum += s.hist.counts[len(s.hist.bounds)]
			fmt.Fprintf(&b, "%s_bucket{%s%sle=\"+Inf\"} %d\n", f.name, s.labels, sep, cum)
			fmt.Fprintf(&b, "%s_sum{%s} %s\n%s_count{%s} %d\n", f.name, s.labels, fmtFloat(s.hist.sum), f.name, s.labels, s.hist.n)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func fmtFloat(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return fmt.Sprintf("%d", int64(v))
	}
	return fmt.Sprintf("%g", v)
}
