package consist

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"snfs/state"
)

// metrics are the table's and the driver's series. The table's counters and its
// census are read at scrape time (state.Machine.Stats scans the table: never
// per request).
type metrics struct {
	d          *Driver
	jukebox    prometheus.Counter
	timeouts   prometheus.Counter
	cbSeconds  *prometheus.HistogramVec
	cbFailures *prometheus.CounterVec

	reclaims     prometheus.Counter
	graceSeconds prometheus.Gauge
	graceEnd     *prometheus.CounterVec
	graceJukebox prometheus.Counter

	leases        prometheus.Counter
	leasesRefused prometheus.Counter
	leaseBreaks   prometheus.Counter

	entries   *prometheus.Desc
	promises  *prometheus.Desc
	callbacks *prometheus.Desc
	outcomes  *prometheus.Desc
	counters  map[string]*prometheus.Desc
}

var callbackBuckets = []float64{100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1, 2.5, 5, 10}

func newMetrics(d *Driver) *metrics {
	m := &metrics{d: d,
		jukebox: prometheus.NewCounter(prometheus.CounterOpts{Name: "snfs_server_consist_jukebox_total",
			Help: "OPENs and NFS requests answered NFS3ERR_JUKEBOX while callbacks were out (or the table was full)."}),
		timeouts: prometheus.NewCounter(prometheus.CounterOpts{Name: "snfs_server_consist_callback_timeouts_total",
			Help: "Callbacks not answered within the callback timeout."}),
		cbSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "snfs_server_consist_callback_seconds",
			Help: "Callback round trip, from writing it to its answer, by mode.", Buckets: callbackBuckets}, []string{"mode"}),
		cbFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "snfs_server_consist_callback_failures_total",
			Help: "Callbacks that failed (no answer, error, or the connection went), by mode."}, []string{"mode"}),
		reclaims: prometheus.NewCounter(prometheus.CounterOpts{Name: "snfs_server_consist_reclaims_total",
			Help: "Reclaim items (one client's state of one file) applied in the grace period after a restart."}),
		graceSeconds: prometheus.NewGauge(prometheus.GaugeOpts{Name: "snfs_server_consist_grace_seconds",
			Help: "Length of the last grace period, from the start of the server to its end."}),
		graceEnd: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "snfs_server_consist_grace_end_total",
			Help: "Grace periods ended, by why: all_reclaimed (every client known before the restart came back), timeout (the --grace bound), none (no client was known, or no grace configured)."},
			[]string{"reason"}),
		graceJukebox: prometheus.NewCounter(prometheus.CounterOpts{Name: "snfs_server_consist_grace_jukebox_total",
			Help: "OPENs and NFS requests answered NFS3ERR_JUKEBOX because the grace period lasted."}),
		leases: prometheus.NewCounter(prometheus.CounterOpts{Name: "snfs_server_consist_leases_total",
			Help: "File leases taken while a client may hold dirty blocks of the file."}),
		leasesRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: "snfs_server_consist_leases_refused_total",
			Help: "File leases that could not be taken (the file open elsewhere, a file system without leases)."}),
		leaseBreaks: prometheus.NewCounter(prometheus.CounterOpts{Name: "snfs_server_consist_lease_breaks_total",
			Help: "File leases broken by a local process's open on the server machine."}),
		entries:  prometheus.NewDesc("snfs_server_consist_entries", "State table entries, by state.", []string{"state"}, nil),
		promises: prometheus.NewDesc("snfs_server_consist_dir_promises", "Directory promises held by clients.", nil, nil),
		callbacks: prometheus.NewDesc("snfs_server_consist_callbacks_total", "Callbacks the table asked for, by mode.",
			[]string{"mode"}, nil),
		outcomes: prometheus.NewDesc("snfs_server_consist_callback_outcomes_total", "Callbacks ended, by outcome.",
			[]string{"outcome"}, nil),
		counters: map[string]*prometheus.Desc{},
	}
	for _, r := range []string{GraceAllReclaimed, GraceTimeout, GraceNone} {
		m.graceEnd.WithLabelValues(r)
	}
	for _, c := range [][2]string{
		{"fencings", "Clients fenced for a file after a callback failed or timed out."},
		{"opens", "OPENs applied to the table."},
		{"closes", "CLOSEs applied to the table."},
		{"accesses", "NFSv3 reads and changes applied to the table."},
		{"waits", "Requests parked until callbacks were answered."},
		{"refused", "Requests of fenced clients refused."},
		{"table_full", "OPENs refused because the table was full."},
		{"reclaim_callbacks", "Write-back and relinquish callbacks sent to make room in the table."},
		{"probes", "Callback path probes (CB_NULL)."},
		{"local_changes", "Changes made by local processes on the server machine to files in the table."},
		{"dir_grants", "LISTDIRs answered with a directory promise."},
		{"dir_refusals", "LISTDIRs answered without a directory promise (bounds, or a break still out)."},
		{"dir_breaks", "Directory promises broken (CALLBACK INVALIDATE of a directory)."},
		{"dir_waits", "Changes whose reply waited for directory promises to be broken."},
		{"dir_timeouts", "Directory promise breaks that ended at their deadline, unanswered."},
		{"permit_grants", "Write-back permits granted (GET_PERMIT, and directories made under a permit)."},
		{"permit_refusals", "GET_PERMITs refused (held by another client, recalled, bounds)."},
		{"permit_recalls", "Write-back permits recalled (CALLBACK RECALL_PERMIT)."},
		{"permit_revocations", "Write-back permit recalls that failed or ended at their deadline."},
		{"permit_waits", "Changes held back until a write-back permit's recall ended."},
	} {
		m.counters[c[0]] = prometheus.NewDesc("snfs_server_consist_"+c[0]+"_total", c[1], nil, nil)
	}
	return m
}

func (m *metrics) callbackSent(mode state.CallbackMode, d time.Duration, err error) {
	if err != nil {
		m.cbFailures.WithLabelValues(mode.String()).Inc()
		return
	}
	m.cbSeconds.WithLabelValues(mode.String()).Observe(d.Seconds())
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	m.jukebox.Describe(ch)
	m.timeouts.Describe(ch)
	m.cbSeconds.Describe(ch)
	m.cbFailures.Describe(ch)
	m.reclaims.Describe(ch)
	m.graceSeconds.Describe(ch)
	m.graceEnd.Describe(ch)
	m.graceJukebox.Describe(ch)
	m.leases.Describe(ch)
	m.leasesRefused.Describe(ch)
	m.leaseBreaks.Describe(ch)
	ch <- m.entries
	ch <- m.promises
	ch <- m.callbacks
	ch <- m.outcomes
	for _, d := range m.counters {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	m.jukebox.Collect(ch)
	m.timeouts.Collect(ch)
	m.cbSeconds.Collect(ch)
	m.cbFailures.Collect(ch)
	m.reclaims.Collect(ch)
	m.graceSeconds.Collect(ch)
	m.graceEnd.Collect(ch)
	m.graceJukebox.Collect(ch)
	m.leases.Collect(ch)
	m.leasesRefused.Collect(ch)
	m.leaseBreaks.Collect(ch)
	st := m.d.m.Stats(m.d.now())
	ds := m.d.dirs.Stats()
	ps := m.d.permits.Stats()
	ch <- prometheus.MustNewConstMetric(m.promises, prometheus.GaugeValue, float64(ds.Promises))
	for s, n := range st.ByState {
		ch <- prometheus.MustNewConstMetric(m.entries, prometheus.GaugeValue, float64(n), state.State(s).String())
	}
	for mode := state.Writeback; mode <= state.Relinquish; mode++ {
		ch <- prometheus.MustNewConstMetric(m.callbacks, prometheus.CounterValue, float64(st.Callbacks[mode]), mode.String())
	}
	for o, n := range st.Outcomes { // every outcome, whatever their order
		ch <- prometheus.MustNewConstMetric(m.outcomes, prometheus.CounterValue, float64(n), state.Outcome(o).String())
	}
	for name, v := range map[string]uint64{"fencings": st.Fencings, "opens": st.Opens, "closes": st.Closes,
		"accesses": st.Accesses, "waits": st.Waits, "refused": st.Refused, "table_full": st.TableFull,
		"reclaim_callbacks": st.ReclaimCallbacks, "probes": st.Probes, "local_changes": st.Changes,
		"dir_grants": ds.Grants, "dir_refusals": ds.Refusals, "dir_breaks": ds.Breaks, "dir_waits": ds.Waits,
		"dir_timeouts": ds.Timeouts, "permit_grants": ps.Grants, "permit_refusals": ps.Refusals, "permit_recalls": ps.Recalls,
		"permit_revocations": ps.Revocations, "permit_waits": ps.Waits} {
		ch <- prometheus.MustNewConstMetric(m.counters[name], prometheus.CounterValue, float64(v))
	}
}

// Collector returns the driver's metrics, to register with a Prometheus registry.
func (d *Driver) Collector() prometheus.Collector { return d.met }
