package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"snfs/gather"
	"snfs/metrics"
	"snfs/mount3"
	"snfs/nfs3"
	"snfs/nlm4"
	"snfs/nsm"
	"snfs/portmap"
	"snfs/server"
	"snfs/state"
	"snfs/sunrpc"
)

func serve(args []string) error {
	fs := newFlagSet("serve", "snfs serve [flags] DIR...  (flags may also follow the DIRs)")
	bind := fs.String("bind", "", "address to listen on (default: all addresses)")
	nfsPort := fs.Int("nfs-port", 2049, "NFS port (TCP and UDP)")
	mountPort := fs.Int("mount-port", 20048, "MOUNT port (TCP and UDP)")
	exportsFile := fs.String("exports", "", "exports(5)-style file; SIGHUP reads it again and applies the changes (docs/serve.md)")
	exportOpts := fs.String("export-options", "rw,root_squash", "options for DIRs given on the command line (exports(5) names)")
	stateDir := fs.String("state-dir", "/var/lib/snfs", "directory for state that must survive restarts")
	pmapPort := fs.Int("portmap-port", 0, "also serve the port mapper (v2) on this port (111 where no rpcbind runs: clients find NLM for locks through it); 0: do not")
	metricsAddr := fs.String("metrics", "", "serve Prometheus metrics at http://ADDR/metrics")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	gatherMode := fs.String("write-gather", "adaptive", "write gathering for stable writes: on, off or adaptive")
	spinPoll := fs.Duration("spin-poll", sunrpc.DefaultSpinPoll, "how long a connection whose calls arrive close together polls for the next one before sleeping (0: never)")
	gatherWait := fs.Duration("write-gather-max-wait", 2*time.Millisecond, "bound on the time a flush waits to gather more writes")
	cbTimeout := fs.Duration("callback-timeout", 5*time.Second, "consistency protocol: how long a client may take to answer a callback before it is fenced for the file")
	plainHold := fs.Duration("plain-hold", 60*time.Second, "consistency protocol: how long a plain NFSv3 client's access counts as an open (no shorter than its attribute cache timeout)")
	tableEntries := fs.Int("table-entries", 1<<20, "consistency protocol: bound on the files the state table tracks (docs/protocol.md section 15)")
	grace := fs.Duration("grace", server.DefaultGrace, "consistency protocol: bound on the grace period after a restart, while the clients known before it reclaim their state (0: none)")
	lockDeleg := fs.Bool("lock-delegation", false, "snfs protocol: let the one client using a file serve its locks itself until another user comes (docs/protocol.md 4.18; needs root)")
	dirs, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	mode, ok := gather.ParseMode(*gatherMode)
	if !ok {
		return fmt.Errorf("--write-gather: want on, off or adaptive, not %q", *gatherMode)
	}
	if *spinPoll < 0 || *spinPoll > 10*time.Millisecond {
		return fmt.Errorf("--spin-poll: %v is out of range (0 to 10ms)", *spinPoll)
	}
	if *spinPoll == 0 {
		*spinPoll = -1
	}
	if *gatherWait < 0 || *gatherWait > time.Second {
		return fmt.Errorf("--write-gather-max-wait: %v is out of range (0 to 1s)", *gatherWait)
	}
	if *grace < 0 {
		return fmt.Errorf("--grace: %v is negative", *grace)
	}
	if *grace == 0 {
		*grace = -1 // server.Config: none
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(log)
	// SIGTERM and SIGINT are caught from here on, before any port is bound and so
	// before READY=1: a service manager (or test) may stop snfs the moment it is
	// ready, and a signal that arrived before signal.Notify would kill the process
	// outright (Go's default action), without STOPPING=1 or a clean shutdown. One
	// that arrives during startup waits in sigc and is handled once it is done.
	// SIGHUP (a reload, or the quick start's terminal closed) likewise waits in
	// hupc: it reloads the exports and never stops the server.
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGTERM, syscall.SIGINT)
	hupc := make(chan os.Signal, 1)
	signal.Notify(hupc, syscall.SIGHUP)

	opts, err := server.ParseOptions(server.DefaultOptions, *exportOpts)
	if err != nil {
		return fmt.Errorf("--export-options: %w", err)
	}
	loadExports := func() ([]server.ExportConfig, error) {
		var exports []server.ExportConfig
		if *exportsFile != "" {
			ex, err := server.ParseExports(*exportsFile)
			if err != nil {
				return nil, err
			}
			exports = append(exports, ex...)
		}
		for _, d := range dirs {
			abs, err := filepath.Abs(d)
			if err != nil {
				return nil, err
			}
			exports = append(exports, server.ExportConfig{Path: abs, Clients: []server.ClientRule{{Spec: "*", Opts: opts}}})
		}
		if len(exports) == 0 {
			return nil, errors.New("nothing to export: give DIRs or --exports FILE")
		}
		return exports, nil
	}
	exports, err := loadExports()
	if err != nil {
		return err
	}
	// Objects are created with exactly the mode the client asks for.
	syscall.Umask(0)

	reg := metrics.New() // every procedure's series appears (at zero) when its program is registered
	srv, err := server.New(server.Config{StateDir: *stateDir, Exports: exports, Logger: log, Observer: reg,
		Metrics: reg, WriteGather: mode, GatherMaxWait: *gatherWait, SpinPoll: *spinPoll,
		Table: state.Config{CallbackTimeout: *cbTimeout, PlainHold: *plainHold, MaxEntries: *tableEntries}, Grace: *grace,
		LockDelegation: *lockDeleg})
	if err != nil {
		return err
	}

	type listener struct {
		ln net.Listener
		pc net.PacketConn
	}
	listen := func(port int) (listener, error) {
		addr := net.JoinHostPort(*bind, strconv.Itoa(port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return listener{}, err
		}
		pc, err := net.ListenPacket("udp", net.JoinHostPort(*bind, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)))
		if err != nil {
			ln.Close()
			return listener{}, err
		}
		return listener{ln, pc}, nil
	}
	nfsL, err := listen(*nfsPort)
	if err != nil {
		return fmt.Errorf("nfs port: %w", err)
	}
	// Both programs are served on every listener; a second one is only for MOUNT's
	// own port.
	mntL := nfsL
	if *mountPort != *nfsPort || *nfsPort == 0 {
		if mntL, err = listen(*mountPort); err != nil {
			return fmt.Errorf("mount port: %w", err)
		}
	}
	errc := make(chan error, 4)
	go func() { errc <- srv.Serve(nfsL.ln, nfsL.pc) }()
	if mntL != nfsL {
		go func() { errc <- srv.Serve(mntL.ln, mntL.pc) }()
	}
	nport := uint32(nfsL.ln.Addr().(*net.TCPAddr).Port)
	mport := uint32(mntL.ln.Addr().(*net.TCPAddr).Port)
	mappings := []portmap.Mapping{
		{Prog: nfs3.Program, Vers: nfs3.Version, Prot: portmap.ProtoTCP, Port: nport},
		{Prog: nfs3.Program, Vers: nfs3.Version, Prot: portmap.ProtoUDP, Port: nport},
		{Prog: mount3.Program, Vers: mount3.Version, Prot: portmap.ProtoTCP, Port: mport},
		{Prog: mount3.Program, Vers: mount3.Version, Prot: portmap.ProtoUDP, Port: mport},
		// NLM v4 and NSM v1 are served on the NFS port: a client's lock
		// manager finds them through rpcbind (docs/serve.md, "Locks").
		{Prog: nlm4.Program, Vers: nlm4.Version, Prot: portmap.ProtoTCP, Port: nport},
		{Prog: nlm4.Program, Vers: nlm4.Version, Prot: portmap.ProtoUDP, Port: nport},
		{Prog: nsm.Program, Vers: nsm.Version, Prot: portmap.ProtoTCP, Port: nport},
		{Prog: nsm.Program, Vers: nsm.Version, Prot: portmap.ProtoUDP, Port: nport},
	}

	var pmapSrv *sunrpc.Server
	if *pmapPort != 0 {
		pm := &portmap.Server{}
		pm.Add(portmap.Mapping{Prog: portmap.Program, Vers: portmap.Version, Prot: portmap.ProtoTCP, Port: uint32(*pmapPort)})
		pm.Add(portmap.Mapping{Prog: portmap.Program, Vers: portmap.Version, Prot: portmap.ProtoUDP, Port: uint32(*pmapPort)})
		for _, m := range mappings {
			pm.Add(m)
		}
		pmapSrv = &sunrpc.Server{Logger: log}
		pmapSrv.Register(pm.Program())
		pl, err := listen(*pmapPort)
		if err != nil {
			return fmt.Errorf("portmap port: %w", err)
		}
		go pmapSrv.ServeTCP(pl.ln)
		go pmapSrv.ServeUDP(pl.pc)
	}
	// With --portmap-port 111 this server is the rpcbind on 127.0.0.1:111:
	// it answers for its programs itself and refuses SET.
	registered := *pmapPort != 111 && registerRpcbind(log, mappings)

	var httpSrv *http.Server
	if *metricsAddr != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.Handle("/metrics", reg.Handler())
		ml, err := net.Listen("tcp", *metricsAddr)
		if err != nil {
			return fmt.Errorf("--metrics: %w", err)
		}
		httpSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go httpSrv.Serve(ml)
		log.Info("metrics", "addr", ml.Addr().String())
	}
	for _, e := range exports {
		log.Info("exporting", "path", e.Path)
	}
	if os.Geteuid() != 0 {
		log.Warn("not running as root: every call runs as this user, and handles not in the descriptor cache " +
			"(after a restart, or once evicted) cannot be opened (open_by_handle_at needs CAP_DAC_READ_SEARCH)")
	}
	log.Info("snfs serving", "nfs", nfsL.ln.Addr().String(), "mount", mntL.ln.Addr().String())
	// Readiness for systemd (Type=notify, contrib/snfs.service): every listener is
	// bound, so connections and datagrams are queued from now on.
	if _, err := sdNotify("READY=1"); err != nil {
		log.Warn("sd_notify READY=1 failed", "err", err)
	}

	for stop := false; !stop; {
		select {
		case sig := <-sigc:
			log.Info("shutting down", "signal", sig.String())
			stop = true
		case <-hupc:
			reload(log, srv, *exportsFile, loadExports)
		case err := <-errc:
			log.Error("serve failed", "err", err)
			stop = true
		}
	}
	if _, err := sdNotify("STOPPING=1"); err != nil {
		log.Warn("sd_notify STOPPING=1 failed", "err", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if registered {
		unregisterRpcbind(mappings)
	}
	if pmapSrv != nil {
		pmapSrv.Shutdown(ctx)
	}
	if httpSrv != nil {
		httpSrv.Shutdown(ctx)
	}
	if err := srv.Shutdown(ctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}

// reload applies the exports file again (SIGHUP, as `exportfs -r`): the
// server's Reload changes what differs without closing a connection. A file
// that does not parse, or exports that cannot be served, leave the exports in
// service as they were; every outcome is logged.
func reload(log *slog.Logger, srv *server.Server, file string, load func() ([]server.ExportConfig, error)) {
	if file == "" {
		file = "(none: the command line's DIRs)"
	}
	if _, err := sdNotify(fmt.Sprintf("RELOADING=1\nMONOTONIC_USEC=%d", monotonicUsec())); err != nil {
		log.Warn("sd_notify RELOADING=1 failed", "err", err)
	}
	defer func() {
		if _, err := sdNotify("READY=1"); err != nil {
			log.Warn("sd_notify READY=1 failed", "err", err)
		}
	}()
	log.Info("SIGHUP: reloading the exports", "file", file)
	exports, err := load()
	if err == nil {
		var rep server.ReloadReport
		if rep, err = srv.Reload(exports); err == nil {
			log.Info("exports reloaded", "file", file, "exports", len(exports), "added", rep.Added,
				"removed", rep.Removed, "changed", rep.Changed, "unchanged", rep.Unchanged)
			return
		}
	}
	log.Error("exports not reloaded: the exports in service stay as they were", "file", file, "err", err)
}

// monotonicUsec is CLOCK_MONOTONIC in microseconds, as sd_notify's
// MONOTONIC_USEC wants it with RELOADING=1.
func monotonicUsec() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		return 0
	}
	return ts.Nano() / 1000
}

// registerRpcbind registers the services with an rpcbind on 127.0.0.1:111 if one
// answers quickly; clients given explicit ports need none.
func registerRpcbind(log *slog.Logger, maps []portmap.Mapping) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c, err := sunrpc.Dial(ctx, "tcp", "127.0.0.1:111", portmap.Program, portmap.Version)
	if err != nil {
		log.Debug("no rpcbind; not registering", "err", err)
		return false
	}
	defer c.Close()
	for _, m := range maps {
		portmap.Unset(ctx, c, m.Prog, m.Vers)
	}
	for _, m := range maps {
		if ok, err := portmap.Set(ctx, c, m); err != nil || !ok {
			log.Warn("rpcbind refused a registration", "prog", m.Prog, "vers", m.Vers, "err", err)
		}
	}
	log.Info("registered with rpcbind")
	return true
}

func unregisterRpcbind(maps []portmap.Mapping) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c, err := sunrpc.Dial(ctx, "tcp", "127.0.0.1:111", portmap.Program, portmap.Version)
	if err != nil {
		return
	}
	defer c.Close()
	for _, m := range maps {
		portmap.Unset(ctx, c, m.Prog, m.Vers)
	}
}
