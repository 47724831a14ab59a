// Command lockbench measures byte-range locks through snfs-mode mounts
// (issue 24): an uncontended fcntl lock and unlock next to a GETATTR through
// the same mount, and how soon a blocked F_SETLKW returns after the holder's
// unlock (CB_GRANTED, not polling), next to the same GETATTR.
//
//	go run ./bench/lockbench -work /var/tmp/snfs-lockbench -delays 0,1ms,5ms -reps 5
//
// The server (server.New, as `snfs serve` sets it up) and two snfs-mode FUSE
// mounts A and B (cachemgr.OpenSNFS and fusefs.Mount, as `snfs mount --mode=snfs`)
// run in this process. Each mount's one connection to the server (NFS, SNFS
// and its callbacks) goes through a TCP proxy (internal/faultproxy) that holds
// every chunk for -delays each way: on loopback the round trip costs almost
// nothing and only the CPU work would be compared.
//
// The file is open read-write through both mounts, so the server does not let
// either cache it (write sharing, docs/protocol.md): each fstat through A asks
// the kernel for the attributes, which FUSE asks the mount for, which sends
// one GETATTR. By default A opens it first: the server lets A cache it, so A's
// open is a passthrough write open, which B's open pins (mount/vfs/pinned.go)
// and each write-back check (before every lock request) then scans. With
// -b-first, B opens it first and A's open goes through the mount. That fstat is the peer of the lock and unlock. Every phase
// counts the calls the mount sent (its session's RPC observer) and the
// results give them per operation, so the comparison is checked, not assumed.
//
// Phases alternate within each repetition (GETATTR first in even
// repetitions, lock+unlock first in odd ones), one operation at a time:
//
//   - getattr: -ops fstat calls through A.
//   - lock: -ops pairs of F_SETLK (write lock of the first byte) and F_UNLCK
//     through A on the open file: LOCK and LOCKU. With -delegation, on a
//     second file only A has open, whose locks the server delegates to A
//     (the getattr and grant phases keep the shared file).
//   - grant: -trials times: A takes the write lock, B's F_SETLKW on the same
//     byte waits (its LOCK answered LOCK_BLOCKED), A unlocks, and the time
//     from A's F_UNLCK returning to B's F_SETLKW returning is taken; then B
//     unlocks.
//
// The figures are per-phase medians, then the median over repetitions of each
// repetition's ratio; the results file gives the command that produced it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"

	"snfs/server"
)

func main() {
	cfg := config{}
	flag.StringVar(&cfg.work, "work", "/var/tmp/snfs-lockbench", "work directory: export, state, caches, mount points (a disk file system)")
	delays := flag.String("delays", "0,1ms,5ms", "one-way delays of the proxy between the mounts and the server, comma-separated")
	flag.IntVar(&cfg.reps, "reps", 5, "repetitions per delay (phases alternate in each)")
	flag.IntVar(&cfg.ops, "ops", 400, "operations per getattr or lock phase at delay 0 (fewer at larger delays: -budget)")
	flag.DurationVar(&cfg.budget, "budget", 2*time.Second, "at a delay, at most about this long per getattr or lock phase")
	flag.IntVar(&cfg.trials, "trials", 30, "blocked lock grants per repetition")
	flag.BoolVar(&cfg.deleg, "delegation", false, "the server delegates locks (--lock-delegation; needs root), and the lock+unlock phase locks a file only A has open")
	flag.BoolVar(&cfg.bFirst, "b-first", false, "B opens the file before A (A's open then goes through the mount; default: A first, a passthrough write open that B's open pins)")
	out := flag.String("out", "", "write the Markdown results here (default: stdout only)")
	command := flag.String("command", "", "the command that ran this, for the results file")
	note := flag.String("note", "", "a line about the machine and its load, for the results file")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run (server and mounts: one process) here")
	flag.Parse()
	for _, s := range strings.Split(*delays, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			fmt.Fprintln(os.Stderr, "lockbench: -delays:", err)
			os.Exit(2)
		}
		cfg.delays = append(cfg.delays, d)
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "lockbench:", err)
			os.Exit(1)
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	res, err := run(context.Background(), cfg, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lockbench:", err)
		os.Exit(1)
	}
	md := report(cfg, res, *command, *note)
	fmt.Print(md)
	if *out != "" {
		if err := os.WriteFile(*out, []byte(md), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "lockbench:", err)
			os.Exit(1)
		}
	}
}

type config struct {
	work   string
	delays []time.Duration
	reps   int
	ops    int
	budget time.Duration
	trials int
	bFirst bool // B opens the file first
	// deleg: the server delegates locks (server.Config.LockDelegation), and
	// the lock phase locks a second file only A has open (the one case a
	// delegation serves: docs/protocol.md, "Lock delegation").
	deleg bool
}

// run serves a fresh export in this process and measures every delay.
func run(ctx context.Context, cfg config, progress io.Writer) ([]delayResult, error) {
	if err := os.RemoveAll(cfg.work); err != nil {
		return nil, err
	}
	export, state := filepath.Join(cfg.work, "export"), filepath.Join(cfg.work, "state")
	for _, d := range []string{export, state} {
		if err := os.MkdirAll(d, 0o777); err != nil {
			return nil, err
		}
	}
	o, err := server.ParseOptions(server.DefaultOptions, "rw,no_root_squash")
	if err != nil {
		return nil, err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := server.New(server.Config{StateDir: state, Logger: quiet, LockDelegation: cfg.deleg,
		Exports: []server.ExportConfig{{Path: export, Clients: []server.ClientRule{{Spec: "*", Opts: o}}}}})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln, nil) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		<-done
	}()
	var all []delayResult
	for k, d := range cfg.delays {
		fmt.Fprintf(progress, "lockbench: delay %v\n", d)
		r, err := measureDelay(ctx, cfg, ln.Addr().String(), export, fmt.Sprintf("d%d", k), d, progress)
		if err != nil {
			return nil, fmt.Errorf("delay %v: %w", d, err)
		}
		all = append(all, r)
	}
	return all, nil
}
