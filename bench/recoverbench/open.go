package main

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"snfs/bench/internal/stats"
	"snfs/state"
	"sync"
	"time"

	"snfs/client"
	"snfs/metrics"
	"snfs/nfs3"
	"snfs/server"
)

// openSide is one in-process server and its clients.
type openSide struct {
	name string
	srv  *server.Server
	cls  []*client.Session
	fhs  [][]nfs3.FH // by client
}

func newOpenSide(name string, volatile bool) *openSide {
	dir := filepath.Join(*work, "open-"+name)
	os.RemoveAll(dir)
	export, state := filepath.Join(dir, "export"), filepath.Join(dir, "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		die("%v", err)
	}
	os.MkdirAll(export, 0o777)
	makeFiles(export, *openCl**openFiles)
	o, err := server.ParseOptions(server.DefaultOptions, "rw,no_root_squash")
	if err != nil {
		die("%v", err)
	}
	reg := metrics.New()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := server.New(server.Config{StateDir: state, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Observer: reg, Metrics: reg, VolatileClients: volatile,
		Exports: []server.ExportConfig{{Path: export, Clients: []server.ClientRule{{Spec: "*", Opts: o}}}}})
	if err != nil {
		die("server: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		die("%v", err)
	}
	go srv.Serve(ln, nil)
	addr := ln.Addr().String()
	side := &openSide{name: name, srv: srv}
	m, err := client.DialMount(ctx, "tcp", addr)
	if err != nil {
		die("mount: %v", err)
	}
	mr, err := m.Mnt(ctx, export)
	m.Close()
	if err != nil || mr.Status != 0 {
		die("MNT %s: %v %v", export, err, mr.Status)
	}
	for i := range *openCl {
		s, err := client.DialSession(ctx, "tcp", addr, client.SessionConfig{Name: fmt.Sprintf("recoverbench-open-%d", i), Logger: quiet})
		if err != nil {
			die("session: %v", err)
		}
		side.cls = append(side.cls, s)
	}
	all := handles(side.cls[0].NFS(), nfs3.FH(mr.FH), *openCl**openFiles)
	for i := range side.cls {
		side.fhs = append(side.fhs, all[i**openFiles:(i+1)**openFiles])
	}
	return side
}

func (o *openSide) close() {
	for _, s := range o.cls {
		s.Disconnect()
	}
	o.srv.Shutdown(ctx)
	os.RemoveAll(filepath.Join(*work, "open-"+o.name))
}

// phase has every client open and close its files in turn, one call at a
// time, for d, and returns OPEN+CLOSE pairs per second.
func (o *openSide) phase(d time.Duration) float64 {
	var wg sync.WaitGroup
	var mu sync.Mutex
	pairs := 0
	start := make(chan struct{})
	var deadline time.Time
	for i, s := range o.cls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			n := 0
			for j := i; ; j++ {
				if n%8 == 0 && time.Now().After(deadline) {
					break
				}
				fh := o.fhs[i][j%len(o.fhs[i])]
				if _, err := s.Open(ctx, fh, state.Read); err != nil {
					die("%s OPEN: %v", o.name, err)
				}
				if _, err := s.Close(ctx, fh, state.Read, false); err != nil {
					die("%s CLOSE: %v", o.name, err)
				}
				n++
			}
			mu.Lock()
			pairs += n
			mu.Unlock()
		}()
	}
	t0 := time.Now()
	deadline = t0.Add(d)
	close(start)
	wg.Wait()
	return float64(pairs) / time.Since(t0).Seconds()
}

func openRate(w func(string, ...any)) (targets []string) {
	on := newOpenSide("durable", false)
	defer on.close()
	off := newOpenSide("volatile", true)
	defer off.close()
	on.phase(*openDur / 3)
	off.phase(*openDur / 3)
	var ron, roff, ratios []float64
	for i := range *openReps {
		order := []*openSide{on, off}
		if i%2 == 1 {
			order = []*openSide{off, on}
		}
		var a, b float64
		for _, s := range order {
			v := s.phase(*openDur)
			if s == on {
				a = v
			} else {
				b = v
			}
			fmt.Fprintf(os.Stderr, "recoverbench: rep %d %-8s %8.0f pairs/s\n", i+1, s.name, v)
		}
		ron, roff, ratios = append(ron, a), append(roff, b), append(ratios, a/b)
	}
	mon, moff := stats.Median(ron), stats.Median(roff)
	w("## OPEN rate: durable client records on and off\n\n")
	w("Two servers in the benchmark process (server.New with metrics and the RPC observer, as `snfs serve` configures them; export options rw,no_root_squash; state directories on disk under %s):"+
		" **on** is the default configuration (client records and the version mark in STATE_DIR/consist.db, written at REGISTER and UNREGISTER);"+
		" **off** sets server.Config.VolatileClients (the same records kept in memory only: nothing survives a restart and there is no grace period)."+
		" A state directory cannot be left out: the server keeps its handle keys and export ids there, so VolatileClients is the non-durable configuration."+
		" Each server has %d client.Session instances on loopback, each opening (OPEN_READ) and closing its own %d files in turn, one call at a time."+
		" %d phases of %v per server, alternating on/off (the first alternating too), after a warm-up of each; medians.\n\n",
		*work, *openCl, *openFiles, *openReps, *openDur)
	w("| durable records | OPEN+CLOSE pairs/s (median) |\n|---|---|\n")
	w("| on | %.0f |\n| off | %.0f |\n\n", mon, moff)
	w("Ratio on ÷ off: %.3f (of the medians); median of the per-round ratios %.3f.\n\n", mon/moff, stats.Median(ratios))
	w("Per round (pairs/s):\n\n```\n")
	for i := range ron {
		w("round %d  on %8.0f  off %8.0f  on/off %.3f\n", i+1, ron[i], roff[i], ratios[i])
	}
	w("```\n\n")
	targets = append(targets, fmt.Sprintf("OPEN rate within 10%% of the non-durable figure: %s — on %.0f pairs/s, off %.0f pairs/s, on ÷ off %.3f.",
		met(mon >= 0.9*moff), mon, moff, mon/moff))
	return targets
}
