package metrics

import (
	"strings"
	"testing"
	"time"
)

func TestExposition(t *testing.T) {
	r := New()
	r.Declare("nfs", 3, []string{"NULL", "WRITE"})
	r.ObserveCall("nfs", 3, "WRITE", 300*time.Microsecond)
	r.ObserveCall("nfs", 3, "WRITE", 2*time.Second)
	r.Add("snfs_server_fsync_total", "fsyncs", Labels("export", "/x"), 2)
	r.Observe("snfs_server_write_gather_batch_size", "batch", []float64{1, 4}, Labels("export", "/x"), 3)
	var b strings.Builder
	r.WriteText(&b)
	out := b.String()
	for _, want := range []string{
		`snfs_server_rpc_total{program="nfs",version="3",proc="WRITE"} 2`,
		`snfs_server_rpc_total{program="nfs",version="3",proc="NULL"} 0`,
		`snfs_server_rpc_duration_seconds_bucket{program="nfs",version="3",proc="WRITE",le="0.0005"} 1`,
		`snfs_server_rpc_duration_seconds_bucket{program="nfs",version="3",proc="WRITE",le="+Inf"} 2`,
		`snfs_server_rpc_duration_seconds_count{program="nfs",version="3",proc="WRITE"} 2`,
		`snfs_server_fsync_total{export="/x"} 2`,
		`snfs_server_write_gather_batch_size_bucket{export="/x",le="1"} 0`,
		`snfs_server_write_gather_batch_size_bucket{export="/x",le="4"} 1`,
		"# TYPE snfs_server_rpc_total counter",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}
