// Command recoverbench measures crash recovery of the snfs consistency
// protocol (issue 15): how long a restarted server takes from its start to the
// end of its grace period while its protocol clients reclaim their opens, and
// what durable client records cost the OPEN rate.
//
// Recovery: for each number of clients C (-clients) and of open files in total
// F (-files), it starts `snfs serve` (-snfs, a real process) with a state
// directory on disk, connects C client.Session instances (this process), each
// of which opens its F/C files (real files in the export, made once, F/C per
// client in directories of 1,000), kills the server with SIGKILL, starts it
// again with the same state directory and flags, and times from the new
// process's start (and from the moment it accepts connections) to the end of
// its grace period, read by polling snfs_server_consist_grace_end_total at its
// --metrics address. The clients start their next call (NULL) once the server
// accepts connections, so the time does not include a client's reconnect
// back-off; each session's connect hook reclaims (SessionConfig.Reclaim: its
// F/C items) and sends RECLAIM_DONE. Every restart must end with reason
// all_reclaimed and F items reclaimed, or the run fails. -reps restarts of each
// configuration (the clients keep their opens across them); the median.
//
// OPEN rate: two servers in this process (server.New, as `snfs serve`
// configures them), one with its client records in its state directory (the
// default), one with server.Config.VolatileClients (records and version mark
// in memory only), each with -open-clients sessions opening and closing their
// own -open-files files; phases of -open-duration alternate between the two
// (and which goes first alternates), -open-reps each; the medians.
//
//	recoverbench -snfs ./snfs -work /var/tmp/snfs-recoverbench -out results.md
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"snfs/client"
	"snfs/nfs3"
)

var (
	snfsBin   = flag.String("snfs", "./snfs", "the snfs binary")
	work      = flag.String("work", "/var/tmp/snfs-recoverbench", "work directory (export, state directories; use a disk file system)")
	clientsF  = flag.String("clients", "1,4,16,64", "client counts")
	filesF    = flag.String("files", "1000,16000,64000", "open files in total")
	reps      = flag.Int("reps", 3, "restarts per configuration")
	graceF    = flag.Duration("grace", 60*time.Second, "the server's --grace (a bound far above the expected time: the run fails on a timeout)")
	skipRec   = flag.Bool("no-recovery", false, "skip the recovery measurement")
	skipOpen  = flag.Bool("no-open", false, "skip the OPEN rate measurement")
	openCl    = flag.Int("open-clients", 64, "OPEN rate: protocol clients per server")
	openFiles = flag.Int("open-files", 16, "OPEN rate: files per client")
	openDur   = flag.Duration("open-duration", 3*time.Second, "OPEN rate: length of each phase")
	openReps  = flag.Int("open-reps", 5, "OPEN rate: phases per server")
	out       = flag.String("out", "", "write the Markdown results here (default: stdout only)")
	command   = flag.String("command", "", "the command that ran this, for the results file")
	note      = flag.String("note", "", "a line about the machine's load, for the results file")
)

var ctx = context.Background()

func die(f string, a ...any) {
	fmt.Fprintf(os.Stderr, "recoverbench: "+f+"\n", a...)
	if p := running.Load(); p != nil {
		p.cmd.Process.Kill() // leave no server behind
		p.cmd.Wait()
	}
	os.Exit(1)
}

func ints(s string) []int {
	var v []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			die("bad count %q", f)
		}
		v = append(v, n)
	}
	return v
}

func freePort() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		die("%v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// makeFiles makes n empty files in dir, 1,000 per subdirectory d<k>, named f<j>.
func makeFiles(dir string, n int) {
	for i := 0; i < n; i++ {
		d := filepath.Join(dir, fmt.Sprint("d", i/1000))
		if i%1000 == 0 {
			if err := os.MkdirAll(d, 0o777); err != nil {
				die("%v", err)
			}
		}
		p := filepath.Join(d, fmt.Sprint("f", i%1000))
		if _, err := os.Stat(p); err == nil {
			continue
		}
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o666)
		if err != nil {
			die("%v", err)
		}
		f.Close()
	}
}

// handles lists the first n files makeFiles made, in order, through nfs.
func handles(nfs *client.NFS, root nfs3.FH, n int) []nfs3.FH {
	fhs := make([]nfs3.FH, n)
	for k := 0; k*1000 < n; k++ {
		lr, err := nfs.Lookup(ctx, root, fmt.Sprint("d", k))
		if err != nil || lr.Status != nfs3.OK {
			die("LOOKUP d%d: %v %v", k, err, lr.Status)
		}
		ents, err := nfs.ReadDirAll(ctx, lr.Object, true)
		if err != nil {
			die("READDIRPLUS d%d: %v", k, err)
		}
		for _, e := range ents {
			if !strings.HasPrefix(e.Name, "f") {
				continue
			}
			j, err := strconv.Atoi(e.Name[1:])
			if err != nil || e.Handle == nil {
				die("READDIRPLUS d%d: entry %q without a handle", k, e.Name)
			}
			if i := k*1000 + j; i < n {
				fhs[i] = e.Handle
			}
		}
	}
	for i, fh := range fhs {
		if fh == nil {
			die("no handle for file %d", i)
		}
	}
	return fhs
}

// scrape reads the grace metrics at url: the end counts by reason, the last
// grace length and the reclaimed items.
func scrape(url string) (ends map[string]float64, secs, items float64, err error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, 0, 0, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, 0, 0, err
	}
	ends = map[string]float64{}
	if mf := mfs["snfs_server_consist_grace_end_total"]; mf != nil {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" {
					ends[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	if mf := mfs["snfs_server_consist_grace_seconds"]; mf != nil && len(mf.GetMetric()) > 0 {
		secs = mf.GetMetric()[0].GetGauge().GetValue()
	}
	if mf := mfs["snfs_server_consist_reclaims_total"]; mf != nil && len(mf.GetMetric()) > 0 {
		items = mf.GetMetric()[0].GetCounter().GetValue()
	}
	return ends, secs, items, nil
}

func main() {
	flag.Parse()
	syscall.Umask(0)
	if err := os.MkdirAll(*work, 0o777); err != nil {
		die("%v", err)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(*work, &st); err == nil && st.Type == 0x01021994 {
		die("%s is on tmpfs: want a disk file system", *work)
	}
	var b strings.Builder
	w := func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }
	host, _ := os.Hostname()
	w("# snfs crash recovery — grace period and OPEN rate (recoverbench)\n\n")
	if *command != "" {
		w("Command: `%s`", *command)
	} else {
		w("Run")
	}
	w(" on %s, host %s, %d cores (GOMAXPROCS %d), %s.\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), host, runtime.NumCPU(), runtime.GOMAXPROCS(0), cpuModel())
	w("recoverbench: `%s`.\n", strings.Join(os.Args[1:], " "))
	if *note != "" {
		w("%s\n", *note)
	}
	w("\n")
	var targets []string
	if !*skipRec {
		targets = append(targets, recovery(w)...)
	}
	if !*skipOpen {
		targets = append(targets, openRate(w)...)
	}
	if len(targets) > 0 {
		w("## Targets\n\n")
		for _, t := range targets {
			w("- %s\n", t)
		}
	}
	fmt.Print(b.String())
	if *out != "" {
		if err := os.WriteFile(*out, []byte(b.String()), 0o644); err != nil {
			die("%v", err)
		}
	}
}

func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "CPU unknown"
	}
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "model name") {
			if _, v, ok := strings.Cut(l, ":"); ok {
				return strings.TrimSpace(v)
			}
		}
	}
	return "CPU unknown"
}

func met(b bool) string {
	if b {
		return "met"
	}
	return "**not met**"
}
