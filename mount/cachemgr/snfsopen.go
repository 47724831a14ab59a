package cachemgr

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"snfs/client"
	"snfs/mount/cachedir"
	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
	"snfs/sunrpc"
)

// ProbeSNFS tells whether the NFS server at addr (TCP) speaks the snfs
// consistency protocol: an SNFS NULL call, which a server without it answers
// PROG_UNAVAIL (docs/protocol.md section 2).
func ProbeSNFS(ctx context.Context, addr string) (bool, error) {
	c, err := client.DialNFS(ctx, "tcp", addr)
	if err != nil {
		return false, err
	}
	defer c.Close()
	err = c.Program(snfs1.Program, snfs1.Version).Call(ctx, snfs1.ProcNull, nil, nil)
	var re *sunrpc.RPCError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &re) && !re.Denied && (re.Accept == sunrpc.ProgUnavail || re.Mismatch):
		return false, nil
	}
	return false, fmt.Errorf("SNFS NULL: %w", err)
}

// SNFSMountConfig configures OpenSNFS.
type SNFSMountConfig struct {
	Addr      string // the server's NFS address (TCP); MOUNT and SNFS go to it too
	Export    string
	Name      string // the session's client name (hostname:mountpoint)
	CacheDir  string
	CacheSize int64 // bytes; <= 0: no limit
	// WriteBackDelay and CacheTTL as in snfsConfig.
	WriteBackDelay, CacheTTL time.Duration
	// CloseDelay as in snfsConfig (0: no delayed close;
	// clientfile.UntilRecalled: kept until recalled).
	CloseDelay time.Duration
	// KeptOpens as in snfsConfig: the bound of files with kept opens (<= 0:
	// none).
	KeptOpens int
	Logger    *slog.Logger
	Observer  sunrpc.Observer // the session's calls (client.SessionConfig.Observer); may be nil
	// MountPoint as Config's: for the paths of files in log messages.
	MountPoint string
	// NotRespondingAfter as client.SessionConfig's: when an outage of the
	// server is logged (0: client.NotRespondingAfter).
	NotRespondingAfter time.Duration
	// ReadOnly: a read-only mount (Config.ReadOnly). It opens files for
	// reading only and starts only from a cache directory with nothing to
	// write back.
	ReadOnly bool
	// NoNameCache: no directory is cached under promises (names.go):
	// names are looked up and listed as in nfs mode. For a harness whose
	// own process changes the export beside an in-process server (whose
	// change notifier does not report its own process's changes).
	NoNameCache bool
	// Disconnected: disconnected operation (--disconnected=auto,
	// disconnected.go): after DisconnectAfter (0: DefaultDisconnectAfter)
	// with no answer from the server, the mount serves its cache alone and
	// fails the rest at once. False: calls wait for the server (a hard mount).
	Disconnected    bool
	DisconnectAfter time.Duration
	// Permits: ask for write-back permits on directories and log the
	// changes made under them in CACHEDIR/cml (`--permits=on`, permits.go).
	Permits bool
	// PermitData (with Permits; `--permit-data=on`, the default): the
	// data of regular files made locally is kept locally until their
	// reintegration (permitdata.go). Off: their first write resolves them.
	PermitData bool
}

// OpenSNFS sets up an export in snfs mode: the cache directory, one session to the server (NFS, MOUNT
// and SNFS on one connection, callbacks served by the FS), MNT, and an FS
// that first writes back what a previous instance left dirty in the cache
// directory. Close (after Sync) ends it all.
func OpenSNFS(ctx context.Context, cfg SNFSMountConfig) (*vfs.FS, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cache, err := cachedir.Open(cfg.CacheDir, cfg.CacheSize)
	if err != nil {
		return nil, err
	}
	if n := len(cache.DirtyFiles()); cfg.ReadOnly && n > 0 {
		// Recovery would write them back: a change a read-only mount
		// must not make. Refused before anything is sent.
		cache.Close()
		return nil, fmt.Errorf("read-only mount: the cache directory %s holds unwritten data of %d file(s) from an earlier mount; "+
			"mount read-write once to write it back, or give the read-only mount another cache-dir", cfg.CacheDir, n)
	}
	// A verifier persisted by an older version: this instance is a new one
	// (docs/protocol.md section 7), whatever the cache directory holds.
	os.Remove(filepath.Join(cfg.CacheDir, "client-verifier"))
	h := &handler{ready: make(chan struct{}), lease: &leaseWatch{next: cfg.Observer}}
	var disc *discState
	var gate sunrpc.CallGate
	if cfg.Disconnected {
		disc = newDisc(cfg.DisconnectAfter, cfg.Logger)
		gate = disc.gate
	}
	// A new client verifier at every start (the zero value: the session
	// makes a random one): the server forgets what the previous instance of
	// this name held; its dirty data is reintegrated (Recover).
	sess, err := client.DialSession(ctx, "tcp", cfg.Addr, client.SessionConfig{Name: cfg.Name,
		Handler: h, Logger: cfg.Logger, Reclaim: h.reclaim, ReclaimLocks: h.reclaimLocks, ReclaimPermits: h.reclaimPermits, OnServerRestart: h.serverRestarted, Observer: h.lease,
		NotRespondingAfter: cfg.NotRespondingAfter, CallGate: gate})
	if err != nil {
		cache.Close()
		return nil, err
	}
	fail := func(err error) (*vfs.FS, error) {
		// The registration is of no use: UNREGISTER it, or the server's
		// next restart would wait its whole grace period for this client
		// (docs/protocol.md section 4.7).
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if uerr := sess.Unregister(uctx); uerr != nil {
			cfg.Logger.Warn("UNREGISTER after a failed mount", "err", uerr)
		}
		cancel()
		sess.Disconnect()
		cache.Close()
		return nil, err
	}
	res, err := sess.Mount().Mnt(ctx, cfg.Export)
	if err != nil {
		return fail(fmt.Errorf("MNT %s: %w", cfg.Export, err))
	}
	if res.Status != 0 {
		return fail(fmt.Errorf("MNT %s: %w", cfg.Export, res.Status))
	}
	v, err := vfs.NewFS(ctx, vfs.Config{NFS: sess.NFS(), Root: res.FH, Logger: cfg.Logger, MountPoint: cfg.MountPoint, ReadOnly: cfg.ReadOnly},
		snfsMode(snfsConfig{Session: sess, Cache: cache, WriteBackDelay: cfg.WriteBackDelay, CacheTTL: cfg.CacheTTL,
			CloseDelay: cfg.CloseDelay, KeptOpens: cfg.KeptOpens, CacheDir: cfg.CacheDir, noNames: cfg.NoNameCache, Permits: cfg.Permits,
			PermitData: cfg.PermitData,
			Recover:    true, handler: h, owned: true, export: cfg.Export, disc: disc}))
	if err != nil {
		return fail(err)
	}
	return v, nil
}

// handler serves the session's callbacks once the FS exists (callbacks that
// arrive before wait for it, or for their connection to end).
type handler struct {
	once  sync.Once
	ready chan struct{}
	fs    *vfs.FS
	lease *leaseWatch // the session's calls, for the name cache's lease (namesops.go)
}

func (h *handler) set(fs *vfs.FS) {
	h.once.Do(func() {
		h.fs = fs
		close(h.ready)
	})
}

// serverRestarted: the server lost this client's opens and caching records.
func (h *handler) serverRestarted(refused bool) {
	select {
	case <-h.ready:
		mgrOf(h.fs).serverRestarted(refused)
	default:
	}
}

// reclaim reports this client's state after a server restart (nothing
// before the FS exists: the restart was seen by the first REGISTER's
// successor while starting up, and Recover reintegrates what is dirty).
func (h *handler) reclaim(ctx context.Context) []snfs1.ReclaimItem {
	select {
	case <-h.ready:
		return mgrOf(h.fs).reclaimItems(ctx)
	default:
		return nil
	}
}

// reclaimLocks re-sends this client's locks after a server restart (none
// before the FS exists).
func (h *handler) reclaimLocks(ctx context.Context, verf snfs1.Verifier, lock func(a *snfs1.LockArgs) (*snfs1.LockRes, error)) error {
	select {
	case <-h.ready:
		return mgrOf(h.fs).reclaimLocks(ctx, verf, lock)
	default:
		return nil
	}
}

// reclaimPermits reclaims the write-back permits this client held after a
// server restart (none before the FS exists, or without --permits=on).
func (h *handler) reclaimPermits(ctx context.Context, verf snfs1.Verifier, reclaim func(dirs []nfs3.FH) ([]uint64, error)) error {
	select {
	case <-h.ready:
		if p := mgrOf(h.fs).permitsNow(); p != nil {
			return p.reclaimPermits(verf, reclaim) // permitreclaim.go
		}
	default:
	}
	return nil
}

// Granted serves CB_GRANTED (client.GrantHandler): nothing waits before the
// FS exists.
func (h *handler) Granted(ctx context.Context, a *snfs1.GrantedArgs) snfs1.GrantedStat {
	select {
	case <-h.ready:
		return mgrOf(h.fs).Granted(ctx, a)
	default:
		return snfs1.GrantedUnwanted
	}
}

func (h *handler) Callback(ctx context.Context, fh nfs3.FH, mode state.CallbackMode, attr *nfs3.Fattr) state.Outcome {
	select {
	case <-h.ready:
		return mgrOf(h.fs).Callback(ctx, fh, mode, attr)
	case <-ctx.Done():
		return state.Stale
	}
}
