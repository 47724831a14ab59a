package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

const statSynopsis = `snfs stat [MOUNTPOINT | --metrics ADDR]

Prints the calls per procedure of the snfs mount on MOUNTPOINT (like nfsstat -c),
with its write-back, cache and callback figures: every mount serves them on a
unix socket under /run/snfs (a user's $XDG_RUNTIME_DIR/snfs), --metrics or not. With --metrics ADDR (or a
HOST:PORT in place of MOUNTPOINT) it reads the metrics of a server or mount
started with --metrics ADDR; a server's calls are like nfsstat -s. With
neither it tries ` + defaultStatAddr + `.`

// defaultStatAddr is where snfs stat looks with no argument: the address
// docs/serve.md suggests for snfs serve --metrics (off by default).
const defaultStatAddr = "127.0.0.1:9100"

// stat prints per-procedure call counts of a running mount, like nfsstat -c,
// or of a running server (--metrics), like nfsstat -s: a mount's metrics are
// told apart by their snfs_client_rpc_total family.
func stat(args []string) error {
	fs := newFlagSet("stat", statSynopsis)
	addr := fs.String("metrics", "", "the --metrics address of a server or a mount (default "+defaultStatAddr+" without MOUNTPOINT)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 1 || len(pos) == 1 && *addr != "":
		fs.Usage()
		return errUsage
	case len(pos) == 1:
		if a, ok := asAddress(pos[0]); ok {
			return statAddr(a)
		}
		return statMount(pos[0])
	case *addr == "":
		*addr = defaultStatAddr
	}
	return statAddr(*addr)
}

// asAddress reports whether arg, given in place of a mount point, is a
// HOST:PORT: not an existing file, no slash, a numeric port.
func asAddress(arg string) (string, bool) {
	if _, err := os.Stat(arg); err == nil || strings.Contains(arg, "/") {
		return "", false
	}
	_, port, err := net.SplitHostPort(arg)
	if err != nil {
		return "", false
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return "", false
	}
	return arg, true
}

// statAddr prints the metrics served at http://addr/metrics.
func statAddr(addr string) error {
	families, err := scrape(&http.Client{Timeout: 10 * time.Second}, "http://"+addr+"/metrics")
	if errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("no metrics at %s (connection refused): start the server with --metrics %s, or pass a mount point: snfs stat /mnt/share", addr, addr)
	}
	if err != nil {
		return fmt.Errorf("metrics at %s: %w", addr, err)
	}
	return printStat(os.Stdout, families)
}

// statMount prints the metrics of the mount on arg, read from its stats
// socket (serveStatsSocket).
func statMount(arg string) error {
	dir, err := filepath.Abs(arg)
	if err != nil {
		return err
	}
	body, err := askMount(dir, "/metrics", ", or --metrics ADDR for a server")
	if err != nil {
		return err
	}
	families, err := parseMetrics(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("the snfs mount on %s: %w", dir, err)
	}
	return printStat(os.Stdout, families)
}

// errNoPath: the mount process answered 404 Not Found (it predates the path).
var errNoPath = errors.New("404 Not Found")

// askMount returns what the mount on dir serves at path on its stats socket
// (serveStatsSocket); without an answer, it says why from
// /proc/self/mountinfo: not an snfs mount (hint ends that error), its process
// gone, another user's.
func askMount(dir, path, hint string) ([]byte, error) {
	sock := statsSocket(dir)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}}
	defer hc.CloseIdleConnections()
	body, serr := get(hc, "http://mount"+path)
	if serr == nil {
		return body, nil
	}
	e, ok, err := mountAt(dir)
	switch {
	case err != nil:
		return nil, err
	case !ok || e.fsType != "fuse.snfs":
		return nil, fmt.Errorf("%s is not an snfs mount: pass the mount point of an snfs mount%s", dir, hint)
	case errors.Is(serr, iofs.ErrNotExist):
		return nil, noStatsSocket(dir, sock)
	case errors.Is(serr, syscall.ECONNREFUSED):
		return nil, fmt.Errorf("the snfs mount on %s does not answer on %s: its mount process is gone (snfs umount %s unmounts what is left)", dir, sock, dir)
	}
	return nil, fmt.Errorf("the snfs mount on %s: %w", dir, serr)
}

// get returns the body of a GET of url.
func get(hc *http.Client, url string) ([]byte, error) {
	resp, err := hc.Get(url)
	if err != nil {
		var ue *neturl.Error
		if errors.As(err, &ue) {
			err = ue.Err // not `Get "http://...": ` before the dial's own words
		}
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil, errNoPath
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s", resp.Status)
	}
	return io.ReadAll(resp.Body)
}

// scrape reads and parses the metrics at url.
func scrape(hc *http.Client, url string) (map[string]*dto.MetricFamily, error) {
	body, err := get(hc, url)
	if err != nil {
		return nil, err
	}
	return parseMetrics(bytes.NewReader(body))
}

// parseMetrics parses Prometheus's text format.
func parseMetrics(r io.Reader) (map[string]*dto.MetricFamily, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("not Prometheus metrics: %w", err)
	}
	return families, nil
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

// noStatsSocket says why the mount on dir has no stats socket at sock: a
// user's mount keeps it in that user's $XDG_RUNTIME_DIR/snfs (runDir), so
// another user (root included) looks in the wrong place, and a user's mount
// made without XDG_RUNTIME_DIR has none; else the mount process predates
// the socket.
func noStatsSocket(dir, sock string) error {
	owner, ok := fuseOwner(dir)
	switch {
	case ok && owner != os.Geteuid():
		return fmt.Errorf("the snfs mount on %s is uid %d's: its stats socket is in that user's $XDG_RUNTIME_DIR/snfs; run snfs stat as that user", dir, owner)
	case ok && owner != 0 && os.Getenv("XDG_RUNTIME_DIR") == "":
		return fmt.Errorf("the snfs mount on %s has no stats socket here (%s): a user's mount serves it in $XDG_RUNTIME_DIR/snfs, "+
			"and XDG_RUNTIME_DIR is not set; set it, here and for snfs mount (a mount made without it has none: remount it)", dir, sock)
	}
	return fmt.Errorf("the snfs mount on %s has no stats socket (%s): its mount process is older than snfs stat MOUNTPOINT; remount it", dir, sock)
}

// fuseOwner returns the user_id= of the topmost mount on dir, from
// /proc/self/mountinfo's super options: the user who mounted it.
func fuseOwner(dir string) (uid int, ok bool) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - TYPE SOURCE SUPER
		f := strings.Fields(l)
		if len(f) < 10 || f[len(f)-4] != "-" || unescapeMountinfo(f[4]) != dir {
			continue
		}
		ok = false
		for o := range strings.SplitSeq(f[len(f)-1], ",") {
			if v, found := strings.CutPrefix(o, "user_id="); found {
				uid, err = strconv.Atoi(v)
				ok = err == nil
			}
		}
	}
	return uid, ok
}
