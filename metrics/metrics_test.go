package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func scrape(t *testing.T, r *Registry) string {
	t.Helper()
	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(rec.Result().Body)
	return string(b)
}

// TestExposition: the metric names, labels and bucket bounds are those the
// server has always exported; series resolved at registration appear at zero.
func TestExposition(t *testing.T) {
	r := New()
	r.ResolveCall("nfs", 3, "NULL")
	write := r.ResolveCall("nfs", 3, "WRITE")
	write(300 * time.Microsecond)
	write(2 * time.Second)
	r.ObserveCall("mount", 3, "MNT", time.Millisecond)
	e := r.Export("/x")
	e.Fsync.Add(2)
	e.GatherBatch.Observe(3)
	e.GatherWait.Add(0.5)
	e.AttrHits.Add(7)
	out := scrape(t, r)
	for _, want := range []string{
		`snfs_server_rpc_total{proc="WRITE",program="nfs",version="3"} 2`,
		`snfs_server_rpc_total{proc="NULL",program="nfs",version="3"} 0`,
		`snfs_server_rpc_total{proc="MNT",program="mount",version="3"} 1`,
		`snfs_server_rpc_duration_seconds_bucket{proc="WRITE",program="nfs",version="3",le="0.0005"} 1`,
		`snfs_server_rpc_duration_seconds_bucket{proc="WRITE",program="nfs",version="3",le="+Inf"} 2`,
		`snfs_server_rpc_duration_seconds_count{proc="WRITE",program="nfs",version="3"} 2`,
		`snfs_server_fsync_total{export="/x"} 2`,
		`snfs_server_write_gather_batch_size_bucket{export="/x",le="2"} 0`,
		`snfs_server_write_gather_batch_size_bucket{export="/x",le="3"} 1`,
		`snfs_server_write_gather_wait_seconds_total{export="/x"} 0.5`,
		`snfs_server_attr_cache_hits_total{export="/x"} 7`,
		`snfs_server_attr_cache_misses_total{export="/x"} 0`,
		"# TYPE snfs_server_rpc_total counter",
		"# TYPE snfs_server_rpc_duration_seconds histogram",
		// The Go runtime and process collectors.
		"go_goroutines ",
		"process_resident_memory_bytes ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}

// TestLabelEscaping: an export path with quotes, backslashes and a newline
// comes back unchanged through a real text parser.
func TestLabelEscaping(t *testing.T) {
	r := New()
	path := "/srv/a \"quoted\" \\back\\ \nnew"
	r.Export(path).Fsync.Inc()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(scrape(t, r)))
	if err != nil {
		t.Fatal(err)
	}
	f := fams["snfs_server_fsync_total"]
	if f == nil || len(f.GetMetric()) != 1 || f.GetMetric()[0].GetLabel()[0].GetValue() != path {
		t.Fatalf("fsync family: %v", f)
	}
}
