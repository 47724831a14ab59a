package main

import (
	"fmt"
	"net/http"
	"os"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// stat prints per-procedure call counts of a running server, like nfsstat -s.
func stat(args []string) error {
	fs := newFlagSet("stat", "snfs stat [--metrics ADDR]")
	addr := fs.String("metrics", "127.0.0.1:9100", "the server's --metrics address")
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
	type row struct {
		prog, vers, proc string
		n                float64
	}
	var rows []row
	totals := map[string]float64{}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return fmt.Errorf("metrics from %s: %w", *addr, err)
	}
	if f := families["snfs_server_rpc_total"]; f != nil {
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
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "program\tversion\tprocedure\tcalls\tshare\t")
	for _, r := range rows {
		share := 0.0
		if t := totals[r.prog+" v"+r.vers]; t > 0 {
			share = 100 * r.n / t
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f\t%.1f%%\t\n", r.prog, r.vers, r.proc, r.n, share)
	}
	return tw.Flush()
}
