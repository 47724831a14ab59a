package mount

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"snfs/client"
	"snfs/mount/cachemgr"
	"snfs/mount/fusefs"
	"snfs/mount/vfs"
	"snfs/mount3"
	"snfs/sunrpc"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Mode is how a mount keeps its cache consistent with the server.
type Mode string

// The modes (`snfs mount --mode`).
const (
	NFS  Mode = "nfs"  // plain NFSv3: close-to-open, attribute cache timeouts
	SNFS Mode = "snfs" // the consistency protocol (docs/protocol.md), a cache directory
	Auto Mode = "auto" // snfs if the server speaks the protocol (an SNFS NULL), else nfs
)

// umntTimeout bounds nfs mode's UMNT at Close: it only informs the server's
// mount list (RFC 1813 section 5.2.3), so a server gone by then must not keep
// the mount's end waiting (snfs mode's is bounded the same way, in vfs).
const umntTimeout = 5 * time.Second

// Config is one mount of an export.
type Config struct {
	Mode   Mode
	Addr   string // the server's NFS address (TCP)
	Export string
	// MountAddr is where MOUNT answers, if not on the NFS connection (nfs
	// mode; snfs mode sends MOUNT on its session's connection).
	MountAddr string
	// Dir is the mount point (for Serve and the paths of files in log
	// messages).
	Dir    string
	Logger *slog.Logger
	// Observer is told about every call (the mount's metrics); may be nil.
	Observer sunrpc.Observer
	ReadOnly bool

	// nfs mode: the vfs settings (attribute cache timeouts, dirty limit,
	// server locks); Open fills in NFS, Root, Logger and MountPoint (Dir),
	// and sets ReadOnly if the Config's is.
	NFSConfig vfs.Config
	// NFSLocks, if set in nfs mode, gives NFSConfig.NLM once MNT answered
	// (finding the server's lock manager: rpcbind, NLM and NSM probes).
	NFSLocks func(ctx context.Context) (*vfs.NLMConfig, error)

	// snfs mode: the session's client name (HOSTNAME:MOUNTPOINT), the cache
	// directory and its bound, the delays (cachemgr.SNFSMountConfig).
	Name                       string
	CacheDir                   string
	CacheSize                  int64
	WriteBackDelay, CloseDelay time.Duration
	KeptOpens                  int
	CacheTTL                   time.Duration
	NotRespondingAfter         time.Duration
	// NoNameCache: snfs mode caches no directory under promises
	// (cachemgr.SNFSMountConfig.NoNameCache).
	NoNameCache bool
	// Disconnected and DisconnectAfter: snfs mode's disconnected operation
	// (cachemgr.SNFSMountConfig's; --disconnected=auto). Refused in nfs mode.
	Disconnected    bool
	DisconnectAfter time.Duration
	// Permits: snfs mode asks for write-back permits and logs changes
	// under them (cachemgr.SNFSMountConfig.Permits; --permits=on).
	Permits bool
	// PermitData: with Permits, files made locally keep their data locally
	// until reintegrated (cachemgr.SNFSMountConfig.PermitData;
	// --permit-data=on, the command's default).
	PermitData bool
}

// Mount is an export opened by Open: the FS (nfs or snfs mode, as chosen),
// the connections it owns, and once Serve has run, the FUSE server.
type Mount struct {
	FS   *vfs.FS
	Mode Mode // NFS or SNFS (Auto resolved)

	cfg Config
	log *slog.Logger
	// nfs mode's connections (snfs mode's session belongs to the FS).
	nfs      *client.NFS
	mnt      *client.Mounter
	ownMnt   bool // mnt is a connection of its own (MountAddr)
	srv      *fuse.Server
	closed   bool
	closeErr error
	// reach: whether nfs mode's NFS connection reaches the server (snfs
	// mode's session has its own).
	reach *client.Reach
}

// ChooseMode resolves Auto (asking the server at addr with an SNFS NULL,
// cachemgr.ProbeSNFS, and logging the choice); "" is NFS.
func ChooseMode(ctx context.Context, log *slog.Logger, mode Mode, addr string) (Mode, error) {
	switch mode {
	case NFS, SNFS:
		return mode, nil
	case "":
		return NFS, nil
	case Auto:
	default:
		return "", fmt.Errorf("mode %q: want nfs, snfs or auto", mode)
	}
	ok, err := cachemgr.ProbeSNFS(ctx, addr)
	if err != nil {
		return "", fmt.Errorf("connect to NFS at %s: %w", addr, err)
	}
	mode = NFS
	if ok {
		mode = SNFS
	}
	if log != nil {
		log.Info("--mode=auto", "chose", string(mode))
	}
	return mode, nil
}

// Open connects to the server and sets up the export in cfg.Mode (Auto:
// asks the server first): nfs mode dials NFS (and MOUNT if elsewhere), MNT,
// and makes the FS (vfs.New); snfs mode opens the cache directory and a
// session (cachemgr.OpenSNFS). Nothing is mounted yet (Serve does it). ctx bounds
// the setup only.
func Open(ctx context.Context, cfg Config) (*Mount, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	log := cfg.Logger
	mode, err := ChooseMode(ctx, log, cfg.Mode, cfg.Addr)
	if err != nil {
		return nil, err
	}
	if cfg.Disconnected && mode != SNFS {
		return nil, fmt.Errorf("--disconnected=auto needs snfs mode (the server at %s is mounted in %s mode)", cfg.Addr, mode)
	}
	m := &Mount{cfg: cfg, log: log, Mode: mode}
	if m.Mode == SNFS {
		err = m.openSNFS(ctx)
	} else {
		err = m.openNFS(ctx)
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

// openSNFS is Open in snfs mode.
func (m *Mount) openSNFS(ctx context.Context) error {
	cfg := m.cfg
	scfg := cachemgr.SNFSMountConfig{Addr: cfg.Addr, Export: cfg.Export, Name: cfg.Name,
		CacheDir: cfg.CacheDir, CacheSize: cfg.CacheSize, WriteBackDelay: cfg.WriteBackDelay,
		CacheTTL: cfg.CacheTTL, CloseDelay: cfg.CloseDelay, KeptOpens: cfg.KeptOpens, Logger: m.log, MountPoint: cfg.Dir,
		NotRespondingAfter: cfg.NotRespondingAfter, ReadOnly: cfg.ReadOnly, NoNameCache: cfg.NoNameCache,
		Disconnected: cfg.Disconnected, DisconnectAfter: cfg.DisconnectAfter, Permits: cfg.Permits,
		PermitData: cfg.PermitData}
	if cfg.Observer != nil {
		scfg.Observer = cfg.Observer
	}
	v, err := cachemgr.OpenSNFS(ctx, scfg)
	if err != nil {
		return err
	}
	m.FS = v
	return nil
}

// openNFS is Open in nfs mode.
func (m *Mount) openNFS(ctx context.Context) error {
	cfg := m.cfg
	var dialOpts []sunrpc.DialOption
	if cfg.Observer != nil {
		dialOpts = append(dialOpts, client.WithObserver(cfg.Observer))
	}
	m.reach = client.NewReach(cfg.Addr)
	nfs, err := client.DialNFS(ctx, "tcp", cfg.Addr, append(dialOpts, sunrpc.WithOnConnect(m.reach.Hook(nil)),
		client.TrackServerState(m.log, cfg.Addr, cfg.NotRespondingAfter, m.reach))...)
	if err != nil {
		return fmt.Errorf("connect to NFS at %s: %w", cfg.Addr, err)
	}
	m.nfs = nfs
	// MOUNT on the NFS connection when they share a port (snfs serve can).
	m.mnt = &client.Mounter{Client: nfs.Program(mount3.Program, mount3.Version)}
	if cfg.MountAddr != "" && cfg.MountAddr != cfg.Addr {
		if m.mnt, err = client.DialMount(ctx, "tcp", cfg.MountAddr, dialOpts...); err != nil {
			nfs.Close()
			return fmt.Errorf("connect to MOUNT at %s: %w", cfg.MountAddr, err)
		}
		m.ownMnt = true
	}
	fail := func(err error) error {
		if m.ownMnt {
			m.mnt.Close()
		}
		nfs.Close()
		return err
	}
	res, err := m.mnt.Mnt(ctx, cfg.Export)
	if err != nil {
		return fail(fmt.Errorf("MNT %s: %w", cfg.Export, err))
	}
	if res.Status != 0 {
		return fail(fmt.Errorf("MNT %s: %w", cfg.Export, res.Status))
	}
	vcfg := cfg.NFSConfig
	if cfg.NFSLocks != nil {
		if vcfg.NLM, err = cfg.NFSLocks(ctx); err != nil {
			return fail(err)
		}
	}
	vcfg.NFS, vcfg.Root, vcfg.Logger = nfs, res.FH, m.log
	vcfg.MountPoint, vcfg.ReadOnly = cfg.Dir, vcfg.ReadOnly || cfg.ReadOnly
	v, err := vfs.New(ctx, vcfg)
	if err != nil {
		return fail(err)
	}
	m.FS = v
	return nil
}

// Serve mounts the FS on cfg.Dir (fusefs.Mount) and serves it until it is
// unmounted; life is what the requests' handlers wait on (cancelled, they
// give up: a forced unmount). It returns once mounted.
func (m *Mount) Serve(life context.Context, o fusefs.Options) (*fuse.Server, error) {
	srv, err := fusefs.Mount(life, m.cfg.Dir, m.FS, o)
	if err != nil {
		return nil, err
	}
	m.srv = srv
	return srv, nil
}

// Unmount unmounts what Serve mounted (fusefs.Unmount: forced if a normal
// unmount does not work within timeout) and waits for the serving to end.
func (m *Mount) Unmount(timeout time.Duration) error {
	if m.srv == nil {
		return nil
	}
	err := fusefs.Unmount(m.cfg.Dir, m.srv, timeout)
	m.srv = nil
	return err
}

// Finish ends a mount whose kernel mount is gone (Unmount, or umount(2) from
// outside): everything still dirty is written back (vfs.FS.Sync: nfs mode's
// data not flushed by a close or fsync, snfs mode's cache directory) within
// ctx, and in nfs mode the server's mount list is told this client is done
// (UMNT, bounded by umntTimeout and ctx; logged, not returned: RFC 1813
// section 5.2.3 makes it informational). The write-back's error is
// returned; Close follows either way.
func (m *Mount) Finish(ctx context.Context) error {
	if err := m.FS.Sync(ctx); err != nil {
		return err
	}
	if m.nfs != nil {
		uctx, cancel := context.WithTimeout(ctx, umntTimeout)
		if err := m.mnt.Umnt(uctx, m.cfg.Export); err != nil {
			m.log.Warn("UMNT", "err", err)
		}
		cancel()
	}
	return nil
}

// Close releases the mount after its kernel mount is gone: the FS (snfs
// mode: its delayed CLOSEs, UNREGISTER, UMNT and session, vfs.FS.Close) and
// nfs mode's connections; it returns the FS's error. Nothing is written back (Finish does). Only the
// first call does anything; later ones return its error.
func (m *Mount) Close() error {
	if m.closed {
		return m.closeErr
	}
	m.closed = true
	m.closeErr = m.FS.Close()
	if m.nfs != nil {
		// Their errors only say the connection broke earlier.
		if m.ownMnt {
			m.mnt.Close()
		}
		m.nfs.Close()
	}
	return m.closeErr
}
