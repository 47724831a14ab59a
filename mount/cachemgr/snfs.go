package cachemgr

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"snfs/client"
	"snfs/mount/cachedir"
	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
	"snfs/state/clientfile"
	"snfs/sunrpc"
)

// snfs mode (docs/mount.md, docs/protocol.md section 16): every application
// open is one SNFS OPEN and every release one CLOSE, except that the last
// release of a cached file may keep its open for a while, for a reopen to
// take over (delayed close, delayclose.go).
// While the server lets the client cache a file, its data lives in the cache
// directory (reads fill it, writes go to it as dirty data, close() makes it
// durable locally and does not write back), attributes and pages are kept by
// the kernel without revalidation, and a write-back goroutine writes dirty
// files back once their oldest dirty data is WriteBackDelay old. Callbacks
// write back and drop caches (the kernel's too, through the Notifier) before
// they are answered. While the server says the file is write-shared, it is
// written through to the server (one UNSTABLE WRITE per write, COMMIT at
// close) and read from the server, with no cache.

// snfsConfig configures snfs mode's cache manager (OpenSNFS makes it).
type snfsConfig struct {
	Session *client.Session // its NFS() must be Config.NFS
	Cache   *cachedir.Cache // the cache directory; the FS closes it (Close)
	// WriteBackDelay is how old a file's oldest dirty data gets before the
	// file is written back; 0: 30 s.
	WriteBackDelay time.Duration
	// CacheTTL is how long the kernel keeps the attributes of a file the
	// server lets this client cache; 0: 1 hour.
	CacheTTL time.Duration
	// CloseDelay is how long the protocol open of a file's last application
	// close is kept before its CLOSE is sent, for a reopen to take over
	// (delayclose.go); 0: no delay; clientfile.UntilRecalled: kept until a
	// callback takes it, or given back (the bound below, unmount, eviction,
	// removal).
	CloseDelay time.Duration
	// KeptOpens bounds the files with kept opens: beyond it, the least
	// recently kept are CLOSEd (delayclose.go); <= 0: no bound.
	KeptOpens int
	// Recover reintegrates, before New returns, the dirty files a previous
	// instance left in the cache directory (a crash, a kill -9).
	Recover bool
	// CacheDir is the cache directory's path, where conflicts are listed
	// (ConflictsFile); "": not listed.
	CacheDir string

	// Permits: ask for write-back permits and log changes under them
	// (permits.go; SNFSMountConfig.Permits).
	Permits bool
	// PermitData (with Permits): the data of regular files made locally
	// stays in the local data store until their reintegration
	// (permitdata.go; SNFSMountConfig.PermitData). Experimental, off by
	// default: the data pushed is not kept in the cache.
	PermitData bool

	noNames bool       // SNFSMountConfig.NoNameCache
	disc    *discState // disconnected operation (disconnected.go); nil: never
	handler *handler   // set by OpenSNFS: the session's callbacks come here
	owned   bool       // Close disconnects the session (OpenSNFS made it)
	export  string     // for UMNT at Close, when owned
}

// SNFSStats counts snfs-mode events.
type SNFSStats struct {
	WriteBacks      atomic.Uint64 // files written back (delay, fsync, callback, unmount)
	WriteBackBytes  atomic.Uint64 // bytes sent by them
	Cancelled       atomic.Uint64 // files whose pending write-back a delete or truncation dropped
	Callbacks       atomic.Uint64
	CallbacksStale  atomic.Uint64
	CallbacksFailed atomic.Uint64 // callbacks failed (an RPC error) because their write-back did not reach the server
	WriteBackErrors atomic.Uint64
	cacheStats                    // metrics.go: callbacks by mode, cache hits
	DelayedCloses   atomic.Uint64 // releases whose CLOSE was delayed
	DelayedReopens  atomic.Uint64 // opens that took over a delayed close: no OPEN
	TreatedAsClosed atomic.Uint64 // callbacks answered CB_TREAT_AS_CLOSED for delayed closes
	SharedOpens     atomic.Uint64 // opens that shared an application's open of the same mode: no OPEN, no CLOSE
	KeptGivenBack   atomic.Uint64 // files whose kept opens were CLOSEd over the bound, at eviction or removal
	KeptDistrusted  atomic.Uint64 // files whose kept opens an application's open CLOSEd first: granted under another registration, or no lease (keptlease.go)
	KeptRenewals    atomic.Uint64 // NULLs sent to renew the lease before a kept open was taken over (keptlease.go)
	Fenced          atomic.Uint64 // files the server answered SNFS_ERR_FENCED for
	Conflicts       atomic.Uint64 // conflict copies made by reintegration (reintegrate.go)
	Reconciled      atomic.Uint64 // reintegrations that found the server's change their own (serverholds.go): no copy
	Reclaimed       atomic.Uint64 // files reported in RECLAIMs after server restarts
	LockDelegations atomic.Uint64 // lock delegations granted (lockdeleg.go)
	LockRecalls     atomic.Uint64 // lock delegations recalled
	LocalChanges    atomic.Uint64 // namespace changes made locally under write-back permits (permitlocal.go)
	CreateOpened    atomic.Uint64 // creates whose CREATE_OPEN's open served (createopen.go): no OPEN
}

type snfsFS struct {
	// The core the cache manager runs on (snfs mode's methods are
	// snfsFS's; the core's are promoted).
	*vfs.FS

	cfg snfsConfig // as startSNFS completed it
	// given is the configuration snfsMode was made with, which start
	// hands to startSNFS.
	given snfsConfig
	sess  *client.Session
	cache *cachedir.Cache
	stats SNFSStats
	// passthrough: read opens of complete cached files are handed to the
	// kernel (passthrough.go); set once the kernel agreed.
	passthrough atomic.Bool
	pin         pinState // the watch of passthrough cache files (pinned.go); set with passthrough
	// noAppend: the server answered APPEND with PROC_UNAVAIL (append.go).
	noAppend atomic.Bool
	// noAllocate: the server answered ALLOCATE with PROC_UNAVAIL (allocate.go).
	noAllocate atomic.Bool
	// noCreateOpen: the server answered CREATE_OPEN with PROC_UNAVAIL
	// (createopen.go); createOpens, those in flight.
	noCreateOpen atomic.Bool
	createOpens  createOpens
	locks        snfsLocks  // byte-range locks (lock.go)
	names        *nameCache // directories under promises (names.go)
	// disc: disconnected operation (disconnected.go); nil: never
	disc *discState
	// status: the permits' and the log's sources for Status (status.go)
	status statusSources
	// permits: the write-back permits and the modification log
	// (permits.go); nil without them. Set once, by startSNFS (permits.begin),
	// before the log an earlier mount left is sent; the callback goroutines
	// (a recall during that send) read it through permitsNow, under
	// permitsMu; everything else runs after Start.
	permits   *permits
	permitsMu sync.Mutex
	// provOpens: the opens of files made locally, not released
	// (permitcreate.go).
	provOpens provOpenSet
	// offOpens: the opens of files made offline (offlinedata.go)
	offOpens offOpenSet

	// mu guards dirty and unrecorded; taken after an Inode's mu.
	mu    sync.Mutex
	dirty map[*vfs.Inode]time.Time // files with dirty data in the cache dir: since when
	// write-backs ended and not yet committed to the index (writeback.go)
	unrecorded map[*cachedir.File]struct{}
	recordMu   sync.Mutex // one recordWrittenBack at a time; taken before mu

	delayed delayedSet // files with delayed closes

	reintegrating sync.Mutex // one reintegration at a time (reintegrate.go)

	// afterOpen, set only by tests, runs between an OPEN's answer and its
	// application (a write-back racing the OPEN, say).
	afterOpen func(i *vfs.Inode)
	// openAnswered, set only by tests, runs as an OPEN's answer arrives,
	// before anything of it is applied (a callback racing the answer).
	openAnswered func(i *vfs.Inode)
	// createOpenAnswered, set only by tests, runs as a CREATE_OPEN's reply
	// arrives, once its open is noted and before the create's result is
	// applied (a reply without the file's attributes, whose GETATTR then
	// fails).
	createOpenAnswered func(res *snfs1.CreateOpenRes)
	// readbackTaking, set only by tests, runs after a reintegration that
	// asked a stored file's open, before that open is taken in
	// (permitreadback.go: a callback racing it).
	readbackTaking func()
	// beforeMarkClean, set only by tests, runs as markCleanIf starts (an
	// application write racing a write-back's end, a callback's included:
	// set and run on different goroutines).
	beforeMarkClean testHook
	// beforeRemoved, set only by tests, runs as snfsRemoved starts: the
	// REMOVE (or RENAME over the file) is done, its cache file not yet
	// dropped (a kill there).
	beforeRemoved testHook
	// afterOffCheck, set only by tests, runs once the names an offline log
	// changes are checked, before any of it is sent (a kill there), with a
	// nil Inode.
	afterOffCheck testHook
	// offChecking, set only by tests, runs as the check of the bases noted
	// offline has taken the ones it checks, before it asks the server (an
	// offline change racing the reconnection), with a nil Inode.
	offChecking testHook
	// offRemoving, set only by tests, runs in an offline REMOVE or RMDIR
	// before its base is noted (a reconnection racing it), with the
	// directory.
	offRemoving testHook
	// beforeCallbackEnd, set only by tests, runs in a callback before each
	// CallbackEnd, once the work asked so far is done (an application
	// closing its file during the callback, on the callback's goroutine).
	beforeCallbackEnd testHook
	// handedBack, set only by tests, runs once a callback decided to hand
	// its file back, before the answer goes to the connection (an
	// application's open racing that answer: client/handback.go).
	handedBack testHook
	// xattrAnswered, set only by tests, runs as a GETXATTR's answer arrives,
	// before it is cached (a change of the attribute racing it: xattr.go).
	xattrAnswered testHook
	// beforeReopen, set only by tests, runs in a refused reclaim's handler
	// after the reintegration, before the forgotten opens are OPENed again
	// (an application closing and opening a file meanwhile); beforeForget
	// runs as the handler starts, before the forgotten opens are counted
	// (an OPEN the new server answers before), afterReopen as the handler
	// ends. All are called with a nil Inode.
	beforeForget, beforeReopen, afterReopen testHook
	// pinSendFails, set only by tests, makes the pinned holder's sends of
	// what its kernel wrote fail as a transport error would (pinned.go).
	pinSendFails atomic.Bool

	stop chan struct{}
	done chan struct{}
	// leaseDone closes when lockLeaseLoop returns (locklost.go).
	leaseDone chan struct{}
	once      sync.Once
	// life ends when stop closes (Close): the parent of work no request
	// carries (stopCtx).
	life    context.Context
	endLife context.CancelFunc
}

// testHook is a function tests set to run at some point of the FS's work,
// on whatever goroutine reaches it.
type testHook struct {
	p atomic.Pointer[func(*vfs.Inode)]
}

func (h *testHook) set(f func(*vfs.Inode)) {
	if f == nil {
		h.p.Store(nil)
		return
	}
	h.p.Store(&f)
}

func (h *testHook) run(i *vfs.Inode) {
	if f := h.p.Load(); f != nil {
		(*f)(i)
	}
}

// snOf is i's snfs-mode state (Inode.Ext, made by snfsFS.InitInode).
func snOf(i *vfs.Inode) *snfsInode { return i.Ext.(*snfsInode) }

// fsnOf is f's snfs-mode state (File.Ext) if f is an open of the protocol
// (snfsOpened).
func fsnOf(f *vfs.File) *snfsFile { return f.Ext.(*snfsFile) }

// snfsOpened reports whether f is an open of the protocol (snfs mode, a
// regular file): the core's opens have no snfs-mode state.
func snfsOpened(f *vfs.File) bool {
	_, ok := f.Ext.(*snfsFile)
	return ok
}

// snfsInode is an inode's snfs-mode state; guarded by the Inode's mu unless
// said otherwise.
type snfsInode struct {
	cf *cachedir.File // nil until first opened in snfs mode
	// st is the file's consistency state (state/clientfile, filestate.go):
	// caching, version, the kernel's pages' version, the protocol opens by
	// mode, the OPENs in flight, the delayed closes and their deadline, the
	// invalidation epoch, dirty and write-back in progress, the passthrough
	// opens and the pinned phase. Called with mu held, never across an RPC.
	st *clientfile.File
	// dcTimer runs the delayed close's timer (ActArmTimer); nil until first
	// armed.
	dcTimer *time.Timer
	mtime   time.Time // last local write while caching
	cred    vfs.Cred  // the last writer: write-back is done as it
	// openMu serializes this file's OPEN/CLOSE calls (not its
	// callbacks: a callback takes no openMu), held across the RPC. The
	// first of the inode's locks: taken before appendMu, cacheW, flushMu,
	// delayedSet.mu and mu (Inode's doc).
	openMu sync.Mutex
	pt     passthroughState // the kernel's I/O modes of the opens (passthrough.go)
	// cacheW (not under mu) is held shared by each change made in the cache
	// directory because the file is cached (a write, a local truncation),
	// from the check of caching to the change recorded dirty, and
	// exclusively by a callback as it stops caching (whileCaching).
	// Taken after openMu and appendMu, before flushMu and mu.
	cacheW sync.RWMutex
	// xattrs are the file's extended attributes while it is cached
	// (xattr.go); xattrGen counts the starts and ends of this client's
	// changes of them, so that no answer racing a change is cached.
	xattrs   *xattrCache
	xattrGen uint64
	// access: the server's ACCESS answers by credential (accesscache.go);
	// under mu.
	access map[string]accessEntry
	// openCred: by mode, the credential of the latest OPEN sent for an
	// application's open (snfsOpen), which a refused reclaim's reopen
	// sends again (callback.go); under mu.
	openCred [state.Write + 1]vfs.Cred
	// granted: by mode, the registration the latest OPEN (or CREATE_OPEN)
	// of that mode was sent under and answered (keptlease.go): a kept open
	// of the mode is taken over only while it is the session's; under mu,
	// written with openMu held too.
	granted [state.Write + 1]openEpoch
	// reclaimedUnder: the registration the latest RECLAIM was built for
	// (reclaimItems); a reclaim the server took makes it granted's
	// (reclaimGrantedLocked). Under mu.
	reclaimedUnder openEpoch
}

// snfsFile is an open's snfs-mode state.
type snfsFile struct {
	mode     state.Mode     // the protocol mode of the open
	cachedIO bool           // counted in passthroughState.cached
	appendIO bool           // counted in passthroughState.appenders
	pt       *os.File       // FUSE passthrough: the kernel reads this descriptor of the cache file
	ptCF     *cachedir.File // the cache file pt pins
	ptWrite  bool           // pt is an open for writing (external writes, passthrough.go)
}

// SNFSStats returns snfs mode's counters.
func (sn *snfsFS) SNFSStats() *SNFSStats { return &sn.stats }

// snfsMode is newFS's mode for snfs mode: the cache manager on fs, to be
// started with cfg (startSNFS, the start hook) once the root is known.
func snfsMode(cfg snfsConfig) func(*vfs.FS) vfs.Ops {
	return func(fs *vfs.FS) vfs.Ops {
		sn := &snfsFS{FS: fs, given: cfg}
		sn.names = newNameCache(sn)
		sn.names.off = cfg.noNames
		return sn
	}
}

// startSNFS sets up snfs mode: recovery of a previous instance's dirty files,
// then the write-back goroutine (stopped by Close).
func (m *snfsFS) startSNFS(ctx context.Context, cfg snfsConfig) error {
	fs := m.FS
	if cfg.Session == nil || cfg.Cache == nil {
		return errors.New("vfs: snfs mode needs a session and a cache directory")
	}
	if cfg.WriteBackDelay <= 0 {
		cfg.WriteBackDelay = 30 * time.Second
	}
	if cfg.CacheTTL <= 0 {
		cfg.CacheTTL = time.Hour
	}
	sn := m // made in New, before any inode
	sn.cfg, sn.sess, sn.cache = cfg, cfg.Session, cfg.Cache
	sn.dirty, sn.unrecorded = map[*vfs.Inode]time.Time{}, map[*cachedir.File]struct{}{}
	sn.stop, sn.done, sn.leaseDone = make(chan struct{}), make(chan struct{}), make(chan struct{})
	m.life, m.endLife = context.WithCancel(context.Background())
	m.locks.Verf = cfg.Session.ServerVerifier()
	cfg.Cache.OnEvict(m.delayed.noteEvicted) // delayclose.go
	fs.LockTab = &m.locks.LockTable
	if cfg.handler != nil {
		cfg.handler.set(fs)
	}
	if cfg.Recover {
		if err := m.recoverDirty(ctx); err != nil {
			// What could not be written back stays dirty in the cache
			// directory: the write-back goroutine tries again.
			fs.Logger().Error("recovery of a previous mount's unwritten data", "err", err)
		}
	}
	// A read-only mount makes no change: no permit, and a log left by an
	// earlier mount stays for a read-write one to send.
	if (cfg.Permits || cfg.disc != nil) && fs.RefuseChange() == nil {
		p, err := m.openPermits(ctx)
		if err != nil {
			return err
		}
		p.begin(ctx) // permits.go: published first, then the earlier mount's log sent
	}
	m.disc = cfg.disc // before the loops that read it
	go m.writeBackLoop()
	go m.lockLeaseLoop()
	if m.disc != nil {
		go m.discLoop()
	}
	return nil
}

// closeUnreachable bounds the permits' close (the log sent, the permits
// given back) when the server is not connected at Close.
const closeUnreachable = 2 * time.Second

// closeSNFS is Close in snfs mode.
func (fs *snfsFS) closeSNFS() error {
	var err error
	fs.once.Do(func() {
		fs.closeAllDelayed()
		if fs.permits != nil {
			// What the log holds went at the write-back at unmount (Sync,
			// bounded, and abandoned at a second signal); what is left
			// stays in the log for the next mount. With no connection to
			// the server (gone), its retries here kept the mount process
			// from exiting for the minute after the write-back was
			// abandoned (TestMountStopServerGone/snfs-permits).
			d := time.Minute
			if !fs.sess.Reach().Connected {
				d = closeUnreachable
			}
			ctx, cancel := context.WithTimeout(context.Background(), d)
			err = fs.permits.close(ctx)
			cancel()
		}
		close(fs.stop)
		fs.endLife()
		fs.names.close()
		<-fs.done
		<-fs.leaseDone
		if fs.disc != nil {
			<-fs.disc.done
		}
		fs.stopWatch()
		err = errors.Join(err, fs.cache.Close())
		if fs.cfg.owned {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			// A clean end (everything written back and CLOSEd): the server
			// forgets this client and does not wait for it after a restart.
			var re *sunrpc.RPCError
			if uerr := fs.sess.Unregister(ctx); errors.As(uerr, &re) && re.Accept == sunrpc.ProcUnavail {
				fs.Logger().Debug("the server has no UNREGISTER", "err", uerr)
			} else if uerr != nil {
				fs.Logger().Warn("UNREGISTER", "err", uerr)
			}
			if uerr := fs.sess.Mount().Umnt(ctx, fs.cfg.export); uerr != nil {
				fs.Logger().Warn("UMNT", "err", uerr)
			}
			cancel()
			err = errors.Join(err, fs.sess.Disconnect())
		}
	})
	return err
}

// stopCtx is a context for work no request carries (a callback's
// aftermath, an access the watch stopped): it ends after d or when the FS
// closes; cancel it when done.
func (fs *snfsFS) stopCtx(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(fs.life, d)
}

// cleanClose tells the server that this client holds no dirty data of i any
// more (CLOSE with dirty = FALSE and no open to close, docs/protocol.md
// section 4.4) when no application has it open, so that the next opener
// elsewhere needs no callback (clientfile's IdleClean).
func (fs *snfsFS) cleanClose(ctx context.Context, i *vfs.Inode) {
	snOf(i).openMu.Lock()
	defer snOf(i).openMu.Unlock()
	i.Mu.Lock()
	dirtyLocked(i)
	acts := stOf(i).IdleClean()
	i.Mu.Unlock()
	if !hasAct(acts, clientfile.ActSendClose) {
		return
	}
	fs.recordWrittenBack()
	if _, err := fs.sess.Close(ctx, i.FH, state.Write, false); err != nil && !errors.Is(err, nfs3.ErrStale) && !errors.Is(err, snfs1.ErrFenced) {
		fs.Logger().Debug("CLOSE after write-back", "fileid", i.FileID, "err", err)
	}
}

// cacheFile returns i's cache file, getting it from the cache directory the
// first time (or after it was removed).
func (fs *snfsFS) cacheFile(i *vfs.Inode) (*cachedir.File, error) {
	i.Mu.Lock()
	cf := snOf(i).cf
	i.Mu.Unlock()
	if cf != nil {
		return cf, nil
	}
	cf, err := fs.cache.File(i.FH)
	if err != nil {
		return nil, err
	}
	dirty := cf.NeedsWriteBack()
	i.Mu.Lock()
	if snOf(i).cf == nil {
		snOf(i).cf = cf
		if dirty {
			// Left by an earlier mount (a reintegration that failed): the
			// machine knows the cache dirty from now.
			stOf(i).CacheFoundDirty()
		} else {
			stOf(i).CacheAttached()
		}
	}
	cf = snOf(i).cf
	i.Mu.Unlock()
	return cf, nil
}

// whileCaching runs fn if i is cached, with no callback stopping that
// before fn returns: a change fn makes in the cache directory (recorded
// dirty by then) is in the write-back of the callback that stops caching,
// which runs after (Callback). ok reports whether fn ran; if not, the change
// goes through the server. The machine counts the change from its beginning
// (CacheWriteBegin: dirty, and a write-back ending meanwhile leaves it so).
func (sn *snfsFS) whileCaching(i *vfs.Inode, fn func() error) (ok bool, err error) {
	snOf(i).cacheW.RLock()
	defer snOf(i).cacheW.RUnlock()
	i.Mu.Lock()
	ok = snOf(i).cf != nil && stOf(i).CacheWriteBegin()
	i.Mu.Unlock()
	if !ok {
		return false, nil
	}
	defer func() {
		i.Mu.Lock()
		stOf(i).CacheWriteEnd()
		i.Mu.Unlock()
	}()
	return true, fn()
}

// snfsCaching reports whether i's data is served from the cache directory.
func snfsCaching(i *vfs.Inode) bool {
	i.Mu.Lock()
	defer i.Mu.Unlock()
	return stOf(i).Caching() && snOf(i).cf != nil
}

// snfsTTL is the attribute lifetime in snfs mode while the file is open here:
// long while cached (the server calls back before it changes), none while
// write-shared; otherwise as long as a directory promise covers them
// (names.go). ok is false when nfs mode's adaptive timeouts apply.
func snfsTTL(i *vfs.Inode) (time.Duration, bool) {
	if isProvFH(i.FH) {
		// Made here and not sent: nobody else can change it. Once sent,
		// every use is resolved to the real inode (permitmake.go).
		if p := mgrOf(i.FS()).permits; p != nil && p.made.live(i.FH) {
			return mgrOf(i.FS()).cfg.CacheTTL, true
		}
		return 0, true
	}
	if mgrOf(i.FS()).disc.offline() && attrKnownLocked(i) {
		return offlineAttrTTL, true // as last seen: nothing to ask
	}
	if stOf(i).Held() == 0 {
		return mgrOf(i.FS()).names.attrTTLLocked(i)
	}
	if stOf(i).Caching() && !i.AttrAt.IsZero() {
		return mgrOf(i.FS()).cfg.CacheTTL, true
	}
	return 0, true
}

// snfsAdjustLocked lays the cache directory's pending changes over the
// reported attributes: the local size and mtime are the newer ones.
func snfsAdjustLocked(i *vfs.Inode, a *nfs3.Fattr) {
	defer snfsPassthroughAttrLocked(i, a)
	cf := snOf(i).cf
	if cf == nil || !cf.NeedsWriteBack() {
		return
	}
	a.Size = uint64(cf.Size())
	if !snOf(i).mtime.IsZero() {
		if t := vfs.NFSTime(snOf(i).mtime); vfs.TimeAfter(t, a.Mtime) {
			a.Mtime, a.Ctime = t, t
		}
	}
}

// snfsBusy: Forget must keep the inode (its state is needed).
func snfsBusyLocked(i *vfs.Inode) bool {
	return stOf(i).Busy() || snOf(i).cf != nil && mgrOf(i.FS()).isDirty(i)
}
