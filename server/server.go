package server

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"snfs/consist"
	"snfs/drcstore"
	"snfs/gather"
	"snfs/lockd"
	"snfs/metrics"
	"snfs/mount3"
	"snfs/nfs3"
	"snfs/state"
	"snfs/store"
	"snfs/sunrpc"
)

// Config configures a Server.
type Config struct {
	StateDir string
	Exports  []ExportConfig
	Logger   *slog.Logger
	Observer sunrpc.Observer // optional: per-call metrics
	Metrics  *metrics.Registry

	// WriteGather is the write gathering policy for stable writes and COMMIT
	// (default Adaptive); GatherMaxWait bounds any wait (default 2 ms).
	WriteGather   gather.Mode
	GatherMaxWait time.Duration

	// JukeboxAfter bounds how long a stable WRITE or COMMIT waits for a flush (a
	// stalled disk) before answering NFS3ERR_JUKEBOX, freeing its worker; the
	// client retries later. Default 5 s.
	JukeboxAfter time.Duration

	// MaxInFlight is sunrpc.Server.MaxInFlight: calls executing at once across
	// all connections (0: its default).
	MaxInFlight int
	// MaxLocksPerClient bounds each client's lock records (lockmgr.Config);
	// 0: the lock manager's default.
	MaxLocksPerClient int
	// LockDelegation lets the one snfs client using a file serve its locks
	// itself until another user comes (docs/protocol.md, "Lock
	// delegation"). Needs root (fanotify permission events); off by default.
	LockDelegation bool

	// SpinPoll is sunrpc.Server.SpinPoll: how long a busy TCP connection polls
	// for its next call before parking (0: the default, negative: never).
	SpinPoll time.Duration

	// Sync, if set, replaces store.Sync for data flushes: tests use it to inject
	// flush failures and record when data became durable.
	Sync func(n *store.Node, dataOnly bool) error

	// Clock is the consistency protocol's clock (nil: the wall clock): tests
	// move a consist.OffsetClock forward instead of waiting for a timeout.
	Clock consist.Clock

	// Table is the consistency protocol's state table: its bound and timings
	// (callback timeout, plain-access hold, ...; zero fields take the defaults).
	Table state.Config
	// Dirs bounds the directory promises (docs/protocol.md section 20); zero
	// fields take state.DirConfig's defaults, its timings are Table's.
	Dirs state.DirConfig
	// Permits bounds the write-back permits (docs/protocol.md section 21);
	// zero fields take state.PermitConfig's defaults.
	Permits state.PermitConfig

	// Grace bounds the grace period after a restart, while the protocol
	// clients known before it reclaim their state (docs/protocol.md, "Grace
	// period"): 0 means the default, 15 s; negative means none.
	Grace time.Duration
	// VolatileClients keeps the consistency protocol's client records and
	// version mark in memory instead of StateDir: nothing of it survives a
	// restart, so there is no grace period (benchmarks compare the two).
	VolatileClients bool

	// SavedReplies and SavedReplyAge bound the replies of non-idempotent
	// calls kept in StateDir for retransmissions after a restart (package
	// drcstore; 0: its defaults).
	SavedReplies  int
	SavedReplyAge time.Duration
	// VolatileReplies keeps those replies in memory only, as knfsd does: a
	// retransmission after a restart is executed again (benchmarks compare
	// the two).
	VolatileReplies bool
	// ReintegrateFlushEach makes each REINTEGRATE record durable as its
	// NFSv3 procedure would, one flush per record, instead of one group
	// commit per batch (benchmarks compare the two).
	ReintegrateFlushEach bool
	// ClientRPCBindPort is the port of the NLM clients' rpcbind, through which
	// the server finds their lock manager (GRANTED, the _RES calls) and
	// status monitor (SM_NOTIFY): 0 means 111 (tests run their own).
	ClientRPCBindPort int
	// NoChangeNotifier runs the store without change notifications (as where
	// fanotify is unavailable): local processes' changes are then seen only
	// by the change attribute an OPEN compares (tests use it).
	NoChangeNotifier bool
	// NoCreateOpen serves the SNFS program without CREATE_OPEN (PROC_UNAVAIL),
	// as a server from before it: tests use it for the clients' fallback to
	// CREATE and OPEN.
	NoCreateOpen bool
}

// DefaultGrace is Config.Grace's default.
const DefaultGrace = 15 * time.Second

// Server is the NFSv3 + MOUNT v3 service over one store.
type Server struct {
	reint reintQueues // REINTEGRATEs of one client, one at a time (reintegrate.go)
	// reintOpens: the opens CML_CREATE_OPEN records were granted, for a
	// resend (reintegrateopen.go).
	reintOpens reintOpenMemo
	// grouped holds the commit sets of the REINTEGRATE calls being applied,
	// by call (reintegratecommit.go); grouping counts them.
	grouped   sync.Map
	grouping  atomic.Int32
	flushEach bool // Config.ReintegrateFlushEach
	log       *slog.Logger
	store     *store.Store
	metrics   *metrics.Registry // may be nil
	syncFn    func(n *store.Node, dataOnly bool) error
	jukebox   time.Duration
	RPC       *sunrpc.Server // serves both programs; exported for listeners and tests

	consist *consist.Driver // the consistency protocol's state
	locks   *lockd.Driver   // the lock manager (locks.go)
	nlm     *nlmService     // NLM and NSM (nlm.go, nsm.go)

	lockLease lockLease  // probes of lock holders, revoked clients (locklease.go)
	delegs    lockDelegs // lock delegations (lockdeleg.go)

	replies *drcstore.Store // the saved replies of non-idempotent calls; nil with VolatileReplies

	exports atomic.Pointer[exportTable] // replaced by Reload
	// reloadMu serialises Reload; gatherCfg is what a reload's new export
	// gathers with.
	reloadMu  sync.Mutex
	gatherCfg gather.Config

	verf atomic.Pointer[[nfs3.WriteVerfSize]byte]

	mu     sync.Mutex
	mounts map[mount3.MountBody]struct{} // for DUMP; guarded by mu
}

// New opens the store, the exports and the write verifier.
func New(cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	st, err := store.OpenWith(cfg.StateDir, store.Options{NoNotifier: cfg.NoChangeNotifier})
	if err != nil {
		return nil, err
	}
	s := &Server{log: cfg.Logger, store: st, metrics: cfg.Metrics, mounts: map[mount3.MountBody]struct{}{}, syncFn: cfg.Sync,
		gatherCfg: gather.Config{Mode: cfg.WriteGather, MaxWait: cfg.GatherMaxWait}, flushEach: cfg.ReintegrateFlushEach}
	if s.syncFn == nil {
		s.syncFn = st.Sync
	}
	if s.jukebox = cfg.JukeboxAfter; s.jukebox <= 0 {
		s.jukebox = 5 * time.Second
	}
	tab := &exportTable{byID: map[uint32]*export{}, byPath: map[string]*export{}}
	for _, ec := range cfg.Exports {
		p, err := exportDir(ec)
		if err != nil {
			st.Close()
			return nil, err
		}
		e, err := s.openExport(ec, p)
		if err != nil {
			st.Close()
			return nil, err
		}
		tab.add(e, ec, p)
	}
	s.exports.Store(tab)
	s.newVerifier()
	if err := st.AttrCacheError(); err != nil {
		s.log.Info("READDIRPLUS attributes are read from the file system every time (no change notifier)", "err", err)
	}
	cc := consist.Config{StateDir: cfg.StateDir, Grace: cfg.Grace, Table: cfg.Table, Dirs: cfg.Dirs, Permits: cfg.Permits, Logger: cfg.Logger, Attr: s.handleAttr,
		Leases: storeLeases{st}, Clock: cfg.Clock}
	if cc.Grace == 0 {
		cc.Grace = DefaultGrace
	}
	if cfg.VolatileClients {
		cc.StateDir = ""
	}
	// The saved replies are loaded before the consistency state starts its
	// grace period's clock: a large reply log read after it took seconds of
	// the grace period from the clients reclaiming (seen after hundreds of
	// restarts in a crash-cycle run).
	drc, err := s.openReplies(cfg)
	if err != nil {
		st.Close()
		return nil, err
	}
	closeReplies := func() {
		if s.replies != nil {
			s.replies.Close()
		}
	}
	s.consist, err = consist.New(cc)
	if err != nil {
		closeReplies()
		st.Close()
		return nil, err
	}
	if cfg.Metrics != nil {
		cfg.Metrics.MustRegister(s.consist.Collector())
	}
	if s.nlm, err = newNLM(s, cfg); err != nil {
		s.consist.Stop()
		closeReplies()
		st.Close()
		return nil, err
	}
	s.newLocks(cfg, cc.Grace)
	s.newLockDelegs(cfg.LockDelegation)
	// Local processes on this machine change exported files too: their
	// changes end the clients' caches of them (docs/protocol.md, "Local
	// processes").
	st.OnForeignChange(s.consist.Changed)
	st.OnLeaseBreak(s.consist.LeaseBroken)
	// The store gives up the writable descriptors of idle files (so that a
	// program written through the server runs on its machine); their flush
	// failing is a failed flush.
	st.OnFlushFail(s.flushFailed)
	// MaxRecord: a REINTEGRATE at the protocol's bounds (docs/protocol.md
	// section 2: 8 MiB) is accepted; the RPC layer's default is NFS's.
	s.RPC = &sunrpc.Server{Logger: cfg.Logger, Observer: cfg.Observer, DRC: drc, SpinPoll: cfg.SpinPoll,
		MaxInFlight: cfg.MaxInFlight, MaxRecord: 8<<20 + 64<<10}
	s.RPC.Register(s.nfsProgram())
	s.RPC.Register(s.mountProgram())
	s.RPC.Register(s.snfsProgram(cfg.NoCreateOpen))
	s.RPC.Register(s.nlmProgram())
	s.RPC.Register(s.nsmProgram())
	s.nlm.notifyAll()
	s.nlm.pruneAfter(cc.Grace)
	return s, nil
}

// openReplies makes the duplicate request cache, with the replies saved in
// the state directory before the restart.
func (s *Server) openReplies(cfg Config) (*sunrpc.DRC, error) {
	drc := sunrpc.NewDRC(16384, 64<<20)
	if cfg.VolatileReplies {
		return drc, nil
	}
	var err error
	s.replies, err = drcstore.Open(cfg.StateDir, cfg.SavedReplies, cfg.SavedReplyAge)
	if err != nil {
		return nil, err
	}
	if err := drc.Persist(s.replies, s.replies.MaxAge()); err != nil {
		s.replies.Close()
		return nil, err
	}
	if n := drc.Loaded(); n > 0 {
		s.log.Info("replies saved before the restart are replayed to retransmissions", "replies", n)
	}
	// Before anything is served, while the files are as the restart left
	// them (appendintent.go).
	if err := drc.Intents(s.resolveIntent); err != nil {
		drc.Close()
		s.replies.Close()
		return nil, err
	}
	return drc, nil
}

// GraceOver is closed when the grace period after the start ends (at once if
// there is none).
func (s *Server) GraceOver() <-chan struct{} { return s.consist.GraceOver() }

// Grace reports on the grace period after the start.
func (s *Server) Grace() consist.GraceReport { return s.consist.Grace() }

// DrainChanges applies every file change notification queued now: when it
// returns, the consistency table has seen every change that local processes
// completed before the call (for tests; OPEN drains by itself).
func (s *Server) DrainChanges() { s.store.DrainChanges() }

// RootHandle returns the root handle of the export at path, or nil.
func (s *Server) RootHandle(path string) []byte {
	if e := s.table().byPath[path]; e != nil {
		return e.st.Root
	}
	return nil
}

// Verifier returns the current write verifier.
func (s *Server) Verifier() [nfs3.WriteVerfSize]byte { return *s.verf.Load() }

// ChangesLost is how many times the store's change notifier lost events (or
// stopped), so that every client's cache was called back (store.ChangesLost):
// what a test of caching checks before it takes a callback for a defect.
func (s *Server) ChangesLost() uint64 { return s.store.ChangesLost() }

// newVerifier installs a fresh write verifier. It is called at start and whenever
// data a client wrote UNSTABLE may have been lost (a failed flush), so that clients
// resend everything not yet committed.
func (s *Server) newVerifier() {
	var v [nfs3.WriteVerfSize]byte
	rand.Read(v[:])
	s.verf.Store(&v)
}

// flushFailed records a failed flush: clients must rewrite uncommitted data.
func (s *Server) flushFailed(err error) {
	s.log.Error("flush failed; changing the write verifier", "err", err)
	s.newVerifier()
}

// Serve serves TCP (and UDP when pc is not nil) until Shutdown.
func (s *Server) Serve(ln net.Listener, pc net.PacketConn) error {
	errc := make(chan error, 2)
	n := 1
	go func() { errc <- s.RPC.ServeTCP(ln) }()
	if pc != nil {
		n++
		go func() { errc <- s.RPC.ServeUDP(pc) }()
	}
	var first error
	for i := 0; i < n; i++ {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Shutdown stops serving, lets in-flight calls finish, flushes every export's file
// system (so data written UNSTABLE is on disk when the server exits cleanly), and
// closes the store.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.RPC.Shutdown(ctx)
	s.store.OnForeignChange(nil)
	s.store.OnLeaseBreak(nil)
	s.store.OnFlushFail(nil)
	s.store.DrainChanges() // waits for a drain telling the driver of a change
	s.nlm.stop()
	s.lockLease.stop()
	s.delegs.stop()
	s.locks.Stop()
	s.consist.Stop()
	// Closed after the driver's stop: the replies it completes as it stops
	// (a CREATE_OPEN whose file is made and whose open was waiting, a
	// change whose promise breaks were out) are saved, so that the
	// client's retransmission after the restart gets them and does not run
	// the change again (docs/protocol.md 4.21).
	s.RPC.DRC.Close()
	if s.replies != nil {
		if cerr := s.replies.Close(); cerr != nil {
			s.log.Error("closing the saved replies failed", "err", cerr)
		}
	}
	for _, e := range s.table().list {
		if ferr := s.store.SyncExport(e.st); ferr != nil {
			s.log.Error("flush at shutdown failed", "export", e.st.Path, "err", ferr)
			if err == nil {
				err = ferr
			}
		}
	}
	s.store.Close()
	return err
}

// req is what a handler knows about the object a call is about.
type req struct {
	node *store.Node // nil only for an op with Gone whose file no longer exists
	exp  *export
	opts *Options
	cred store.Cred
	// commits, when set, collects what the commit functions would flush:
	// the call is a REINTEGRATE batch, flushed once at its end.
	commits *commitSet
}

func (r *req) release() {
	if r != nil && r.node != nil {
		r.node.Release()
	}
}

func (r *req) fsid() uint32 { return r.exp.st.ID }

// attr returns the node's current attributes (after refreshing them).
func (r *req) attr() *nfs3.Fattr {
	if r.node.Refresh() != nil {
		return nil
	}
	return fattr(&r.node.Stat, r.fsid())
}

// resolve checks fh (its MAC, once), the client's right to its export, and opens it,
// with the caller's identity squashed by the export's options.
func (s *Server) resolve(c *sunrpc.Call, fh nfs3.FH) (*req, error) {
	return s.resolveFor(c, fh, false)
}

// resolveFor is resolve; with gone, a handle that passes its MAC and the
// client's right to its export but whose file no longer exists gives a req
// with no node instead of ErrStale, and so does one whose export was removed
// (a req with no export either).
func (s *Server) resolveFor(c *sunrpc.Call, fh nfs3.FH, gone bool) (*req, error) {
	var e *export
	var opts *Options
	admitted := false
	n, err := s.store.ResolveFor(fh, func(se *store.Export) (err error) {
		if e = s.table().byID[se.ID]; e == nil {
			return store.ErrStale
		}
		opts, err = e.access(c)
		admitted = err == nil
		return err
	})
	if gone && admitted && errors.Is(err, store.ErrStale) {
		return &req{exp: e, opts: opts, cred: credFor(&c.Auth, opts)}, nil
	}
	if gone && e == nil && errors.Is(err, store.ErrStale) {
		// The handle's export is no longer served (an exports reload removed
		// it): CLOSE only ends the caller's own open in the table, which
		// would otherwise outlive every use of the file (docs/protocol.md,
		// section 7.2).
		if id, _, perr := s.store.ParseHandle(fh); perr == nil && s.table().byID[id] == nil {
			return &req{opts: &removedOpts, cred: credFor(&c.Auth, &removedOpts)}, nil
		}
	}
	if err != nil {
		return nil, err
	}
	return &req{node: n, exp: e, opts: opts, cred: credFor(&c.Auth, opts), commits: s.commitsOf(c)}, nil
}

// removedOpts are the options of a call on a removed export's handle that
// still reaches its handler (CLOSE): nothing is read or changed under them.
var removedOpts = DefaultOptions

// resolveWrite is resolve for a procedure that modifies the export.
func (s *Server) resolveWrite(c *sunrpc.Call, fh nfs3.FH) (*req, error) {
	r, err := s.resolve(c, fh)
	if err == nil && r.opts.ReadOnly {
		r.release()
		return nil, errROFS
	}
	return r, err
}

// commitMeta makes a namespace change in dir durable before the reply, unless the
// export is async.
func (s *Server) commitMeta(r *req) error {
	if r.opts.Async {
		return nil
	}
	if r.commits != nil {
		r.commits.add(r, true)
		return nil
	}
	if err := s.store.OpenIO(r.node); err != nil {
		return err
	}
	return s.sync(r, false)
}

// commitNew makes an object just made durable, then the directory entry that names
// it (CREATE, MKDIR, SYMLINK, MKNOD), unless the export is async. The object goes first: a directory flush alone does not write the new
// inode on every file system (ext4 without a journal, for one), and an entry that
// reaches the disk before its inode names garbage after a crash. knfsd commits both
// the same way.
func (s *Server) commitNew(m *made) error {
	if m.dir.opts.Async {
		return nil
	}
	nr, err := s.resolveMade(m)
	if err != nil {
		return err
	}
	if err := s.commitObj(nr); err != nil {
		return err
	}
	return s.commitMeta(m.dir)
}

// commitObj makes a change to r's own attributes durable before the reply (SETATTR),
// unless the export is async.
func (s *Server) commitObj(r *req) error {
	if r.opts.Async {
		return nil
	}
	if r.commits != nil {
		r.commits.add(r, false)
		return nil
	}
	switch r.node.Stat.Mode & syscall.S_IFMT {
	case syscall.S_IFREG, syscall.S_IFDIR:
		return s.commitMeta(r)
	}
	r.exp.stats.fsyncs.Add(1)
	return s.store.SyncFS(r.node)
}

// regularFile checks that r is a regular file, for READ, WRITE, COMMIT and size
// changes: a directory is NFS3ERR_ISDIR, anything else NFS3ERR_INVAL.
func regularFile(r *req) error {
	switch r.node.Stat.Mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		return nil
	case syscall.S_IFDIR:
		return nfs3.ErrIsDir
	}
	return nfs3.ErrInval
}

// checkName validates a name for an operation that creates or removes it.
func checkName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty name", nfs3.ErrNoEnt)
	case len(name) > nfs3.MaxName:
		return nfs3.ErrNameTooLong
	case name == "." || name == "..":
		return nfs3.ErrExist
	}
	for i := 0; i < len(name); i++ {
		if name[i] == '/' || name[i] == 0 {
			return nfs3.ErrAcces
		}
	}
	return nil
}

// isErrno reports whether err wraps errno e.
func isErrno(err error, e syscall.Errno) bool { return errors.Is(err, e) }
