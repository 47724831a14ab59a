package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"text/tabwriter"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// stat prints per-procedure call counts of a running server, like nfsstat
// -s, or of a running mount (`snfs mount --metrics`), like nfsstat -c: a
// mount's metrics are told apart by their snfs_client_rpc_total family.
func stat(args []string) error {
	fs := newFlagSet("stat", "snfs stat [--metrics ADDR]")
	addr := fs.String("metrics", "127.0.0.1:9100", "the server's or the mount's --metrics address")
	rest, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("stat takes no arguments, got %q", rest)
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Get("http://" + *addr + "/metrics")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return fmt.Errorf("metrics from %s: %w", *addr, err)
	}
	return printStat(os.Stdout, families)
}

// clientFigures are the mount's families printed below its call table.
var clientFigures = []struct{ name, label string }{
	{"snfs_client_written_back_bytes_total", "bytes written back"},
	{"snfs_client_writebacks_cancelled_total", "write-backs cancelled"},
	{"snfs_client_dirty_bytes", "dirty bytes"},
	{"snfs_client_cache_hits_total", "cache hits"},
	{"snfs_client_cache_hit_bytes_total", "cache hit bytes"},
	{"snfs_client_passthrough_opens_total", "passthrough opens"},
}

// printStat prints the call table of a server's or a mount's metrics and,
// for a mount, its write-back, cache and callback figures.
func printStat(w io.Writer, families map[string]*dto.MetricFamily) error {
	type row struct {
		prog, vers, proc string
		n                float64
	}
	var rows []row
	totals := map[string]float64{}
	f := families["snfs_server_rpc_total"]
	isClient := families["snfs_client_rpc_total"] != nil
	if isClient {
		f = families["snfs_client_rpc_total"]
		fmt.Fprintln(w, "client calls:")
	}
	if f != nil {
		for _, m := range f.GetMetric() {
			var r row
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "program":
					r.prog = l.GetValue()
				case "version":
					r.vers = l.GetValue()
				case "proc":
					r.proc = l.GetValue()
				}
			}
			r.n = m.GetCounter().GetValue()
			rows = append(rows, r)
			totals[r.prog+" v"+r.vers] += r.n
		}
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].prog+rows[i].vers < rows[j].prog+rows[j].vers })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "program\tversion\tprocedure\tcalls\tshare\t")
	for _, r := range rows {
		share := 0.0
		if t := totals[r.prog+" v"+r.vers]; t > 0 {
			share = 100 * r.n / t
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f\t%.1f%%\t\n", r.prog, r.vers, r.proc, r.n, share)
	}
	if err := tw.Flush(); err != nil || !isClient {
		return err
	}
	value := func(m *dto.Metric) float64 {
		if m.GetCounter() != nil {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw)
	for _, c := range clientFigures {
		if f := families[c.name]; f != nil && len(f.GetMetric()) > 0 {
			fmt.Fprintf(tw, "%s:\t%.0f\n", c.label, value(f.GetMetric()[0]))
		}
	}
	if f := families["snfs_client_callbacks_total"]; f != nil {
		ms := f.GetMetric()
		sort.Slice(ms, func(i, j int) bool { return ms[i].GetLabel()[0].GetValue() < ms[j].GetLabel()[0].GetValue() })
		for _, m := range ms {
			fmt.Fprintf(tw, "callbacks %s:\t%.0f\n", m.GetLabel()[0].GetValue(), value(m))
		}
	}
	return tw.Flush()
}
