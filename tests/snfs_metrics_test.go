package tests

import (
	"snfs/state"
	"strconv"
	"testing"

	"snfs/metrics"
	"snfs/server"
)

// TestSNFSMetrics: with a metrics registry, the state table's families are
// exported: after a conflicting OPEN (A writes, B opens for reading: A is
// called back) the census shows the file WRITE_SHARED, the callback is counted
// by mode and timed, its outcome counted, and the OPENs and probes counted.
func TestSNFSMetrics(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	reg := metrics.New()
	e.restartWith(func(c *server.Config) { c.Metrics = reg })
	fh := snfsCreate(t, e, "metered")
	a := newProtoClient(t, e, "metrics-a")
	b := newProtoClient(t, e, "metrics-b")
	a.openCaching(fh, state.Write)
	rb := b.openOrFatal(t, fh, state.Read)
	if cbs := a.got(); len(cbs) != 1 || cbs[0].Mode != state.WritebackInvalidate {
		t.Fatalf("A's callbacks: %+v, want one WRITEBACK_INVALIDATE", cbs)
	}
	if rb.CacheEnabled {
		t.Fatal("B may cache a write-shared file")
	}

	fams, err := reg.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	// value returns the value of family name's series whose label key (if
	// not empty) is val: a counter's or gauge's value, a histogram's sample
	// count; found says whether the series exists.
	value := func(name, key, val string) (v float64, found bool) {
		for _, f := range fams {
			if f.GetName() != name {
				continue
			}
			for _, m := range f.GetMetric() {
				match := key == ""
				for _, l := range m.GetLabel() {
					if l.GetName() == key && l.GetValue() == val {
						match = true
					}
				}
				if !match {
					continue
				}
				switch {
				case m.GetCounter() != nil:
					return m.GetCounter().GetValue(), true
				case m.GetGauge() != nil:
					return m.GetGauge().GetValue(), true
				case m.GetHistogram() != nil:
					return float64(m.GetHistogram().GetSampleCount()), true
				}
			}
		}
		return 0, false
	}
	check := func(name, key, val string, w metricExpect) {
		t.Helper()
		v, found := value(name, key, val)
		switch {
		case !found:
			t.Errorf("%s{%s=%q}: no such series", name, key, val)
		case !w.ok(v):
			t.Errorf("%s{%s=%q} = %v, want %s", name, key, val, v, w.what)
		}
	}
	for _, st := range []string{"CLOSED", "CLOSED_DIRTY", "ONE_READER", "ONE_RDRDIRTY", "MULT_READERS", "ONE_WRITER", "WRITE_SHARED"} {
		w := metricAtLeast(0)
		if st == "WRITE_SHARED" {
			w = metricExactly(1) // the one file in the table
		}
		check("snfs_server_consist_entries", "state", st, w)
	}
	for _, c := range []struct {
		name, key, val string
		w              metricExpect
	}{
		{"snfs_server_consist_callbacks_total", "mode", "WRITEBACK_INVALIDATE", metricAtLeast(1)},
		{"snfs_server_consist_callback_seconds", "mode", "WRITEBACK_INVALIDATE", metricAtLeast(1)}, // sample count
		{"snfs_server_consist_callback_outcomes_total", "outcome", "OK", metricAtLeast(1)},
		{"snfs_server_consist_callback_outcomes_total", "outcome", "FAILED", metricExactly(0)},
		{"snfs_server_consist_opens_total", "", "", metricAtLeast(2)},
		{"snfs_server_consist_probes_total", "", "", metricAtLeast(2)},
		{"snfs_server_consist_waits_total", "", "", metricAtLeast(1)},
		{"snfs_server_consist_fencings_total", "", "", metricExactly(0)},
		{"snfs_server_consist_callback_timeouts_total", "", "", metricExactly(0)},
	} {
		check(c.name, c.key, c.val, c.w)
	}
	// The histogram's sum is the callback's round trip: positive, and well under
	// the callback timeout.
	for _, f := range fams {
		if f.GetName() != "snfs_server_consist_callback_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			if s := m.GetHistogram().GetSampleSum(); m.GetHistogram().GetSampleCount() > 0 && (s <= 0 || s > 5) {
				t.Errorf("callback_seconds %v: sum %v s", m.GetLabel(), s)
			}
		}
	}
	a.close(fh, state.Write, false)
	b.close(fh, state.Read, false)
}

// metricExpect is a condition on a metric's value.
type metricExpect struct {
	ok   func(float64) bool
	what string
}

func metricAtLeast(n float64) metricExpect {
	return metricExpect{func(v float64) bool { return v >= n }, ">= " + strconv.FormatFloat(n, 'g', -1, 64)}
}

func metricExactly(n float64) metricExpect {
	return metricExpect{func(v float64) bool { return v == n }, "= " + strconv.FormatFloat(n, 'g', -1, 64)}
}
