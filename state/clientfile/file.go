package clientfile

import (
	"fmt"
	"time"

	"snfs/state"
)

// Config configures a File.
type Config struct {
	// CloseDelay is how long the protocol open of an application's last
	// release of a cached file is kept before its CLOSE is sent (delayed
	// close, docs/protocol.md 10); 0: no delayed close; UntilRecalled: kept
	// with no deadline, until a callback takes it (CB_TREAT_AS_CLOSED), the
	// file stops being cached, or the driver gives it back
	// (CloseAllDelayed: the client's bound of kept opens, unmount, eviction,
	// removal).
	CloseDelay time.Duration
}

// UntilRecalled is Config.CloseDelay's value for opens kept past the last
// close with no deadline (docs/protocol.md 10, "Opens kept until
// recalled").
const UntilRecalled time.Duration = -1

// ActionKind is what the driver must do.
type ActionKind uint8

// Action kinds.
const (
	// ActSendOpen: send OPEN(Mode), then call OpenAnswered with the token.
	ActSendOpen ActionKind = iota + 1
	// ActReuse: an application open took over a delayed close of Mode: no
	// OPEN is sent (Keep: the kernel's pages are valid).
	ActReuse
	// ActSendClose: send CLOSE(Mode, Dirty).
	ActSendClose
	// ActArmTimer: call TimerFired at At (a delayed close's deadline).
	ActArmTimer
	// ActStopTimer: the delayed close's timer is of no use any more.
	ActStopTimer
	// ActCache: the OPEN's answer allows caching: write back what was
	// written through, settle the attributes, relabel the cache with
	// Version (keeping what the version rule keeps), then call OpenCached.
	ActCache
	// ActStopCaching: stop serving the file from the cache, once the
	// cache writes in progress have ended (the driver's cacheW, held
	// exclusively).
	ActStopCaching
	// ActWriteBack: write the dirty data back (what was written through
	// first), as WriteBackBegin / WriteBackDone.
	ActWriteBack
	// ActInvalidateCache: drop the clean data of the cache directory.
	ActInvalidateCache
	// ActInvalidateAttr: the cached attributes must be fetched again.
	ActInvalidateAttr
	// ActNotifyData: drop the kernel's pages and attributes.
	ActNotifyData
	// ActNotifyAttr: drop the kernel's attributes.
	ActNotifyAttr
	// ActPinSync: the pinned holder sends what its kernel wrote since.
	ActPinSync
	// ActPinEnter: start the pinned mode (the kernel's accesses of the
	// cache file are watched from now); the write-back that follows ends
	// the entry.
	ActPinEnter
	// ActReintegrate: the server forgot this client's dirty record (fenced,
	// reclaim refused): write the dirty data back if the server's file is
	// unchanged, else keep it as a conflict copy.
	ActReintegrate
	// ActAnswer: answer the callback with Outcome.
	ActAnswer
)

var actionNames = [...]string{"?", "send-open", "reuse", "send-close", "arm-timer", "stop-timer", "cache",
	"stop-caching", "write-back", "invalidate-cache", "invalidate-attr", "notify-data", "notify-attr",
	"pin-sync", "pin-enter", "reintegrate", "answer"}

func (k ActionKind) String() string {
	if int(k) < len(actionNames) {
		return actionNames[k]
	}
	return fmt.Sprintf("ActionKind(%d)", uint8(k))
}

// Action is one thing the driver must do.
type Action struct {
	Kind    ActionKind
	Mode    state.Mode    // ActSendOpen, ActReuse, ActSendClose
	Dirty   bool          // ActSendClose
	Keep    bool          // ActReuse
	At      time.Time     // ActArmTimer
	Version uint64        // ActCache
	Outcome state.Outcome // ActAnswer
}

func (a Action) String() string {
	switch a.Kind {
	case ActSendOpen, ActReuse:
		return fmt.Sprintf("%v(%v)", a.Kind, a.Mode)
	case ActSendClose:
		return fmt.Sprintf("%v(%v, dirty %v)", a.Kind, a.Mode, a.Dirty)
	case ActCache:
		return fmt.Sprintf("%v(%d)", a.Kind, a.Version)
	case ActAnswer:
		return fmt.Sprintf("%v(%v)", a.Kind, a.Outcome)
	}
	return a.Kind.String()
}

// pinPhase is the pinned mode's progress (docs/protocol.md 10.1).
type pinPhase uint8

const (
	pinNone     pinPhase = iota
	pinEntering          // ActPinEnter done, its write-back not yet
	pinEntered
)

// File is one file's client-side state. The zero value is not usable: New.
type File struct {
	cfg Config

	caching bool   // the latest OPEN allowed caching and no callback took it away
	version uint64 // cache_version of the latest OPEN
	kernVer uint64 // the version the kernel's pages belong to; 0: none valid
	hasData bool   // the cache directory holds a file for it (cachedir.File)

	opens [3]int // the applications' protocol opens, by state.Mode
	// shared are the applications' opens, by state.Mode, that share one of
	// opens of their mode (kept until recalled: Table 1 has no transition
	// for them, so no OPEN was sent, and no CLOSE is); never more than 0
	// while opens of their mode is 0.
	shared  [3]int
	kept    [3]int // delayed closes, by state.Mode
	opening int    // OPENs in flight
	// deadline is when the kept opens are CLOSEd; timer whether a timer is
	// armed for it (one at a time).
	deadline time.Time
	timer    bool
	// invals counts the callbacks (and refused reclaims) that took
	// caching away, and the reclaims (a grant of the old server's not yet
	// applied is void): an OPEN whose answer is applied after one that
	// came while it was in flight does not cache.
	invals uint64

	dirty    bool   // the cache holds data not written back
	writeSeq uint64 // counts cache writes' beginnings and ends
	writing  int    // cache writes in progress
	wbMoving bool   // a write-back began and has not finished

	pt     [3]int // passthrough opens, by state.Mode
	pin    pinPhase
	holder bool // the pinned mode was entered with writers: CB_PINNED

	// forgot is the part of opens a server that refused this client's
	// reclaim forgot (ServerRestarted), by state.Mode: not yet OPENed again
	// (Reopened) nor released (Release sends no CLOSE for them).
	forgot [3]int
	// reclaimed is the part of opens the latest ReclaimItem reported and no
	// release gave up since: forgotten if the server refuses the reclaim.
	reclaimed [3]int
}

// New returns a File nobody opened.
func New(cfg Config) *File { return &File{cfg: cfg} }

// Caching reports whether the file's data is served from the cache.
func (f *File) Caching() bool { return f.caching && f.hasData }

// Version is the cache_version of the latest OPEN.
func (f *File) Version() uint64 { return f.version }

// Dirty reports whether the cache holds data not written back.
func (f *File) Dirty() bool { return f.dirty }

// Opens returns the applications' protocol opens of mode.
func (f *File) Opens(m state.Mode) int { return f.opens[m] }

// Kept returns the delayed closes of mode.
func (f *File) Kept(m state.Mode) int { return f.kept[m] }

// Opening reports the OPENs in flight.
func (f *File) Opening() int { return f.opening }

// Held is the number of protocol opens the server counts for this client
// once every OPEN in flight is answered: the applications' and the kept ones.
func (f *File) Held() int {
	return f.opens[state.Read] + f.opens[state.Write] + f.kept[state.Read] + f.kept[state.Write]
}

// Busy reports whether the inode must be kept (its state is needed).
func (f *File) Busy() bool { return f.Held() > 0 || f.opening > 0 || f.hasData && f.dirty }

// Pinned reports whether this client is the file's pinned holder.
func (f *File) Pinned() bool { return f.pin == pinEntered && f.holder && f.pt[state.Write] > 0 }

// WriteBackMoving reports whether a write-back began and has not finished
// (the server's file may show some of its WRITEs).
func (f *File) WriteBackMoving() bool { return f.wbMoving }

// Valid is the client's version rule (docs/protocol.md 9): data cached at
// version v is valid after an OPEN answered r.
func Valid(v uint64, r state.OpenReply) bool {
	return v != 0 && (v == r.Version || v == r.OldVersion)
}

// CacheAttached records that the cache directory holds a file for this one
// (the first snfs open gets it).
func (f *File) CacheAttached() { f.hasData = true }

// CacheFoundDirty: the cache file the driver attached holds data not written
// back that no event of this File put there (an earlier mount's, kept by a
// reintegration that failed): the cache is dirty, so that a CLOSE or a
// callback's answer never says clean over it (docs/protocol.md 4.4, 5.1).
func (f *File) CacheFoundDirty() {
	f.hasData = true
	f.writeSeq++
	f.dirty = true
}

func (f *File) apps() int { return f.opens[state.Read] + f.opens[state.Write] }

func (f *File) keptN() int { return f.kept[state.Read] + f.kept[state.Write] }

// Open is the token of an application open between OpenBegin and its end.
type Open struct {
	Mode   state.Mode
	Reused bool // a delayed close was taken over, or an open shared: nothing to send
	Shared bool // Reused by sharing an application's open of the same mode
	invals uint64
	was    bool   // caching when the answer arrived
	kv     uint64 // the kernel's pages' version when the answer arrived
}

// OpenBegin is an application open of mode: it takes a delayed close over
// (ActReuse: a read open may take a kept write open) while the file is
// cached, or asks for an OPEN (ActSendOpen; OpenAnswered follows).
func (f *File) OpenBegin(mode state.Mode) (Open, []Action) {
	if f.cfg.CloseDelay != 0 && f.Caching() && f.keptN() > 0 {
		taken := state.Mode(0)
		switch {
		case f.kept[mode] > 0:
			taken = mode
		case mode == state.Read && f.kept[state.Write] > 0:
			taken = state.Write
		}
		if taken != 0 {
			f.kept[taken]--
			f.opens[taken]++
			var acts []Action
			if f.keptN() == 0 && f.timer {
				f.timer = false
				acts = append(acts, Action{Kind: ActStopTimer})
			}
			keep := f.kernVer != 0 && f.kernVer == f.version
			return Open{Mode: taken, Reused: true}, append(acts, Action{Kind: ActReuse, Mode: taken, Keep: keep})
		}
	}
	if f.cfg.CloseDelay < 0 && f.Caching() {
		// Another application open of a mode this client already has
		// the file open in: no transition of the server's (the paper's
		// Table 1), so no OPEN (its caching and version are those of the
		// open it shares), and no CLOSE at its release. A read open may
		// share a write open, as it may take a kept one: a caching writer
		// reads its own cache (ar reads an object file it holds open
		// again through a second descriptor).
		share := state.Mode(0)
		switch {
		case f.opens[mode]-f.forgot[mode] > 0:
			share = mode
		case mode == state.Read && f.opens[state.Write]-f.forgot[state.Write] > 0:
			share = state.Write
		}
		if share != 0 {
			f.shared[share]++
			keep := f.kernVer != 0 && f.kernVer == f.version
			return Open{Mode: share, Reused: true, Shared: true}, []Action{{Kind: ActReuse, Mode: share, Keep: keep}}
		}
	}
	f.opening++
	return Open{Mode: mode, invals: f.invals}, []Action{{Kind: ActSendOpen, Mode: mode}}
}

// NeedsStop reports whether applying this OPEN answer stops caching, so
// that the driver holds its cache-write lock exclusively around
// OpenAnswered (an answer refusing caching takes effect as it arrives,
// docs/protocol.md 4.2).
func NeedsStop(r state.OpenReply, err error) bool { return err == nil && !r.CacheEnabled }

// OpenAnswered applies the OPEN's answer (err: it failed, JUKEBOX after the
// session's retries included, and counts nothing). The open is counted; an
// answer refusing caching stops it at once. An answer allowing it leads to
// ActCache, unless a callback took caching away while the OPEN was in flight
// (the answer may be the grant it revoked: docs/protocol.md 5.1); otherwise
// to the write-through plan: dirty data written back first, the cache's
// clean data dropped, the kernel's pages too if they were cached.
func (f *File) OpenAnswered(o *Open, r state.OpenReply, err error) []Action {
	f.opening--
	if err != nil {
		return nil
	}
	f.opens[o.Mode]++
	f.hasData = true // the driver gets the cache file next
	o.was, o.kv = f.caching, f.kernVer
	if !r.CacheEnabled {
		// The refusal revokes every grant not yet applied too: an earlier
		// OPEN whose answer allowed caching, still between ActCache and
		// OpenCached, must not turn caching back on after it (the server
		// stopped counting this client as caching when it sent this
		// answer). Found by state's both-ends model; the mount does the
		// same (mount/vfs TestOpenRefusalRevokesEarlierGrant).
		f.caching = false
		f.invals++
	}
	if r.CacheEnabled && f.invals == o.invals {
		return []Action{{Kind: ActCache, Version: r.Version}}
	}
	return f.writeThrough(o, r)
}

func (f *File) writeThrough(o *Open, r state.OpenReply) []Action {
	var acts []Action
	if f.dirty {
		acts = append(acts, Action{Kind: ActWriteBack})
	}
	acts = append(acts, Action{Kind: ActInvalidateCache})
	f.caching, f.version, f.kernVer = false, r.Version, 0
	if o.was {
		acts = append(acts, Action{Kind: ActNotifyData})
	}
	return acts
}

// OpenCached ends an ActCache: settled reports whether the driver got
// attributes no write-back of its own overtook (if not, this open writes
// through). It caches unless a callback took caching away meanwhile; keep
// reports whether the kernel's pages stay valid.
func (f *File) OpenCached(o *Open, r state.OpenReply, settled bool) (keep bool, acts []Action) {
	if settled && f.invals == o.invals {
		f.caching, f.version = true, r.Version
		// The pages are kept only if they were of this version when the
		// answer arrived and still are: a concurrent open of the file may
		// have relabelled them (moving kernVer to this version) between
		// this open's answer and now, and its dropping of the older pages
		// happens only after its own open returns (wrev's review).
		keep = Valid(o.kv, r) && Valid(f.kernVer, r)
		f.kernVer = r.Version
		return keep, nil
	}
	return false, f.writeThrough(o, r)
}

// Forgotten returns the applications' opens of mode a server that refused
// this client's reclaim forgot and no OPEN gave back yet (Reopened).
func (f *File) Forgotten(m state.Mode) int { return f.forgot[m] }

// Passthrough returns the passthrough opens of mode.
func (f *File) Passthrough(m state.Mode) int { return f.pt[m] }

// Reopened: an OPEN of mode sent again after a refused reclaim was answered
// (docs/protocol.md 4.5, 7.1: a fenced client OPENs again before it uses a
// file): one forgotten open is the server's again, CLOSEd at its release.
// Its answer's caching is not applied: the open stays written through (a
// client may always do less than the server allows).
func (f *File) Reopened(m state.Mode) {
	if f.forgot[m] > 0 {
		f.forgot[m]--
	}
}

// GrantedLocally: the open of mode just counted (OpenAnswered) was granted
// by the driver itself, with no OPEN (disconnected operation: the mount is
// offline, the file's data wholly cached): the server does not count it, as
// a forgotten one, until the driver OPENs it (Reopened); its release sends
// no CLOSE and is not kept.
func (f *File) GrantedLocally(m state.Mode) {
	f.forgot[m] = min(f.forgot[m]+1, f.opens[m])
}

// GrantUndone gives back an open GrantedLocally counted when the
// application's open fails after all (its access check): the server never
// counted it, so nothing is CLOSEd.
func (f *File) GrantUndone(m state.Mode) []Action {
	if f.opens[m] > 0 {
		f.opens[m]--
	}
	if f.forgot[m] > 0 {
		f.forgot[m]--
	}
	f.reclaimed[m] = min(f.reclaimed[m], f.opens[m])
	return f.closedAll()
}

// OpenUndone gives back an open whose OPEN was answered when the
// application's open fails after all (docs/protocol.md 4.2: each successful
// OPEN is matched by one CLOSE): the server counts it, so it is CLOSEd, and
// never kept as a delayed close; a forgotten open of its mode stays
// forgotten (never more of them than opens).
func (f *File) OpenUndone(mode state.Mode) []Action {
	if f.shared[mode] > 0 {
		// An open shares this one's: it takes it over (no CLOSE).
		f.shared[mode]--
		return nil
	}
	if f.opens[mode] > 0 {
		f.opens[mode]--
	}
	f.forgot[mode] = min(f.forgot[mode], f.opens[mode])
	f.reclaimed[mode] = min(f.reclaimed[mode], f.opens[mode])
	return append([]Action{{Kind: ActSendClose, Mode: mode, Dirty: f.dirty}}, f.closedAll()...)
}

// Release is an application's last close of one open of mode (the protocol
// mode of its open, that of a taken-over delayed close included). The
// driver has made the cache durable and sent what was written through.
// removed: the file lost its last link while open (its silly name goes now,
// and its cached data with it: the driver calls Removed first, so the
// CLOSE says clean, as cancelWriteBack does today). The open is kept as a
// delayed close when that is on, the file is cached and no other open
// (application or in flight) remains; otherwise CLOSE is sent, with dirty
// as the cache is.
func (f *File) Release(now time.Time, mode state.Mode, removed bool) []Action {
	if f.shared[mode] > 0 {
		// Opens of one mode are alike: one that shares another's goes
		// first, with nothing to send.
		f.shared[mode]--
		return nil
	}
	if f.opens[mode] > 0 {
		f.opens[mode]--
	}
	// One the latest reclaim reported, released before the server's verdict
	// on it: CLOSEd (the server counts it if it took the reclaim), and not
	// forgotten if it refuses it.
	if f.reclaimed[mode] > 0 {
		f.reclaimed[mode]--
	}
	if f.forgot[mode] > 0 {
		// An open the server forgot (opens of one mode are alike to it:
		// releasing any of them gives up one forgotten one): it counts
		// none, so no CLOSE, and none kept for later either.
		f.forgot[mode]--
		return f.closedAll()
	}
	if !removed && f.cfg.CloseDelay != 0 && f.caching && f.apps() == 0 && f.opening == 0 && f.kept[mode] == 0 {
		f.kept[mode]++
		if f.cfg.CloseDelay < 0 {
			return nil // until recalled: no deadline
		}
		f.deadline = now.Add(f.cfg.CloseDelay)
		if !f.timer {
			f.timer = true
			return []Action{{Kind: ActArmTimer, At: f.deadline}}
		}
		return nil
	}
	acts := []Action{{Kind: ActSendClose, Mode: mode, Dirty: f.dirty}}
	if f.apps() == 0 && f.opening == 0 && f.keptN() > 0 && (removed || !f.caching) {
		// Kept opens outlive the caching they were kept for (a callback
		// answered CB_OK while an application had the file open took it,
		// or an OPEN answered write-through): a reopen could not take them
		// over, so they go with this CLOSE rather than at a deadline that,
		// kept until recalled, never comes. So do they when the file lost
		// its last link.
		if f.timer {
			f.timer = false
			acts = append(acts, Action{Kind: ActStopTimer})
		}
		for _, m := range []state.Mode{state.Read, state.Write} {
			for range f.kept[m] {
				acts = append(acts, Action{Kind: ActSendClose, Mode: m, Dirty: f.dirty})
			}
			f.kept[m] = 0
		}
	}
	// A kept open of this mode already serves the next reopen: this one
	// is CLOSEd (kept opens stay at most one per mode).
	return append(acts, f.closedAll()...)
}

// closedAll: with no open held and none in flight, the server no longer
// calls this client back about the file: caching ends, and the kernel's
// attributes are good only as long as nfs mode's.
func (f *File) closedAll() []Action {
	if f.Held() != 0 || f.opening != 0 {
		return nil
	}
	f.caching = false
	return []Action{{Kind: ActInvalidateAttr}, {Kind: ActNotifyAttr}}
}

// TimerFired: the delayed close's timer went off at now. Before the
// deadline (a later release moved it) the timer is armed again; at it, the
// kept opens are CLOSEd.
func (f *File) TimerFired(now time.Time) []Action {
	f.timer = false
	if f.keptN() == 0 || f.cfg.CloseDelay < 0 {
		return nil // kept until recalled: no deadline (no timer is armed)
	}
	if now.Before(f.deadline) {
		f.timer = true
		return []Action{{Kind: ActArmTimer, At: f.deadline}}
	}
	return f.closeKept()
}

// CloseAllDelayed CLOSEs the kept opens now: unmount, and, for opens kept
// until recalled, the driver's giving them back (over its bound of kept
// files, the file's cached data evicted, its last link removed).
func (f *File) CloseAllDelayed() []Action {
	if f.keptN() == 0 {
		return nil
	}
	var acts []Action
	if f.timer {
		f.timer = false
		acts = append(acts, Action{Kind: ActStopTimer})
	}
	return append(acts, f.closeKept()...)
}

func (f *File) closeKept() []Action {
	var acts []Action
	for _, m := range []state.Mode{state.Read, state.Write} {
		for range f.kept[m] {
			acts = append(acts, Action{Kind: ActSendClose, Mode: m, Dirty: f.dirty})
		}
		f.kept[m] = 0
	}
	return append(acts, f.closedAll()...)
}

// IdleClean: the write-back loop wrote this file back. With no open held or
// in flight, a CLOSE with dirty = FALSE and no open to close tells the
// server it need not call this client back for it (docs/protocol.md 4.4).
func (f *File) IdleClean() []Action {
	if f.Held() != 0 || f.opening != 0 || !f.hasData || f.dirty {
		return nil
	}
	return []Action{{Kind: ActSendClose, Mode: state.Write, Dirty: false}}
}

// CacheWriteBegin is an application write (or a local truncation): it goes
// into the cache, dirty from now, if the file is cached (the driver holds
// its cache-write lock shared until CacheWriteEnd); else it goes through the
// server (false).
func (f *File) CacheWriteBegin() bool {
	if !f.Caching() {
		return false
	}
	f.writing++
	f.writeSeq++
	f.dirty = true
	return true
}

// CacheWriteEnd ends a CacheWriteBegin that returned true.
func (f *File) CacheWriteEnd() {
	f.writing--
	f.writeSeq++
}

// WriteBack is the token of a write-back.
type WriteBack struct{ seq uint64 }

// WriteBackBegin starts a write-back of the dirty data (the driver holds
// flushMu: one at a time). ok is false when there is nothing to write back.
func (f *File) WriteBackBegin() (WriteBack, bool) {
	if !f.dirty || !f.hasData {
		return WriteBack{}, false
	}
	f.wbMoving = true
	return WriteBack{seq: f.writeSeq}, true
}

// WriteBackResult is how a write-back ended.
type WriteBackResult uint8

// Write-back results.
const (
	WBDone    WriteBackResult = iota // written and committed
	WBKept                           // a transport error, a cancellation: the data stays dirty
	WBDropped                        // the server refused it (ENOSPC, EIO...): the data is lost, its error kept for the next fsync or close
	WBFenced                         // SNFS_ERR_FENCED: kept and reintegrated (Fenced follows)
)

// WriteBackDone ends a write-back. Dirty clears only if no cache write began
// or ended since it began.
func (f *File) WriteBackDone(wb WriteBack, res WriteBackResult) []Action {
	switch res {
	case WBDone:
		f.wbMoving = false
		if f.writeSeq == wb.seq && f.writing == 0 {
			f.dirty = false
		}
	case WBDropped:
		f.dirty, f.hasData, f.kernVer, f.wbMoving = false, false, 0, false
		return []Action{{Kind: ActInvalidateAttr}, {Kind: ActNotifyData}}
	case WBFenced:
		return f.Fenced()
	}
	return nil
}

// Fenced: the server answered SNFS_ERR_FENCED (it forgot this client's opens
// and dirty record of the file): clean data is dropped, dirty data
// reintegrated (which OPENs the file again). The applications' opens are
// kept (what the client does today; see the report of issue 25 item 2); the
// kept delayed closes are forgotten (no CLOSE): the server counts none of
// them, and one taken over later would be an open the server never calls
// back about.
func (f *File) Fenced() []Action {
	f.caching, f.kernVer = false, 0
	f.kept = [3]int{}
	var acts []Action
	if f.timer {
		f.timer = false
		acts = append(acts, Action{Kind: ActStopTimer})
	}
	acts = append(acts, Action{Kind: ActInvalidateAttr}, Action{Kind: ActInvalidateCache}, Action{Kind: ActNotifyData})
	if f.dirty && f.hasData {
		acts = append(acts, Action{Kind: ActReintegrate})
	}
	return acts
}

// Removed: the file's last link is gone and no application has it open (or
// its last one closed): its cached data, dirty included, is dropped without
// a write-back.
func (f *File) Removed() {
	f.hasData, f.caching, f.kernVer, f.wbMoving, f.dirty = false, false, 0, false, false
}

// ServerRestarted: the server restarted and this client reclaimed its state
// (refused false: caches stay valid, opens stay open, dirty data is written
// back now) or not (refused: nothing of it is known to the server; caching
// stops, delayed closes are forgotten, dirty data is reintegrated; open
// files go on, written through; the applications' opens the reclaim
// reported are forgotten until the driver OPENs them again, Forgotten and
// Reopened).
func (f *File) ServerRestarted(refused bool) []Action {
	rec := f.reclaimed
	f.reclaimed = [3]int{}
	if !refused {
		if f.dirty {
			return []Action{{Kind: ActWriteBack}}
		}
		return nil
	}
	// The applications' opens the reclaim reported and none has released
	// since are forgotten; those counted since were answered by the new
	// server, which counts them.
	for _, m := range []state.Mode{state.Read, state.Write} {
		f.forgot[m] = min(f.forgot[m]+rec[m], f.opens[m])
	}
	was := f.caching || f.kernVer != 0
	f.caching, f.kernVer = false, 0
	f.invals++
	f.kept = [3]int{}
	var acts []Action
	if f.timer {
		f.timer = false
		acts = append(acts, Action{Kind: ActStopTimer})
	}
	if was {
		acts = append(acts, Action{Kind: ActInvalidateAttr})
	}
	if f.hasData {
		acts = append(acts, Action{Kind: ActInvalidateCache})
	}
	if was {
		acts = append(acts, Action{Kind: ActNotifyData})
	}
	if f.dirty && f.hasData {
		acts = append(acts, Action{Kind: ActReintegrate})
	}
	return acts
}

// ReclaimItem is the file's RECLAIM item (docs/protocol.md 4.5); ok is false
// when it holds nothing worth reporting. A pinned holder (or one entering)
// reports itself caching and dirty: the next conflicting OPEN pins it again.
// The applications' opens an earlier refused reclaim made forgotten and no
// OPEN gave back are left out (the server never counted them, a client
// reports only what it was granted, and their releases send no CLOSE); the
// ones reported are those a refusal of this reclaim makes forgotten
// (ServerRestarted).
//
// It moves the invalidation epoch: a grant of caching not applied yet (an
// OPEN answered before the restart, between ActCache and OpenCached, whose
// open this item reports as not cached) is not applied after it, and an OPEN
// in flight does not cache on its answer either (it may be the old server's,
// for an open this item does not report). Otherwise the new server records
// a writer that does not cache while it caches, and its dirty CLOSE marks
// nothing: another client's OPEN calls nobody back and reads the server's
// older bytes (docs/protocol.md 7.1).
func (f *File) ReclaimItem() (readers, writers int, caching, dirty bool, version uint64, ok bool) {
	f.invals++
	for _, m := range []state.Mode{state.Read, state.Write} {
		f.reclaimed[m] = max(f.opens[m]-f.forgot[m], 0)
	}
	readers = f.reclaimed[state.Read] + f.kept[state.Read]
	writers = f.reclaimed[state.Write] + f.kept[state.Write]
	caching, dirty = f.caching && f.hasData, f.dirty && f.hasData
	if f.pin != pinNone && f.pt[state.Write] > 0 {
		caching, dirty = true, true
	}
	if readers+writers == 0 && !dirty {
		return 0, 0, false, false, 0, false
	}
	return readers, writers, caching, dirty, f.version, true
}

// PassthroughOpen records an open whose I/O the kernel does on the cache
// file itself (FUSE passthrough), watched so that it can be pinned.
func (f *File) PassthroughOpen(mode state.Mode) { f.pt[mode]++ }

// PassthroughClose ends one; the last ends the pinned mode. What the kernel
// wrote through a write open goes to the server first (the driver's
// snfsNoteExternal, before the release's CLOSE) when the file is pinned
// (ActPinSync: its last CLOSE for writing ends the pinned state,
// docs/protocol.md 10.1) or not cached (ActWriteBack: write-shared, it is
// not kept); a cached file keeps it as dirty data.
func (f *File) PassthroughClose(mode state.Mode) []Action {
	var acts []Action
	if mode == state.Write {
		switch {
		case f.pin == pinEntered:
			acts = append(acts, Action{Kind: ActPinSync})
		case !f.caching && f.dirty && f.hasData:
			acts = append(acts, Action{Kind: ActWriteBack}, Action{Kind: ActInvalidateCache})
		}
	}
	if f.pt[mode] > 0 {
		f.pt[mode]--
	}
	if f.pt[state.Read]+f.pt[state.Write] == 0 {
		f.pin, f.holder = pinNone, false
	}
	return acts
}

// Invals is the invalidation epoch: it moves whenever caching was taken
// away (a callback that invalidates, the pinned holder's callbacks, a
// refusal of caching, a refused reclaim) and at every reclaim (ReclaimItem).
// Caches keyed by it (the file's
// extended attributes) are valid only while it stays.
func (f *File) Invals() uint64 { return f.invals }

// Reintegrated: the reintegration's own OPEN (for writing) relabelled the
// cache with version and wrote the dirty data back (WriteBackBegin /
// WriteBackDone around it); its CLOSE follows, outside this machine's
// counts, as today.
func (f *File) Reintegrated(version uint64) {
	f.hasData, f.version = true, version
}

// Dropped: the cache file is gone (its data saved as a conflict copy, or
// lost): nothing of the file is cached any more.
func (f *File) Dropped() []Action {
	f.hasData, f.caching, f.kernVer, f.dirty = false, false, 0, false
	return []Action{{Kind: ActNotifyData}}
}

// Through is a read or write that goes through the server (the file is not
// cached): the cache's dirty data, written while it was cached, is older
// than it and goes first (the driver's writeBackFirst, under flushMu, which
// also waits for a write-back in progress). Without it a read through
// returns the server's older bytes, and a late write-back overwrites a newer
// write made through.
func (f *File) Through() []Action {
	if f.dirty && f.hasData {
		return []Action{{Kind: ActWriteBack}}
	}
	return nil
}

// ExternalTaken: the driver took in what the kernel wrote through
// passthrough (after ExternalWrite) at a close, an fsync or before a
// write-back. A file not cached any more (write-shared, or caching taken
// away by a callback) sends it to the server now, and it does not stay
// cached: data kept while not caching is not valid for a later OPEN
// (docs/protocol.md 9, 10.1). A cached file keeps it as dirty data.
func (f *File) ExternalTaken() []Action {
	if f.caching || !f.hasData || !f.dirty {
		return nil
	}
	return []Action{{Kind: ActWriteBack}, {Kind: ActInvalidateCache}}
}

// ExternalWrite: the kernel wrote into the cache file through a passthrough
// open (the driver noticed it: snfsNoteExternal), cached or not: in the
// pinned mode it goes on writing there. The cache is dirty.
func (f *File) ExternalWrite() {
	f.writeSeq++
	f.dirty = true
}
