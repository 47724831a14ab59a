package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"snfs/metrics"

	"snfs/mount"
	"snfs/mount/fusefs"
	"snfs/mount/vfs"
	"snfs/state/clientfile"
)

// readyFDEnv names the descriptor through which a daemonized `snfs mount`
// tells its parent that the mount is usable ("ok") or why not.
const readyFDEnv = "SNFS_MOUNT_READY_FD"

// runDir holds one pid file per mount point, so that `snfs umount` can wait
// for the mount's process to finish writing back: /run/snfs for root, and
// for another user (a mount through fusermount3) $XDG_RUNTIME_DIR/snfs, where
// that user can write.
func runDir() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" && os.Geteuid() != 0 {
		return filepath.Join(d, "snfs")
	}
	return "/run/snfs"
}

const mountSynopsis = `snfs mount [flags] [-o OPTS] SERVER:/EXPORT MOUNTPOINT

Mounts EXPORT of the NFSv3 server SERVER on MOUNTPOINT through FUSE (as root, or as
another user through fusermount3, for that user alone). --mode=nfs (the default) is
plain NFSv3 with close-to-open consistency; --mode=snfs is the snfs consistency
protocol (callbacks, delayed write-back from a cache directory); --mode=auto is snfs
when the server speaks it, else nfs. A MOUNTPOINT that is not empty or already a
mount is refused unless --allow-non-empty. -o takes the same settings as a
comma-separated list, for /etc/fstab: nfs-port=N, mount-port=N, mode=M, cache-dir=D,
cache-size=N, writeback-delay=D, close-delay=D|forever, kept-opens=N, permits=on|off, permit-data=on|off, disconnected=auto|never,
disconnect-after=D, passthrough=BOOL, metrics=ADDR,
log-file=F, log-level=L, locks=nlm|local (nolock, lock, local_lock=none|all),
nlm-port=N, rpcbind-port=N, foreground, debug, nonempty, ro, rw, noexec, exec; and
mount(8)'s and FUSE's common options: allow_other, default_permissions, nosuid,
nodev, noatime, _netdev, noauto, user, defaults, x-* are accepted (a root mount
always is allow_other, a user's with it; every mount is nosuid,nodev); uid=, gid=,
umask=, allow_root, sync are refused, each with its reason. As /sbin/mount.snfs or
/sbin/mount.fuse.snfs (snfs install) it is mount(8)'s helper for types snfs and
fuse.snfs. See docs/mount.md.`

type mountFlags struct {
	nfsPort, mountPort int
	mode               string
	foreground, debug  bool
	logLevel           string
	logFile            string // --log-file: append the log there, not to stderr
	cacheDir           string
	cacheSize          string
	writebackDelay     time.Duration
	metrics            string // --metrics ADDR
	closeDelay         closeDelay
	keptOpens          int    // snfs mode: the bound of files with kept opens
	permits            string // snfs mode: --permits=on|off (write-back permits and the modification log)
	permitData         string // snfs mode: --permit-data=on|off (local data of files made locally)
	passthrough        bool   // snfs mode: FUSE passthrough for reads of whole cached files
	allowNonEmpty      bool   // mount over a non-empty directory or an existing mount (mountpoint.go)
	readOnly, noExec   bool   // -o ro, -o noexec (mountopts.go)
	allowOther         bool   // -o allow_other: a user's mount too is for every user (mountopts.go)
	locks              string // nfs mode: "nlm" (the server's lock manager) or "local" (mount_nlm.go)
	nlmPort            int    // nfs mode: the server's NLM port; 0: its rpcbind's answer
	rpcbindPort        int    // the port of the server's and this host's rpcbind
	disconnected       string // snfs mode: "auto" (disconnected operation) or "never"
	disconnectAfter    time.Duration
}

// applyOpts applies -o's comma-separated settings.
func (f *mountFlags) applyOpts(opts string) error {
	for o := range strings.SplitSeq(opts, ",") {
		if o == "" {
			continue
		}
		k, v, _ := strings.Cut(o, "=")
		var err error
		switch k {
		case "nfs-port", "port":
			f.nfsPort, err = strconv.Atoi(v)
		case "mount-port", "mountport":
			f.mountPort, err = strconv.Atoi(v)
		case "mode":
			f.mode = v
		case "cache-dir":
			f.cacheDir = v
		case "cache-size":
			f.cacheSize = v
		case "writeback-delay":
			f.writebackDelay, err = time.ParseDuration(v)
		case "metrics":
			f.metrics = v
		case "close-delay":
			err = f.closeDelay.Set(v)
		case "kept-opens":
			f.keptOpens, err = strconv.Atoi(v)
		case "disconnected":
			f.disconnected = v
		case "disconnect-after":
			f.disconnectAfter, err = time.ParseDuration(v)
		case "permits":
			f.permits = v
		case "permit-data":
			f.permitData = v
		case "passthrough":
			f.passthrough = true
			if v != "" {
				f.passthrough, err = strconv.ParseBool(v)
			}
		case "nopassthrough":
			f.passthrough = false
		case "nonempty":
			f.allowNonEmpty = true
		case "foreground":
			f.foreground = true
		case "debug":
			f.debug = true
		case "log-file":
			f.logFile = v
		case "log-level":
			f.logLevel = v
		case "locks":
			f.locks = v
		case "local_lock": // Linux's nfs(5): all and flock/posix keep them local
			f.locks = "nlm"
			if v != "none" {
				f.locks = "local"
			}
		case "nolock":
			f.locks = "local"
		case "lock":
			f.locks = "nlm"
		case "nlm-port":
			f.nlmPort, err = strconv.Atoi(v)
		case "rpcbind-port":
			f.rpcbindPort, err = strconv.Atoi(v)
		default:
			var known bool
			if known, err = f.applyGenericOpt(k, strings.Contains(o, "=")); !known {
				return fmt.Errorf("-o: unknown option %q", o)
			}
		}
		if err != nil {
			return fmt.Errorf("-o %s: %w", o, err)
		}
	}
	return nil
}

func mountCmd(args []string) error {
	f, host, export, dir, err := parseMountArgs(args)
	if err == nil {
		var note string
		note, err = checkMountPoint(dir, f.allowNonEmpty)
		fmt.Fprint(os.Stderr, note)
	}
	if err == nil && os.Geteuid() != 0 {
		err = checkUserMount(dir)
		if err == nil && f.allowOther {
			err = checkUserAllowOther("/etc/fuse.conf")
		}
	}
	if err != nil {
		if f.foreground {
			ready(err) // to the parent of a detached mount, which has no other way to know
		}
		return err
	}
	if !f.foreground {
		journal, logPath, err := detachedLog(f, host, export, dir)
		if err != nil {
			fmt.Fprintf(os.Stderr, "snfs: cannot log to %s (%v): the mount logs nowhere; -o log-file=F logs to F\n", logPath, err)
			logPath = ""
		}
		err = daemonize(args, journal, logPath)
		if err != nil {
			dropEmptyLog(logPath)
		}
		return err
	}
	// Every path is absolute by now; the mount process keeps no directory
	// busy.
	os.Chdir("/")
	return runMount(f, host, export, dir)
}

// checkMountArgs checks a mount command line and mounts nothing (mount.snfs
// -f).
func checkMountArgs(args []string) error {
	_, _, _, _, err := parseMountArgs(args)
	return err
}

// parseMountArgs parses and checks `snfs mount`'s command line.
func parseMountArgs(args []string) (f mountFlags, host, export, dir string, err error) {
	fs := newFlagSet("mount", mountSynopsis)
	fs.IntVar(&f.nfsPort, "nfs-port", 2049, "the server's NFS port")
	fs.IntVar(&f.mountPort, "mount-port", 20048, "the server's MOUNT port")
	fs.StringVar(&f.locks, "locks", "nlm", "nfs mode: nlm: fcntl and flock locks go to the server's lock manager (NLM v4), across clients; local: they stay on this machine (nolock)")
	fs.IntVar(&f.nlmPort, "nlm-port", 0, "nfs mode: the server's NLM port (0: ask the server's rpcbind, then try the NFS port)")
	fs.IntVar(&f.rpcbindPort, "rpcbind-port", 111, "the port of the server's rpcbind, and of this host's, where nfs mode's lock callback service is listed")
	fs.StringVar(&f.mode, "mode", "nfs", "nfs: plain NFSv3, close-to-open; snfs: the snfs consistency protocol; auto: snfs if the server speaks it")
	fs.StringVar(&f.cacheDir, "cache-dir", "", "snfs mode's cache directory (default /var/cache/snfs/<hash of SERVER:/EXPORT>)")
	fs.StringVar(&f.cacheSize, "cache-size", "10G", "bound of the cache directory's clean data (K, M, G, T suffixes; 0: no bound)")
	fs.DurationVar(&f.writebackDelay, "writeback-delay", 30*time.Second, "snfs mode: write back dirty data this old")
	fs.StringVar(&f.metrics, "metrics", "", "serve the client's Prometheus metrics at http://ADDR/metrics")
	f.closeDelay = closeDelay(clientfile.UntilRecalled)
	fs.Var(&f.closeDelay, "close-delay", "snfs mode: keep a file's last close this long before sending CLOSE, for a reopen to take over (0: off; forever: until the server recalls it, or --kept-opens is reached)")
	fs.IntVar(&f.keptOpens, "kept-opens", 16384, "snfs mode: at most this many files keep their opens past the last close; the least recently closed are given back beyond it (0: no bound)")
	fs.StringVar(&f.disconnected, "disconnected", "never", "snfs mode: auto: when the server answers nothing for --disconnect-after, serve what is cached and fail the rest at once (EHOSTDOWN), write back on reconnection; never: wait for the server (a hard mount)")
	fs.DurationVar(&f.disconnectAfter, "disconnect-after", 15*time.Second, "snfs mode, --disconnected=auto: how long the server answers nothing before the mount goes offline")
	fs.StringVar(&f.permitData, "permit-data", "on", "snfs mode, with --permits=on: on: the data of regular files made locally stays in CACHE-DIR until their reintegration; reading such a file back after its push costs an OPEN and READs (docs/mount.md); off: their first write makes them on the server")
	fs.StringVar(&f.permits, "permits", "on", "snfs mode: on: ask for write-back permits on directories and log changes under them in CACHE-DIR/cml, reintegrated in batches (docs/mount.md); off: every change is a call")
	fs.BoolVar(&f.passthrough, "passthrough", true, "snfs mode: let the kernel read files held whole in the cache directory itself (FUSE passthrough, Linux 6.9+; off where the kernel lacks it)")
	fs.BoolVar(&f.allowNonEmpty, "allow-non-empty", false, "mount over a non-empty directory or an existing mount, hiding what is there")
	fs.BoolVar(&f.readOnly, "read-only", false, "mount read-only (-o ro): every change fails with EROFS and nothing is sent to the server")
	fs.BoolVar(&f.foreground, "foreground", false, "stay in the foreground (default: detach once the mount is usable)")
	fs.BoolVar(&f.debug, "debug", false, "log every FUSE request")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.logFile, "log-file", "", "append the log to this file (default: standard error; a detached mount logs to the journal under systemd, else to CACHE-DIR/"+mountLogName+", at most 2x10 MiB)")
	opts := fs.String("o", "", "comma-separated options (fstab): nfs-port=N,mount-port=N,mode=M,cache-dir=D,cache-size=N,writeback-delay=D,close-delay=D|forever,kept-opens=N,permits=on|off,permit-data=on|off,disconnected=auto|never,disconnect-after=D,passthrough=BOOL,nopassthrough,metrics=ADDR,log-file=F,log-level=L,locks=nlm|local,nolock,lock,local_lock=none|all,nlm-port=N,rpcbind-port=N,foreground,debug,nonempty,ro,rw,noexec,exec, and mount(8)'s and FUSE's common options (above)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return f, "", "", "", err
	}
	if err := f.applyOpts(*opts); err != nil {
		return f, "", "", "", err
	}
	if len(pos) != 2 {
		fs.Usage()
		return f, "", "", "", errUsage
	}
	switch f.mode {
	case "nfs", "snfs", "auto":
	default:
		return f, "", "", "", fmt.Errorf("--mode: want nfs, snfs or auto, not %q", f.mode)
	}
	if f.locks != "nlm" && f.locks != "local" {
		return f, "", "", "", fmt.Errorf("--locks: want nlm or local, not %q", f.locks)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return f, "", "", "", fmt.Errorf("--log-level: want debug, info, warn or error, not %q", f.logLevel)
	}
	host, export, ok := strings.Cut(pos[0], ":")
	if !ok || host == "" || !strings.HasPrefix(export, "/") {
		return f, "", "", "", fmt.Errorf("want SERVER:/EXPORT, not %q", pos[0])
	}
	// Relative paths are the user's, resolved here: a detached mount
	// process runs in /.
	if dir, err = resolveMountPoint(pos[1]); err != nil {
		return f, "", "", "", err
	}
	for _, p := range []*string{&f.cacheDir, &f.logFile} {
		if *p != "" {
			if *p, err = filepath.Abs(*p); err != nil {
				return f, "", "", "", err
			}
		}
	}
	if fi, err := os.Stat(dir); errors.Is(err, syscall.ENOTCONN) {
		// A dead FUSE mount: checkMountPoint detaches it.
	} else if errors.Is(err, syscall.ESTALE) {
		// A mount whose export is gone: checkMountPoint refuses it (a
		// mount is there) unless --allow-non-empty.
	} else if err != nil {
		return f, "", "", "", err
	} else if !fi.IsDir() {
		return f, "", "", "", fmt.Errorf("%s is not a directory", dir)
	}
	return f, host, export, dir, nil
}

// daemonize runs this command again with --foreground, detached (a new
// session, standard streams on /dev/null; stderr kept if it is the journal;
// logging to logPath if not ""), and returns once the child says the mount is
// usable, or with the child's error.
func daemonize(args []string, journal bool, logPath string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer null.Close()
	cmd := exec.Command(self, append([]string{"mount", "--foreground"}, args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = null, null, null
	if journal {
		cmd.Stderr = os.Stderr
	}
	cmd.ExtraFiles = []*os.File{w} // fd 3
	cmd.Env = append(os.Environ(), readyFDEnv+"=3")
	if logPath != "" {
		cmd.Env = append(cmd.Env, mountLogEnv+"="+logPath)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	// The child starts in this working directory, to resolve relative
	// paths as this command did, and then changes to / (mountCmd).
	if err := cmd.Start(); err != nil {
		w.Close()
		return err
	}
	w.Close()
	msg := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(r).ReadString('\n')
		msg <- strings.TrimSpace(line)
	}()
	select {
	case m := <-msg:
		if m == "ok" {
			cmd.Process.Release()
			if logPath != "" {
				fmt.Fprintf(os.Stderr, "snfs: mounted; the mount logs to %s\n", logPath)
			}
			return nil
		}
		cmd.Wait()
		if m == "" {
			m = "the mount process exited without saying why"
		}
		return errors.New(m)
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		cmd.Wait()
		return errors.New("the mount did not become ready within 2 minutes")
	}
}

// ready reports the outcome to a waiting parent, if any.
func ready(err error) {
	fd, e := strconv.Atoi(os.Getenv(readyFDEnv))
	if e != nil {
		return
	}
	os.Unsetenv(readyFDEnv)
	p := os.NewFile(uintptr(fd), "ready")
	if err != nil {
		fmt.Fprintf(p, "%v\n", err)
	} else {
		fmt.Fprintln(p, "ok")
	}
	p.Close()
}

func pidFile(dir string) string {
	return filepath.Join(runDir(), strings.ReplaceAll(strings.TrimPrefix(dir, "/"), "/", "%")+".pid")
}

// runMount mounts and serves until unmounted (or SIGTERM/SIGINT, which
// unmount), then writes back what is left and tells the server.
func runMount(f mountFlags, host, export, dir string) (err error) {
	defer func() {
		if err != nil {
			ready(err)
		}
	}()
	defer func() { err = explainMnt(explainDial(err), host, export) }() // before ready's: both say it
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	logTo, closeLog, err := mountLog(f)
	if err != nil {
		return err
	}
	defer closeLog()
	log := slog.New(slog.NewTextHandler(logTo, &slog.HandlerOptions{Level: level}))
	life, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctx, stop := context.WithTimeout(life, 30*time.Second)
	defer stop()

	nfsAddr := net.JoinHostPort(host, strconv.Itoa(f.nfsPort))
	mode, err := mount.ChooseMode(ctx, log, mount.Mode(f.mode), nfsAddr)
	if err != nil {
		return err
	}
	// Always counted: every mount serves its metrics on its stats socket
	// (snfs stat MOUNTPOINT), and at --metrics ADDR if given.
	reg := metrics.NewClient()
	cfg := mount.Config{Mode: mode, Addr: nfsAddr, Export: export, Dir: dir, Logger: log, Observer: reg, ReadOnly: f.readOnly}
	fo := fusefs.Options{FsName: host + ":" + export, Debug: f.debug, NoExec: f.noExec, AllowOther: f.allowOther}
	lost := "what was written but not yet flushed by a close or fsync is lost"
	var cacheDir string
	fresh := false
	if mode == mount.SNFS {
		if cacheDir, fresh, err = snfsConfig(&cfg, f, host, export, dir); err != nil {
			return err
		}
		fo.Passthrough = f.passthrough
		lost = "dirty files stay in the cache directory " + cacheDir + " and are written back by the next mount with it"
	} else {
		if f.mountPort != f.nfsPort {
			cfg.MountAddr = net.JoinHostPort(host, strconv.Itoa(f.mountPort))
		}
		cfg.NFSLocks = func(ctx context.Context) (*vfs.NLMConfig, error) { return nlmConfig(ctx, log, f, host, nfsAddr, dir) }
	}
	m, err := mount.Open(ctx, cfg)
	if err != nil {
		if mode == mount.SNFS {
			if fresh {
				dropFreshCacheDir(cacheDir)
			}
			return explainCacheBusy(err, cacheDir)
		}
		return err
	}
	defer m.Close()
	if mode == mount.SNFS {
		clientMetrics(reg, m.FS)
		defer watchDisconnectRequests(log, m.FS)() // SIGUSR1, SIGUSR2
	}
	statusMetrics(reg, m)
	if f.metrics != "" {
		stopMetrics, err := serveMetrics(f.metrics, reg, log)
		if err != nil {
			return err
		}
		defer stopMetrics()
	}
	serving, stopServing := context.WithCancel(life)
	defer stopServing()
	srv, err := m.Serve(serving, fo)
	if err != nil {
		return err
	}
	defer writePidFile(dir)()
	defer serveStatsSocket(dir, reg, statusHandler(m), log)()
	if mode == mount.SNFS {
		writeCacheDirFile(dir, cacheDir)
		log.Info("mounted", "export", host+":"+export, "on", dir, "mode", string(mode), "cache_dir", cacheDir)
	} else {
		log.Info("mounted", "export", host+":"+export, "on", dir, "mode", string(mode))
	}
	ready(nil)

	end := newMountEnd(log, dir)
	end.serve(srv, stopServing)
	// Whatever is still unwritten goes now: in nfs mode a shared mapping
	// written after its file's last close, in snfs mode the cache
	// directory's dirty files.
	sctx, sstop := end.writeBackContext(life, lost)
	defer sstop()
	ferr := m.Finish(sctx)
	if ferr != nil {
		log.Error("write-back at unmount", "err", ferr)
	}
	if err := m.Close(); err != nil {
		log.Warn("close", "err", err)
	}
	if ferr != nil {
		return fmt.Errorf("write-back at unmount: %w", ferr)
	}
	log.Info("unmounted", "on", dir)
	return nil
}

// umountCmd unmounts MOUNTPOINT and waits for its mount process to finish
// writing back and exit.
func umountCmd(args []string) error {
	fs := newFlagSet("umount", "snfs umount [flags] MOUNTPOINT")
	timeout := fs.Duration("timeout", 5*time.Minute, "how long to wait for the mount process to write back and exit")
	lazy := fs.Bool("lazy", false, "detach the mount even if it is busy (MNT_DETACH)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return errUsage
	}
	dir, err := resolveMountPoint(pos[0])
	if err != nil {
		return err
	}
	if ms, err := mountsAt(dir); err == nil && len(ms) == 0 {
		return fmt.Errorf("%s is not mounted", dir)
	}
	pid := 0
	if b, err := os.ReadFile(pidFile(dir)); err == nil {
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	flags := 0
	if *lazy {
		flags = syscall.MNT_DETACH
	}
	if err := syscall.Unmount(dir, flags); errors.Is(err, syscall.EPERM) && os.Geteuid() != 0 {
		// A user's own mount: fusermount3 unmounts it.
		if err := fusefs.UserUnmount(dir, *lazy); err != nil {
			return err
		}
	} else if err != nil {
		return fmt.Errorf("unmount %s: %w", dir, err)
	}
	if pid <= 0 {
		return nil
	}
	deadline := time.Now().Add(*timeout)
	for processAlive(pid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("the mount process %d has not finished writing back after %v", pid, *timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// writePidFile records this mount process under runDir (snfs umount waits for
// it) and returns the function that removes the record.
func writePidFile(dir string) func() {
	os.MkdirAll(runDir(), 0o755)
	pf := pidFile(dir)
	os.WriteFile(pf, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644)
	return func() { os.Remove(pf) }
}

// closeDelay is --close-delay: a duration, or "forever" (kept until the
// server recalls it: clientfile.UntilRecalled, the default). Forever is the
// default because a kept open costs the server one table entry, which it
// recalls with CB_RELINQUISH when its table fills (docs/protocol.md 15),
// and the client bounds them itself (--kept-opens), while every reopen
// after a deadline is a round trip: what a build reading its headers again,
// or a program reopening the files it created, waits for on a real network.
type closeDelay time.Duration

func (d *closeDelay) String() string {
	if time.Duration(*d) == clientfile.UntilRecalled {
		return "forever"
	}
	return time.Duration(*d).String()
}

func (d *closeDelay) Set(v string) error {
	if v == "forever" {
		*d = closeDelay(clientfile.UntilRecalled)
		return nil
	}
	t, err := time.ParseDuration(v)
	if err != nil {
		return err
	}
	if t < 0 {
		return fmt.Errorf("negative: %v (forever keeps it until recalled)", t)
	}
	*d = closeDelay(t)
	return nil
}
