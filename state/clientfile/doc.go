// Package clientfile is the client side of the Spritely NFS consistency
// protocol (docs/protocol.md) for one file, as a pure state machine: the
// mirror of package state, which is the server's table. One File holds what a
// client knows of one regular file: whether it may cache it and at which
// version, its protocol opens by mode (the applications' and the delayed
// closes kept after the last release), the OPENs in flight, whether its cache
// holds data not written back (dirty) and whether a write-back is moving it,
// the callbacks that took caching away (an epoch), the kernel's passthrough
// opens and pinned mode (docs/protocol.md 10.1), and the opens a server that
// refused this client's reclaim forgot (section 7.1).
//
// It is the FUSE client's: mount/vfs's cache manager keeps one File per
// inode (snfsInode.st, filestate.go) and makes its per-file consistency
// decisions with it (snfsio.go, delayclose.go, callback.go, writeback.go,
// passthrough.go, pinned.go, reintegrate.go drive it and carry out its
// actions). The model checker in package state drives this same machine
// against the server's table (state/model_client_test.go): one model, both
// ends.
//
// # What it must not do
//
// No I/O, no goroutines, no timers, no logging, no locks of its own: the
// caller holds the file's lock around every call and carries out the actions
// it returns, in order, after (or while) releasing it. Time comes in as an
// argument (the delayed close's deadline). It does not know RPC, XDR, the
// cache directory's format or the kernel: "write back" and "invalidate the
// cache" are actions, and what the driver learned doing them comes back as
// the next event. It imports only package state, for the vocabulary the
// protocol shares (Mode, CallbackMode, Outcome, OpenReply).
//
// # Events and actions
//
// Every method is one event; the actions it returns are to be carried out
// in order. Several protocol exchanges take the driver's I/O in the middle,
// so they are two events with a token between them (the token carries what
// the first one saw: the invalidation epoch at the OPEN's sending, say):
//
//   - OpenBegin (an application open) -> ActReuse (a delayed close taken
//     over: no OPEN) or ActSendOpen; OpenAnswered (the OPEN's answer
//     arrives: the open is counted, a refusal of caching takes effect at
//     once) -> ActCache (flush what was written through, settle the
//     attributes, relabel the cache) or the write-through plan (ActWriteBack,
//     ActInvalidateCache, ActNotifyData); OpenCached (the cache is relabelled)
//     -> whether caching goes on, and whether the kernel keeps its pages.
//   - Release (an application's last close of one open) -> a delayed close
//     (ActArmTimer; none when kept until recalled, Config.CloseDelay =
//     UntilRecalled) or ActSendClose (with the kept opens' CLOSEs once the
//     file is not cached or removed); then, with no open left, caching ends
//     (ActInvalidateAttr, ActNotifyAttr). TimerFired and CloseAllDelayed
//     (unmount; the driver's bound of kept opens, eviction, removal) send
//     the kept CLOSEs. IdleClean (the write-back loop wrote
//     back an idle file) sends the CLOSE with dirty = FALSE and no open.
//   - CacheWriteBegin / CacheWriteEnd bracket a write into the cache (dirty
//     from its beginning); WriteBackBegin / WriteBackDone bracket a
//     write-back, which clears dirty only if no cache write began or ended
//     meanwhile.
//   - CallbackBegin (CB_CALLBACK arrives) -> an immediate answer (ActAnswer:
//     CB_STALE, CB_PINNED) or the work (ActStopCaching, ActPinEnter,
//     ActWriteBack, ActInvalidateCache); PinEnterFailed (the driver could
//     not watch the file); CallbackEnd (the work is done) -> ActAnswer with
//     the outcome docs/protocol.md 5.1 and 10 ask for, a failure
//     (state.Failed: an RPC error) when a write-back left data here.
//   - Through (a read or write through the server: the cache's older dirty
//     data goes first), ExternalWrite (the kernel wrote the cache file
//     through passthrough) and ExternalTaken (what it wrote was taken in: a
//     file not cached sends it now), PassthroughOpen / PassthroughClose (the
//     last sends what the kernel wrote, and ends the pinned mode).
//   - ReclaimItem (the file's RECLAIM item; it records the applications'
//     opens it reports), ServerRestarted (reclaimed or refused: a refusal
//     forgets those opens, whose releases send no CLOSE until Reopened),
//     OpenUndone (an application open failed after its OPEN's answer: its
//     CLOSE), Fenced, Reintegrated, CacheFoundDirty (the cache file holds
//     data no event put there: an earlier mount's), Dropped (the cache file
//     is gone), Removed (the file's last link went while unopened, or at its
//     last close).
//
// # Rules the model found
//
// The both-ends model found two races in the mount as it was; both are the
// mount's now, through this machine, each with a test in mount/vfs that
// failed before:
//
//   - An OPEN answer refusing caching moves the invalidation epoch, so an
//     earlier OPEN of the file whose grant is still being applied (between
//     ActCache and OpenCached) does not turn caching back on after it
//     (docs/protocol.md 4.2; TestOpenRefusalRevokesEarlierGrant).
//   - CB_PINNED is answered only while a passthrough writer remains: the
//     mount answered it whenever the pinned entry began with writers, and
//     if they closed meanwhile (and a new write open came) the server then
//     recorded a pinned holder that is not one (TestPinnedAnswerNeedsWriter).
//
// A third it found once its restarts could fall inside an OPEN's grant
// being applied (the official CI's TestCrashCyclesMountsAndServer saw it as
// a stale read first): ReclaimItem moves the invalidation epoch, so a grant
// answered before the restart and applied after the reclaim, which reported
// the open as not cached, is not applied (docs/protocol.md 16, rule 3;
// mount/cachemgr TestReclaimDuringOpenGrant).
//
// # The lock
//
// One mutex per inode guards a File: the inode's state lock, Inode.mu. It is
// held only while a method runs, never across a call to the server or the
// kernel (the driver reads the cache directory's dirty record under it, a
// leaf). The driver's own per-inode state beside it is what carries the
// actions out: the cache file, the delayed close's timer, the passthrough
// descriptors and the pinned file's watch (pinnedFile), the last writer and
// its write-back error. The locks the driver keeps to order its I/O are
// taken before it, never while it is held, in this order:
//
//	openMu    one OPEN or CLOSE of the file on the wire at a time (held
//	          across the RPC; the machine's OPEN-in-flight rules assume it)
//	appendMu  one cached append's size read and write at a time
//	cacheW    cache writes (shared) against a callback's stop (exclusive)
//	flushMu   one write-back at a time (held across the WRITEs and COMMIT)
//	mu        the state lock: this machine and the attributes
//	nameMu    the name, a leaf
//
// (delayedSet.mu sits between openMu and mu; the FS's dirty map after mu.)
// A callback takes no openMu: its answer must never wait for the file's
// own OPEN (docs/protocol.md 11).
package clientfile
