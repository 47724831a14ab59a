// Package lockmgr is the server's one lock manager: byte-range locks and
// share reservations of every kind of client - NLM v4 (stock NFS clients),
// the snfs protocol's LOCK/LOCKT/LOCKU, and, through the backing file, local
// processes on the server - as a pure state machine in the style of package
// state.
//
// It owns lock owners, byte ranges with POSIX split and merge, shared and
// exclusive locks, blocked requests in arrival order and their grants,
// deadlock detection, the per-client bound, the grace period's rule, clients
// going away, and NLM share reservations. It must not do I/O, sleep, start
// goroutines, log, read a clock, or know RPC and XDR: a thin driver turns its
// actions into fcntl calls on the backing files and GRANTED callbacks, and
// feeds their outcomes back. Time comes in as an argument.
//
// # Names
//
// A file is an opaque FileKey (the file handle's bytes). An Owner is a client
// (ClientID, interned by the driver: an NLM host, an snfs registration) and
// opaque owner bytes: for NLM the svid and oh of nlm4_lock (NLMOwner), for
// the snfs protocol the mount's lock owner id. flock is a lock over Whole
// ([0, ∞)) whose owner is the open file description (a distinct ID per
// description, e.g. "flock:" and the FUSE file handle), so flock and fcntl
// locks of one process exclude each other here where Linux keeps them apart on
// a local file system; Linux's own NFS client makes the same choice (it sends
// flock as a whole-file NLM lock).
//
// Ranges are [Start, End] with an inclusive End, so every range of the
// 64-bit offset space has a value. RangeOf converts NLM4's and fcntl's
// (offset, length): length 0 runs to the end of the file, and so does a
// length that would pass offset 2^64-1 - there is no byte after it, so the
// clamped range holds exactly the same bytes (Linux's lockd likewise makes a
// range whose end overflows run to the end). Range.Length gives 0 back for
// such ranges.
//
// # Semantics
//
// POSIX (fcntl) per owner: Read locks are shared, Write exclusive; locks
// conflict only between different owners. A lock over an owner's own locks
// replaces them on its range (upgrade, downgrade, split); an owner's records
// are merged when adjacent or overlapping and of the same type, so each of
// its records is a maximal range of one type; an unlock of a sub-range
// splits. Test (NLM4 TEST, GETLK) returns the conflict a non-blocking Lock
// would meet: the held lock with the lowest start (ties by owner), or, if no
// held lock conflicts, the waiting request the fairness rule puts first -
// so Test always predicts Lock.
//
// # Fairness
//
// Waiting requests of a file are granted in arrival order: a request (new or
// waiting, blocking or not) is granted only if it conflicts with no held lock
// of another owner and with no earlier waiting request of another owner. The
// one exception: a request of owner O may pass a waiter that is itself
// blocked by a lock O holds. That waiter cannot go before O releases anyway,
// so passing it does not lengthen its wait, and without the exception an
// owner upgrading its own read lock behind a writer waiting for that very
// lock would deadlock. So a stream of readers cannot starve a waiting writer
// (Linux does let them: it checks only held locks), and a waiter that still
// conflicts holds back every later waiter it conflicts with, while later
// waiters that do not conflict with it are granted past it.
//
// # Deadlock
//
// Before a request waits, the machine looks for a cycle in the wait-for
// graph: owner A waits for owner B if a waiting request of A conflicts with a
// lock B holds (or is acquiring), or is held back by an earlier waiting
// request of B under the fairness rule. If B, or any owner reachable from it,
// is the requesting owner, the request is refused with Deadlock
// (NLM4_DEADLCK, EDEADLK). As in the Linux kernel the check is made when a
// request would wait; a cycle that only forms later (an owner with two
// requests waiting on two files) is not found. Local processes are not in the
// graph: the machine does not see what they wait for.
//
// # Bounds
//
// A client has at most Config.MaxPerClient lock records, waiting requests and
// share reservations together. A waiting request counts two, the most its
// grant can add (a lock inside a record of the other type leaves three where
// one was), so granting a waiter never takes a client past its bound. Past
// it, Lock, Share, and an Unlock that would split a record answer NoLocks
// (NLM4_DENIED_NOLOCKS; NFS3ERR_JUKEBOX in the snfs protocol). Backing out a
// failed grant restores what the owner held and may exceed it by that much.
//
// # Grace
//
// While in the grace period (Config.Grace from New's time, StartGrace,
// EndGrace; shared with the consistency protocol's grace by the driver) only
// reclaims are granted; other Lock, Share and Test requests get Grace
// (NLM4_DENIED_GRACE_PERIOD), and waiters are not granted until it ends (Tick
// or EndGrace). Unlock, Unshare, Cancel and ClientGone are accepted: they
// only take away. A reclaim never waits (a conflict, which a correct client
// cannot meet, is Denied); outside the grace period a reclaim is an ordinary
// request.
//
// # Clients going away
//
// ClientGone releases all a client's locks, waiting requests and share
// reservations: NLM FREE_ALL, SM_NOTIFY from a rebooted client's statd, an
// snfs mount's lease expired or its registration ended. The waiters that can
// then go are granted.
//
// # Share reservations
//
// NLM4 SHARE/UNSHARE (DOS share modes): per file, each owner (client and oh)
// has at most one reservation, a deny mode (none, read, write, both) and an
// access (none, read, write, both); a new one replaces the owner's. It
// conflicts with another owner's if its access includes an access the other
// denies, or it denies an access the other has. Share reservations never
// wait and do not interact with byte-range locks.
//
// # Driver contract
//
// Inputs: Lock, Test, Unlock, Cancel, Share, Unshare, ClientGone, BackingDone,
// GrantDone, StartGrace, EndGrace, Tick. Each returns actions to carry out in
// order, and Lock, Test and BackingDone a Result (Unlock, Share, Unshare a
// Verdict):
//
//   - Granted: reply now. Denied, Deadlock, NoLocks, Grace: reply with the
//     matching status. Blocked: reply NLM4_BLOCKED; an ActGranted for
//     Result.Req follows, unless the client cancels or goes away.
//   - Acquiring: the lock is granted here but the backing file must take it
//     first: carry out the returned ActBacking and report BackingDone, whose
//     Result is the answer.
//
// Actions:
//
//   - ActBacking: mirror an owner's change on the backing file, with
//     F_OFD_SETLK on an open file description the driver keeps per (file,
//     owner) - one per owner, so that the kernel holds each remote owner's
//     locks as that owner's and a local process's F_SETLK, F_OFD_SETLK or
//     lockf meets them (flock(2) locks are a separate kind on Linux local
//     file systems: a local flock user is excluded only if the driver also
//     flocks the description of a flock owner's whole-file lock). There is a
//     description per (file, owner) with locks, so the descriptions are
//     bounded by the clients' bounds. The action is the owner's own request (its range and
//     type, or Unlocked), which the kernel applies to that description
//     atomically with the same POSIX replace, split and merge, so the
//     description's locks are always the owner's here. With Acquire it may
//     be refused (EAGAIN: a local process holds a conflicting lock): report
//     BackingDone(Req, false) and the machine restores what the owner held,
//     as the kernel did. Without Acquire it only lowers locks and cannot fail.
//     Last: the owner holds nothing on the file; its description may be
//     closed. Offsets past 2^63-1 (off_t) cannot be locked on the backing
//     file: the driver clamps an End past it to "to the end" (l_len 0) and
//     skips a range that starts past it (no local process can lock there).
//   - ActGranted: a waiting request is granted: send NLM4 GRANTED (or
//     GRANTED_MSG) or the snfs callback, outside any lock, and report
//     GrantDone(Req, ok). A failed callback (error, no answer, the client
//     refused it) backs the grant out; so does a Cancel that arrives while
//     the callback is out (the client gave up before it learned of the
//     grant). A back-out returns each byte the owner has not changed since
//     to what it held before, but never stronger than the grant (others may
//     have shared a range the grant downgraded), so the backing file only
//     lowers. Every ActGranted must be answered by GrantDone, and every
//     acquisition by BackingDone: the machine keeps the request until then.
//
// Ordering: the backing file's locks follow the machine's only if they change
// in the machine's order. The driver carries out each batch in order; at an
// ActBacking with Acquire it reports BackingDone at once and carries out what
// that returns before going on (depth first); and it gives the machine no
// other input meanwhile. The simplest way: one driver mutex held across each
// input, its ActBacking calls (F_OFD_SETLK does not block: microseconds) and
// the BackingDone inputs they lead to; ActGranted callbacks are sent after
// releasing it. The machine helps: a file has at most one acquisition out
// (a queue run stops at a grant that must be acquired, and BackingDone runs
// it on), and until BackingDone the owner's previous locks on the range still
// count against other owners (its shadow), so nothing is granted on the
// strength of a lock the backing file may yet refuse. The randomized test
// drives the machine this way against a simulated kernel that refuses any
// lock another description holds, and checks that no acquisition is ever
// refused because of a remote owner's description, that no release fails,
// and that every description holds exactly its owner's locks.
//
// Test sees remote owners only; the driver also asks the backing file
// (F_OFD_GETLK on a description of its own) and reports a local holder. A
// waiter refused by the backing file waits in its place and is tried again by
// Tick after Config.LocalRetry: the kernel does not report local releases.
// The fairness rule does not hold against local processes, which do not
// queue here.
//
// ReqIDs are unique among live requests; Lock refuses a live one (Denied). A
// blocking Lock that repeats a waiting request (NLM clients resend LOCK while
// blocked) is answered Blocked with the first one's Req and keeps its place.
package lockmgr
