package main

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strconv"
	"text/tabwriter"
	"time"
)

var rpcLine = regexp.MustCompile(`^snfs_server_rpc_total\{program="([^"]*)",version="([^"]*)",proc="([^"]*)"\} ([0-9.e+]+)$`)

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
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		m := rpcLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		n, _ := strconv.ParseFloat(m[4], 64)
		rows = append(rows, row{m[1], m[2], m[3], n})
		totals[m[1]+" v"+m[2]] += n
	}
	if err := sc.Err(); err != nil {
		return err
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
