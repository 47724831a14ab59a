package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"snfs/bench/internal/stats"
	"snfs/state"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"snfs/client"
	"snfs/nfs3"
	"snfs/snfs1"
)

// proc is one `snfs serve` process.
type proc struct {
	cmd     *exec.Cmd
	start   time.Time // just before the exec
	listen  time.Time // when it first accepted a connection
	addr    string    // NFS and MOUNT
	metrics string    // its /metrics URL
}

// startServe starts `snfs serve` on export with state dir stateDir and waits
// until it accepts connections.
func startServe(export, stateDir, logFile string, port, mport int) *proc {
	p := &proc{addr: fmt.Sprintf("127.0.0.1:%d", port), metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", mport)}
	lf, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		die("%v", err)
	}
	defer lf.Close()
	p.cmd = exec.Command(*snfsBin, "serve", "--bind", "127.0.0.1", "--nfs-port", fmt.Sprint(port), "--mount-port", fmt.Sprint(port),
		"--state-dir", stateDir, "--metrics", fmt.Sprintf("127.0.0.1:%d", mport), "--grace", graceF.String(),
		"--export-options", "rw,no_root_squash", "--log-level", "info", export)
	p.cmd.Stdout, p.cmd.Stderr = lf, lf
	p.start = time.Now()
	if err := p.cmd.Start(); err != nil {
		die("snfs serve: %v", err)
	}
	running.Store(p)
	for deadline := p.start.Add(30 * time.Second); ; {
		c, err := net.DialTimeout("tcp", p.addr, time.Second)
		if err == nil {
			p.listen = time.Now()
			c.Close()
			return p
		}
		if time.Now().After(deadline) {
			p.cmd.Process.Kill()
			p.cmd.Wait()
			die("snfs serve did not listen on %s within 30 s (log %s)", p.addr, logFile)
		}
		time.Sleep(time.Millisecond)
	}
}

// running is the server process started last, for die to end.
var running atomic.Pointer[proc]

// kill ends p with sig and reaps it.
func (p *proc) kill(sig syscall.Signal) {
	running.CompareAndSwap(p, nil)
	p.cmd.Process.Signal(sig)
	p.cmd.Wait()
}

// recClient is one protocol client holding its files open.
type recClient struct {
	s         *client.Session
	items     []snfs1.ReclaimItem // set before the first restart, read by Reclaim
	restarted chan bool           // OnServerRestart's refused
}

type recRow struct {
	c, f                            int
	openSecs                        float64 // opening all F files before the first kill
	start, listen, server, perItems []float64
	items                           float64
	reasons                         map[string]int
}

func recovery(w func(string, ...any)) (targets []string) {
	cs, fs := ints(*clientsF), ints(*filesF)
	maxF := slices.Max(fs)
	export := filepath.Join(*work, "export")
	fmt.Fprintf(os.Stderr, "recoverbench: making %d files in %s\n", maxF, export)
	makeFiles(export, maxF)
	logFile := filepath.Join(*work, "serve.log")
	os.Remove(logFile)
	var rows []*recRow
	for _, f := range fs {
		for _, c := range cs {
			rows = append(rows, recoverOne(export, logFile, c, f))
		}
	}
	w("## Recovery: server start to the end of the grace period\n\n")
	w("`snfs serve` as a real process (`--state-dir` on disk under %s, `--grace %v`, `--metrics`), killed with SIGKILL and started again with the same state directory and flags;"+
		" C client.Session instances in the benchmark process, each holding F/C files open for reading (real empty files in the export, on the same disk) and reporting them in SessionConfig.Reclaim."+
		" After the restart every session makes its next call (NULL) as soon as the server accepts connections; its connect hook sends REGISTER, RECLAIM (≤ %d items per call) and RECLAIM_DONE."+
		" The end of grace is the first scrape (polled every 2 ms) of `snfs_server_consist_grace_end_total` that shows it; every restart ended with reason all_reclaimed and F items in `snfs_server_consist_reclaims_total`, or the run would have failed."+
		" %d restarts per row; medians. Times in ms.\n\n", *work, *graceF, snfs1.ReclaimMax, *reps)
	w("| clients C | open files F | opens/client | opening all, before the kill (s) | process start → listening | listening → grace over | **process start → grace over** | server's own grace length (grace_seconds) | reclaim items/s (F ÷ listening → grace over) | reason |\n")
	w("|---|---|---|---|---|---|---|---|---|---|\n")
	worst64 := 0.0
	for _, r := range rows {
		tot := stats.Median(r.start)
		lis := stats.Median(r.listen)
		reasons := ""
		for k, v := range r.reasons {
			reasons += fmt.Sprintf("%s ×%d ", k, v)
		}
		w("| %d | %d | %.1f | %.2f | %.0f | %.0f | **%.0f** | %.0f | %.0f | %s|\n", r.c, r.f, float64(r.f)/float64(r.c), r.openSecs,
			tot-lis, lis, tot, stats.Median(r.server), float64(r.f)/(lis/1e3), reasons)
		if r.f == 64000 {
			for _, v := range r.start {
				worst64 = max(worst64, v)
			}
		}
	}
	w("\nPer restart (process start → grace over, ms):\n\n```\n")
	for _, r := range rows {
		w("C=%-3d F=%-6d", r.c, r.f)
		for _, v := range r.start {
			w(" %7.0f", v)
		}
		w("\n")
	}
	w("```\n\n")
	if worst64 > 0 {
		var med []string
		ok := true
		for _, r := range rows {
			if r.f == 64000 {
				m := stats.Median(r.start)
				med = append(med, fmt.Sprintf("%d clients %.2f s", r.c, m/1e3))
				ok = ok && m < 5000
			}
		}
		targets = append(targets, fmt.Sprintf("grace over in under 5 s for 64,000 reclaimed opens (process start → grace over, median): %s — %s; slowest single restart %.2f s.",
			met(ok), joinComma(med), worst64/1e3))
	}
	return targets
}

func joinComma(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ", "
		}
		out += x
	}
	return out
}

// recoverOne measures one configuration: c clients, f opens in total.
func recoverOne(export, logFile string, c, f int) *recRow {
	r := &recRow{c: c, f: f, reasons: map[string]int{}}
	stateDir := filepath.Join(*work, fmt.Sprintf("state-%d-%d", c, f))
	os.RemoveAll(stateDir)
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		die("%v", err)
	}
	defer os.RemoveAll(stateDir)
	port, mport := freePort(), freePort()
	p := startServe(export, stateDir, logFile, port, mport)
	defer func() {
		if p != nil {
			p.kill(syscall.SIGTERM)
		}
	}()
	fmt.Fprintf(os.Stderr, "recoverbench: C=%d F=%d: server pid %d\n", c, f, p.cmd.Process.Pid)

	m, err := client.DialMount(ctx, "tcp", p.addr)
	if err != nil {
		die("mount: %v", err)
	}
	mr, err := m.Mnt(ctx, export)
	m.Close()
	if err != nil || mr.Status != 0 {
		die("MNT %s: %v %v", export, err, mr.Status)
	}
	root := nfs3.FH(mr.FH)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cls := make([]*recClient, c)
	for i := range cls {
		rc := &recClient{restarted: make(chan bool, 1)}
		rc.s, err = client.DialSession(ctx, "tcp", p.addr, client.SessionConfig{Name: fmt.Sprintf("recoverbench-%d", i), Logger: quiet,
			Reclaim:         func(context.Context) []snfs1.ReclaimItem { return rc.items },
			OnServerRestart: func(refused bool) { rc.restarted <- refused }})
		if err != nil {
			die("session %d: %v", i, err)
		}
		cls[i] = rc
	}
	defer func() {
		for _, rc := range cls {
			rc.s.Disconnect()
		}
	}()
	fhs := handles(cls[0].s.NFS(), root, f)
	t0 := time.Now()
	var wg sync.WaitGroup
	for i, rc := range cls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, fh := range fhs[i*f/c : (i+1)*f/c] { // F/C each, the remainder spread
				ok, err := rc.s.Open(ctx, fh, state.Read)
				if err != nil {
					die("client %d OPEN: %v", i, err)
				}
				rc.items = append(rc.items, snfs1.ReclaimItem{File: fh, Readers: 1, Caching: ok.CacheEnabled, Version: ok.CacheVersion})
			}
		}()
	}
	wg.Wait()
	r.openSecs = time.Since(t0).Seconds()

	for rep := range *reps {
		p.kill(syscall.SIGKILL)
		p = startServe(export, stateDir, logFile, port, mport)
		listenMs := float64(p.listen.Sub(p.start)) / 1e6
		errs := make(chan error, c)
		for _, rc := range cls {
			go func() { errs <- rc.s.Null(ctx) }()
		}
		var end time.Time
		var ends map[string]float64
		var secs, items float64
		for deadline := time.Now().Add(*graceF + 30*time.Second); ; {
			ends, secs, items, err = scrape(p.metrics)
			if err == nil && ends["all_reclaimed"]+ends["timeout"]+ends["none"] > 0 {
				end = time.Now()
				break
			}
			if time.Now().After(deadline) {
				die("C=%d F=%d: no end of grace seen at %s (last error %v)", c, f, p.metrics, err)
			}
			time.Sleep(2 * time.Millisecond)
		}
		for range cls {
			if err := <-errs; err != nil {
				die("NULL after the restart: %v", err)
			}
		}
		for i, rc := range cls {
			select {
			case refused := <-rc.restarted:
				if refused {
					die("client %d: reclaim refused", i)
				}
			case <-time.After(30 * time.Second):
				die("client %d: OnServerRestart not called", i)
			}
		}
		for k, v := range ends {
			if v > 0 {
				r.reasons[k] += int(v)
			}
		}
		if ends["all_reclaimed"] != 1 || ends["timeout"]+ends["none"] != 0 || int(items) != f {
			die("C=%d F=%d: grace ended %v with %v items reclaimed; want all_reclaimed and %d", c, f, ends, items, f)
		}
		r.items = items
		total := float64(end.Sub(p.start)) / 1e6
		r.start = append(r.start, total)
		r.listen = append(r.listen, total-listenMs)
		r.server = append(r.server, secs*1e3)
		fmt.Fprintf(os.Stderr, "recoverbench: C=%d F=%d rep %d: start→listen %.0f ms, listen→grace over %.0f ms, total %.0f ms (server %.0f ms), %v\n",
			c, f, rep+1, listenMs, total-listenMs, total, secs*1e3, ends)
	}
	return r
}
