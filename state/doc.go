// Package state is the Spritely NFS server state table (Srinivasan and Mogul,
// "Spritely NFS", WRL 89/5, section 4.3, with the Sprite cache consistency rules
// of Nelson, Welch and Ousterhout, section 5) as a pure state machine: it records
// which client has which file open and may be caching it, decides each OPEN's
// cacheability and version, and says which callbacks must be answered first.
//
// It owns the table, its bound, the version counter's use, fencing and the
// timing rules (deadlines, back-off, plain-access holds). It must not do I/O,
// sleep, start goroutines, log, or know RPC and XDR: a thin driver in the server
// turns its actions into callback RPCs, replies and log lines, and feeds the
// outcomes back. Time comes in as an argument to every input.
//
// # Driver contract
//
// Inputs: Register (a client's REGISTER), Open, Close, PlainAccess (every READ,
// WRITE, SETATTR of the size, REMOVE and RENAME of a regular file, from any
// client), CallbackSent, CallbackDone, CallbackPathVerified, ClientGone,
// VersionsReserved, Tick (the sweeper, every few hundred milliseconds),
// Changed and ChangedAll (a change made outside the protocol, by a local
// process on the server machine) and, for crash recovery, Reclaim. Each
// returns actions to carry out in order: ActCallback, ActProbe (a callback
// NULL), ActReply / ActProceed / ActJukebox / ActRefuse / ActAbandon (answers
// to parked requests, by ReqID), ActFence (log it), ActReserveVersions and
// ActLease (hold a lease on the file while a client may be dirty; LeaseWanted
// says whether one is still wanted). Open and PlainAccess also return a verdict: Proceed
// (answer now), Wait (park the request), Jukebox, or Refuse. The driver records a
// parked request before it carries out the actions returned with the verdict:
// carrying them out (a version block persisted at once, say) may answer it. Every
// parked request gets exactly one answer.
//
// # States and transitions
//
// The states are the paper's: CLOSED, CLOSED_DIRTY, ONE_READER, ONE_RDRDIRTY,
// MULT_READERS, ONE_WRITER, WRITE_SHARED. Each entry keeps, per client, its
// reader and writer open counts (never below zero: a CLOSE with nothing open is
// ignored), whether its last OPEN reply let it cache, and whether it may hold
// dirty blocks (the last writer). The state is computed from these records as
// Table 1 defines it, with the table's one piece of history: WRITE_SHARED lasts
// until the final close (Sprite does not re-enable caching of an open file).
// Table1Rows exports every row of Table 1 - from-state, event, opening client
// same / different / last writer, to-state, cacheability, callbacks - and the
// tests drive each through the machine.
//
// An OPEN (or a plain access, below) by client C needs, from every other client:
// if the file will be WRITE_SHARED, a write-back and invalidate from a client that
// may be dirty, an invalidate from one that caches; otherwise a write-back from
// the last writer, with invalidate if C opens for writing. Only clients that
// were granted caching, or may be dirty, are ever called back: a client that
// writes through has nothing to give back. The reply enables caching unless the
// file is WRITE_SHARED, the client's callback path is unverified, the file is in
// its recall back-off, an invalidation of this client is still in flight, or a
// plain access went unrecorded (below). A caching writer is recorded as possibly
// dirty; a CLOSE that reports no dirty blocks, once the client has no write open
// left, clears that.
//
// # Serialization and the deadlock argument
//
// Transitions on a file are applied one at a time under its shard's mutex; a
// shard's mutex is held only while an input is computed, never while callbacks
// are out, so files other than the one waiting are never blocked. An OPEN or an
// uncovered plain access that needs callbacks is parked in the file's FIFO queue;
// requests behind it wait their turn even if they need no callback, so a recalled
// client cannot re-acquire the file ahead of the request that recalled it.
//
// The paper's server deadlocks if the called-back client must open, close or
// write to answer (section 4.3.4: the entry stays locked during the callback).
// Here nothing the called-back client sends to answer is ever parked: CLOSE never
// waits (it only takes opens away, so applying it at once can only shrink what a
// parked request needs; the queue is re-run after it), and the client's own
// reads and writes of a file it has open, or is the last writer of, are "covered"
// and proceed at once without changing the state (WRITE and COMMIT of its dirty
// blocks, in particular). So a callback's completion never depends on a parked
// request. What remains is time: a parked request is answered NFS3ERR_JUKEBOX
// after JukeboxAfter (the client retries; a retry finds the callbacks already out
// and sends no new ones), and a callback not answered within CallbackTimeout of
// being sent counts as failed. The driver must not hold a worker for a parked
// request, and must read callback replies on the client's connection without
// waiting for parked requests. A client must not make its answer to a callback
// wait for its own parked OPEN of the same file.
//
// # Callbacks, deadlines and unresponsive clients
//
// One callback per client and file is out at a time; when it is answered, the
// queue is re-run and whatever is still needed is sent. A callback's deadline
// starts when the driver reports it sent (CallbackSent), not when the machine
// asked for it, so a busy connection does not time callbacks out; one never
// reported sent fails after QueueTimeout plus CallbackTimeout. Tick finds
// callbacks past their deadline. Answers:
//
//   - OK: the mode's work is done (dirty blocks written back, cache invalidated);
//     the client keeps its opens. To RELINQUISH: the file is really in use.
//   - TREAT_AS_CLOSED (section 6.2): done, and all the client's opens of the file
//     are delayed closes: they are treated as closed, and it holds no dirty
//     blocks. A client answers it only when no application has the file open and
//     no OPEN of the file is in flight.
//   - STALE: the client holds nothing of the file.
//   - PINNED (docs/protocol.md 10.1): written back, but its kernel goes on
//     writing into its cache while it has the file open for writing: it is
//     a pinned holder, dirty, not caching, and every other client's request
//     waits for a write-back of its asked after the request arrived. Any
//     other answer from it ends that and its dirty record (its OK comes once
//     nothing writes into its cache, after sending all that was written,
//     whatever dirty CLOSE crossed it), as does a CLOSE saying clean with no
//     write open left; its last write CLOSE saying dirty keeps it pinned.
//   - Failed (an error, no answer, or the deadline): the client is fenced for the
//     file: its opens are forgotten, its dirty blocks given up, its parked
//     requests on the file refused, and its later requests on it refused
//     (PlainAccess answers Refuse; Fenced answers the same for other procedures)
//     until it opens the file again. The waiting request goes on. Its callback
//     path is marked unverified and probed again.
//
// An answer to a callback that already timed out is late: TreatAsClosed and
// Stale are applied anyway (they say the client holds no open and no dirty
// block when it answers, and the driver applies an answer before the
// client's later requests), so an open the client hands back with it is not
// counted for ever; a late OK, Pinned or failure is ignored.
//
// Lessons from the delegation implementations that came later (knfsd,
// nfs-ganesha): caching is granted only to a client whose callback path answered
// a NULL (at REGISTER and after any failure); after a recall, opens that arrive
// within RecallBackoff get no caching, so two clients alternating on a file stop
// calling each other back (the open that caused the recall is exempt: it is the
// conflict the recall resolves; so are the later OPENs of that client in that
// mode - its retry after JUKEBOX - until another request recalls); deadlines
// start at sending; Tick is the sweeper.
//
// # Coexistence with plain NFSv3 clients (section 6.1)
//
// A plain access counts as an open by its client for PlainHold (no shorter than
// the plain clients' attribute-cache timeout), for reading or, for WRITE, SETATTR
// of the size, REMOVE and RENAME, for writing. It is applied like an OPEN: a
// plain READ of a file a protocol client caches for writing first calls it back
// (write back, invalidate) and the file becomes WRITE_SHARED; a plain change of a
// file protocol clients cache first invalidates them; a plain READ of a
// CLOSED_DIRTY file first has the last writer write back. A protocol client that
// opens a file a plain client uses needs no callback to it (it caches no dirty
// blocks) but gets no caching if either writes. Holds expire lazily.
//
// # Versions
//
// Each OPEN reply carries the file's version and the previous one (section
// 3.1): an open for writing takes a fresh version and returns the one before it
// as OldVersion (the writer's cache from then is still valid); any other open
// returns the current version twice. A plain change drops the file's version,
// so the next OPEN takes a fresh one and returns it twice: nobody's cache
// survives it. A new entry has no version until its first OPEN. Versions come
// from one counter that is durable and never reissued (the cure section 4.3.3
// proposes): versions are issued only up to a durably reserved mark; the machine
// asks for the next block (ActReserveVersions) when half the current one is
// used, the driver persists the mark and calls VersionsReserved, and after a
// restart Config.VersionBase is the persisted mark. A request needing a version
// when none is reserved waits (and is answered JUKEBOX after the bound). Losing
// a file's version (its entry reclaimed, or a restart) only costs caches: the
// next version is higher than any issued.
//
// # Local processes on the server machine
//
// The driver reports their changes (Changed: the version is dropped and every
// client that may cache the file is called back at once, INVALIDATE or
// WRITEBACK_INVALIDATE; one with another callback out is owed it) and their
// opens of a file whose lease broke, as a plain access with AccessArgs.Local:
// a read waits like a GETATTR for every dirty client's write-back and stops
// nobody's caching, a write is a plain WRITE; neither leaves a hold (a local
// process caches nothing). The table asks for the file's lease (ActLease)
// exactly while some client may hold dirty blocks of it.
//
// # Bounded state
//
// The table holds at most MaxEntries entries, split across shards (by
// default one per 1024 entries, at most 64), each bounded on its own. CLOSED
// entries are kept for their versions until space is needed. From HighWater
// percent of a shard, each insertion examines the least recently used entries
// (ReclaimScan of them): entries that record nothing but expired plain holds or
// fences are dropped; a CLOSED_DIRTY file's last writer is asked to write back
// (the now CLOSED entry goes at a later pass); the clients of a file idle for
// RelinquishIdle are asked to RELINQUISH it (section 6.2). Others get a second
// chance at the recent end. At the bound an OPEN of a new file gets
// NFS3ERR_JUKEBOX, and a plain access of a new file goes through unrecorded but
// turns caching off for every new OPEN until it would have expired.
//
// # Crash recovery
//
// Reclaim rebuilds an entry from a client's report (opens, caching, dirty,
// version) without callbacks, for the recovery protocol (Sprite's: the clients
// together know the state). The grace period around it belongs to the driver.
//
// # Directory promises
//
// Dirs (dirs.go) is a second, independent table: the directory promises of
// docs/protocol.md section 20 (a LISTDIR's promise, broken by a CALLBACK
// INVALIDATE with the directory's handle before a change to the directory is
// answered). It shares the action vocabulary (ActCallback, ActProceed,
// ActFence for a break past its deadline) but no state with Machine: a
// directory never has an entry here, and no file's state depends on a
// promise.
//
// # Metrics
//
// Stats returns counters (callbacks by mode and outcome, timeouts, fencings,
// jukebox answers, refusals, table-full events, reclaims, version reservations)
// and a census of the entries by state.
package state
