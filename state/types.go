package state

import (
	"crypto/sha256"
	"fmt"
	"time"
)

// FileID is the table key of a file: a fixed-size, collision-free name the driver
// derives from the file handle (FileIDOf, or a lossless packing of the handle
// when it fits). The machine never interprets it.
type FileID [16]byte

// FileIDOf derives a FileID from a file handle: the first 128 bits of its
// SHA-256 (the server's handles carry a MAC, so no client can choose one to
// collide with another).
func FileIDOf(handle []byte) FileID {
	sum := sha256.Sum256(handle)
	return FileID(sum[:16])
}

// ClientID names a client host. The driver interns each Spritely client (its
// registration) and each plain NFS client (its address) to a distinct ClientID.
// A client that has called Register or Open is a protocol client; any other
// ClientID seen by PlainAccess is a plain NFSv3 client.
type ClientID uint32

// ReqID names a request the driver may have to park (an OPEN or a plain access).
// The machine answers a parked request later by an action carrying its ReqID.
type ReqID uint64

// Mode is the mode of an OPEN or CLOSE (the paper's writeMode). It is also
// the protocol's openmode1: snfs1 encodes these values on the wire as they
// are, so they must not change.
type Mode uint8

// Modes.
const (
	Read Mode = iota + 1
	Write
)

func (m Mode) String() string {
	switch m {
	case Read:
		return "read"
	case Write:
		return "write"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// State is a file's consistency state (section 4.3.4 of the Spritely NFS paper).
type State uint8

// States, in the paper's order.
const (
	Closed      State = iota // not open by any client
	ClosedDirty              // not open; the last writer may still have dirty blocks
	OneReader                // open read-only by one client
	OneRdrDirty              // open read-only by one client that may have dirty blocks from a previous open
	MultReaders              // open read-only by two or more clients
	OneWriter                // open read-write by one client
	WriteShared              // open by two or more clients, at least one writing
	numStates
)

var stateNames = [...]string{"CLOSED", "CLOSED_DIRTY", "ONE_READER", "ONE_RDRDIRTY", "MULT_READERS", "ONE_WRITER", "WRITE_SHARED"}

func (s State) String() string {
	if s < numStates {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// CallbackMode is what a callback asks of a client. The first three are the
// paper's SNFS_CBWRITE, SNFS_CBINVAL and SNFS_WRINVAL (with their values);
// Relinquish is the mode section 6.2 calls for. It is also the protocol's
// cbmode1: snfs1 encodes these values on the wire as they are.
type CallbackMode uint8

// Callback modes.
const (
	Writeback           CallbackMode = 1 // write dirty blocks back, keep caching
	Invalidate          CallbackMode = 2 // drop cached blocks and stop caching
	WritebackInvalidate CallbackMode = 3 // both
	Relinquish          CallbackMode = 4 // write back, and close the file if only a delayed close keeps it open
	// RecallLocks: give back a lock delegation (docs/protocol.md, "Lock
	// delegation"): send the locks held locally as LOCKs, then answer. Not
	// a mode of the table's: the server's lock code sends it.
	RecallLocks CallbackMode = 5
	// RecallPermit: give back a write-back permit on a directory
	// (docs/protocol.md, "Write-back permits"): reintegrate the directory's
	// logged changes, then answer. Not a mode of the table's: Permits
	// sends it.
	RecallPermit     CallbackMode = 6
	numCallbackModes CallbackMode = 7
)

func (c CallbackMode) String() string {
	switch c {
	case Writeback:
		return "WRITEBACK"
	case Invalidate:
		return "INVALIDATE"
	case WritebackInvalidate:
		return "WRITEBACK_INVALIDATE"
	case Relinquish:
		return "RELINQUISH"
	case RecallLocks:
		return "RECALL_LOCKS"
	case RecallPermit:
		return "RECALL_PERMIT"
	}
	return fmt.Sprintf("CallbackMode(%d)", uint8(c))
}

// WritesBack reports whether the mode asks for dirty data to be written back.
func (c CallbackMode) WritesBack() bool {
	return c != Invalidate && c != RecallLocks && c != RecallPermit
}

// Invalidates reports whether the mode asks the client to drop its cached data
// and stop caching.
func (c CallbackMode) Invalidates() bool {
	return c == Invalidate || c == WritebackInvalidate
}

// Outcome is how a callback ended. OK, TreatAsClosed, Stale and Pinned are
// also the protocol's cbstat1, the client's answer: snfs1 encodes these values
// on the wire as they are, so they must not change. Failed is never on the
// wire (snfs1's decoder refuses it).
type Outcome uint8

// Outcomes. OK, TreatAsClosed, Stale and Pinned are the client's answers;
// Failed is a transport error or no answer (the driver reports it, or Tick
// finds the deadline passed).
const (
	OK            Outcome = iota // the work the mode asked for is done; the client keeps its opens
	TreatAsClosed                // done, and every open the client has on the file is a delayed close: treat them as closed
	Stale                        // the client holds nothing of the file (no opens, no cached blocks)
	// Pinned: dirty blocks written back, but the client cannot stop writing
	// into its cache (its kernel writes there itself, FUSE passthrough): it
	// stays the file's dirty holder while it has the file open for writing,
	// and every other client's request on the file waits until it has
	// answered a write-back asked after the request arrived
	// (docs/protocol.md, section 10.1).
	Pinned
	Failed // no valid answer: the client is fenced for the file
	numOutcomes
)

// MaxAnswer is the largest Outcome a client may answer (the last one on the
// wire).
const MaxAnswer = Pinned

func (o Outcome) String() string {
	return [...]string{"OK", "TREAT_AS_CLOSED", "STALE", "PINNED", "FAILED", "?"}[min(o, numOutcomes)]
}

// AccessKind is a plain NFSv3 request that reads or changes a file (section 6.1).
type AccessKind uint8

// Access kinds.
const (
	AccessRead    AccessKind = iota + 1 // READ
	AccessWrite                         // WRITE
	AccessSetattr                       // SETATTR that changes the size, the mode or the owner
	AccessRemove                        // REMOVE of the file (or RENAME over it)
	AccessRename                        // RENAME of the file
	// AccessGetattr is a GETATTR: it reads the attributes only, so it records
	// no hold and stops nobody's caching; it waits only for the write-back of
	// another client's dirty blocks, whose size and times the server does not
	// have yet.
	AccessGetattr
)

func (k AccessKind) String() string {
	switch k {
	case AccessRead:
		return "READ"
	case AccessWrite:
		return "WRITE"
	case AccessSetattr:
		return "SETATTR"
	case AccessRemove:
		return "REMOVE"
	case AccessRename:
		return "RENAME"
	case AccessGetattr:
		return "GETATTR"
	}
	return fmt.Sprintf("AccessKind(%d)", uint8(k))
}

func (k AccessKind) changes() bool { return k >= AccessWrite && k <= AccessRename }

// Verdict is the machine's immediate answer to an OPEN or a plain access.
type Verdict uint8

// Verdicts.
const (
	Proceed Verdict = iota // answer now (for an OPEN, with Result.Reply)
	Wait                   // park the request; an action with its ReqID answers it later
	Jukebox                // answer NFS3ERR_JUKEBOX (the client retries later)
	Refuse                 // the client is fenced for this file: fail the request
)

func (v Verdict) String() string {
	return [...]string{"proceed", "wait", "jukebox", "refuse"}[v]
}

// OpenReply is the answer to an OPEN (the paper's openopres, without attributes).
type OpenReply struct {
	CacheEnabled bool
	Version      uint64 // cacheVersion
	OldVersion   uint64 // oldCacheVers: cached data of this version is still valid too
}

// Result is the immediate outcome of Open.
type Result struct {
	Verdict Verdict
	Reply   OpenReply // when Verdict is Proceed
}

// OpenArgs is an OPEN.
type OpenArgs struct {
	File   FileID
	Handle []byte // the NFS file handle, copied once per table entry, sent in callbacks
	Client ClientID
	Mode   Mode
	// Change is the file's change attribute (a digest of its size and times)
	// as the driver read it for this OPEN, given when the driver cannot learn
	// of changes made outside the protocol otherwise (no change notifications
	// for its file system); 0: not checked. An OPEN that finds it different
	// from the one the last OPEN recorded, while no client was writing the
	// file, applies Changed first.
	Change uint64
}

// CloseArgs is a CLOSE.
type CloseArgs struct {
	File   FileID
	Client ClientID
	Mode   Mode
	// Dirty is false when the client states it holds no dirty blocks of the file.
	// It clears the client's last-writer record once it has no write opens left.
	Dirty bool
}

// AccessArgs is a plain NFSv3 access (or a protocol client's data request: the
// machine tells the two apart).
type AccessArgs struct {
	File   FileID
	Handle []byte
	Client ClientID
	Kind   AccessKind
	// Local: the access is a local process's open on the server machine (it
	// broke the file's lease). It records no hold: a local process caches
	// nothing (it shares the server's page cache). A read waits, as a GETATTR
	// does, for every client's dirty blocks to be written back and stops
	// nobody's caching; a write waits for the same callbacks as a plain NFSv3
	// write (write back, invalidate).
	Local bool
	// Patient: the access is a REINTEGRATE record's (docs/protocol.md
	// section 21.3): it waits for the callbacks it needs however long they
	// take - each is bounded by the callback deadline, past which its
	// client is fenced - and is never answered Jukebox, which would stop
	// the batch and leave its permits' recalls waiting for a resend.
	Patient bool
}

// ReclaimArgs is what a client reports about one file after a server restart
// (crash recovery, Sprite style: the clients together know the state).
type ReclaimArgs struct {
	File             FileID
	Handle           []byte
	Client           ClientID
	Readers, Writers uint32
	Caching, Dirty   bool
	Version          uint64 // the version the client's cache holds
}

// Callback identifies one callback. The driver passes it back unchanged to
// CallbackSent and CallbackDone; Seq tells a late answer from a current one.
type Callback struct {
	File   FileID
	Handle []byte
	Client ClientID
	Mode   CallbackMode
	Seq    uint64
}

// ActionKind is what the driver must do.
type ActionKind uint8

// Action kinds.
const (
	// ActCallback: send CALLBACK(Callback) on the client's connection, report
	// CallbackSent when written, CallbackDone when answered or failed.
	ActCallback ActionKind = iota + 1
	// ActProbe: send a callback NULL to Client, report CallbackPathVerified.
	ActProbe
	// ActReply: answer the parked OPEN Req with Reply.
	ActReply
	// ActProceed: let the parked plain access Req go ahead.
	ActProceed
	// ActJukebox: answer the parked request Req with NFS3ERR_JUKEBOX.
	ActJukebox
	// ActRefuse: fail the parked request Req: its client is fenced for the file.
	ActRefuse
	// ActAbandon: the parked request Req's client is gone; drop it unanswered.
	ActAbandon
	// ActFence: Client is fenced for File (a callback failed or timed out): log it.
	ActFence
	// ActReserveVersions: make "versions up to Through are used" durable, then call
	// VersionsReserved.
	ActReserveVersions
	// ActLease: File (Handle) has a client that may hold dirty blocks of it
	// (Take true: a caching writer, a last writer not yet written back, a
	// pinned holder), or no longer has one (Take false). The driver holds a
	// lease on the file meanwhile, so that a local process opening it first
	// has the dirty blocks written back (docs/protocol.md, "Local
	// processes"); it reports a broken lease as a plain access by the local
	// processes' client.
	ActLease
)

func (k ActionKind) String() string {
	names := [...]string{"?", "callback", "probe", "reply", "proceed", "jukebox", "refuse", "abandon", "fence", "reserve-versions", "lease"}
	if int(k) < len(names) {
		return names[k]
	}
	return fmt.Sprintf("ActionKind(%d)", uint8(k))
}

// Action is one thing the driver must do, in order.
type Action struct {
	Kind     ActionKind
	Req      ReqID     // ActReply, ActProceed, ActJukebox, ActRefuse, ActAbandon
	Reply    OpenReply // ActReply
	Callback Callback  // ActCallback
	Client   ClientID  // ActProbe, ActFence
	File     FileID    // ActFence, ActLease
	Handle   []byte    // ActLease
	Take     bool      // ActLease
	Through  uint64    // ActReserveVersions
}

// Config configures a Machine. Zero fields take the defaults.
type Config struct {
	// MaxEntries bounds the table (default 1<<20). Reclaiming starts at
	// HighWater percent of it (default 90).
	MaxEntries int
	HighWater  int
	// Shards is the number of independently locked parts of the table; each
	// holds MaxEntries/Shards entries, and the bound and HighWater apply to
	// each part. Default: one part per minShardEntries entries, at least 1,
	// at most 64, so that a part fills within a few percent of the whole (a
	// small table is one part: --table-entries 8 admits 8 open files).
	Shards int
	// CallbackTimeout is how long after it is sent a callback may take (default 5 s).
	CallbackTimeout time.Duration
	// QueueTimeout is how long a callback may wait to be sent, on top of
	// CallbackTimeout, when the driver never reports CallbackSent (default
	// CallbackTimeout).
	QueueTimeout time.Duration
	// JukeboxAfter is how long a parked request waits before NFS3ERR_JUKEBOX
	// (default 1 s).
	JukeboxAfter time.Duration
	// RecallBackoff is how long no caching is granted on a file after a recall
	// (a callback that invalidates) (default 2 s).
	RecallBackoff time.Duration
	// PlainHold is how long a plain NFS access counts as an open; no shorter than
	// the plain clients' attribute-cache timeout (default 60 s).
	PlainHold time.Duration
	// RelinquishIdle is how long an open entry must have been idle before a full
	// table asks its clients to RELINQUISH it (default 30 s).
	RelinquishIdle time.Duration
	// VersionBase is the durable version high-water mark read at start: every
	// version issued is above it. VersionBlock is how many versions one
	// ActReserveVersions reserves (default 1<<16).
	VersionBase  uint64
	VersionBlock uint64
	// ReclaimScan is how many of the least recently used entries one insertion
	// into a nearly full shard examines (default 8).
	ReclaimScan int
}

// minShardEntries is the smallest part of the table Config.defaults makes.
const minShardEntries = 1024

func (c *Config) defaults() {
	if c.MaxEntries <= 0 {
		c.MaxEntries = 1 << 20
	}
	if c.HighWater <= 0 || c.HighWater > 100 {
		c.HighWater = 90
	}
	if c.Shards <= 0 {
		c.Shards = min(max(c.MaxEntries/minShardEntries, 1), 64)
	}
	if c.Shards > c.MaxEntries {
		c.Shards = c.MaxEntries
	}
	if c.CallbackTimeout <= 0 {
		c.CallbackTimeout = 5 * time.Second
	}
	if c.QueueTimeout <= 0 {
		c.QueueTimeout = c.CallbackTimeout
	}
	if c.JukeboxAfter <= 0 {
		c.JukeboxAfter = time.Second
	}
	if c.RecallBackoff <= 0 {
		c.RecallBackoff = 2 * time.Second
	}
	if c.PlainHold <= 0 {
		c.PlainHold = 60 * time.Second
	}
	if c.RelinquishIdle <= 0 {
		c.RelinquishIdle = 30 * time.Second
	}
	if c.VersionBlock == 0 {
		c.VersionBlock = 1 << 16
	}
	if c.ReclaimScan <= 0 {
		c.ReclaimScan = 8
	}
}

// HolderInfo is one client's record in a file's entry.
type HolderInfo struct {
	Client           ClientID
	Readers, Writers uint32 // protocol opens
	Caching          bool   // its last OPEN reply (or callback) allows it to cache
	Dirty            bool   // it may hold dirty blocks (the last writer)
	Fenced           bool   // its requests on the file are refused until it opens again
	Pinned           bool   // it answered Pinned: others' requests wait for its write-backs
	Plain            bool   // a plain access counts as an open until PlainUntil
	PlainWrite       bool   // ... and that access changed the file
	PlainUntil       time.Time
}

// FileInfo is a snapshot of one entry.
type FileInfo struct {
	State     State
	Version   uint64 // 0: none issued yet (the next OPEN gets a fresh one)
	Holders   []HolderInfo
	Waiting   int // parked requests
	Callbacks int // callbacks out
}

// LastWriter returns the client recorded as possibly holding dirty blocks.
func (f FileInfo) LastWriter() (ClientID, bool) {
	for _, h := range f.Holders {
		if h.Dirty {
			return h.Client, true
		}
	}
	return 0, false
}

// Stats are the machine's counters and a census of the table.
type Stats struct {
	Entries   int
	ByState   [numStates]int           // entries by state, at the time of the call
	Callbacks [numCallbackModes]uint64 // sent, by mode
	Outcomes  [numOutcomes]uint64      // callbacks ended, by outcome (Failed includes timeouts)
	Timeouts  uint64                   // callbacks that passed their deadline
	Fencings  uint64
	Probes    uint64
	Opens     uint64
	Closes    uint64
	Accesses  uint64 // plain accesses
	Waits     uint64 // requests parked
	Jukebox   uint64 // requests answered NFS3ERR_JUKEBOX
	Refused   uint64 // requests of fenced clients refused
	Abandoned uint64
	// TableFull counts OPENs refused (jukebox) because the table was full;
	// Unrecorded counts plain accesses let through without a record for the same
	// reason (each disables caching table-wide for PlainHold).
	TableFull        uint64
	Unrecorded       uint64
	ReclaimDrops     uint64 // entries dropped to make room
	ReclaimCallbacks uint64 // write-back and relinquish callbacks sent to make room
	FencesForgotten  uint64 // fence records dropped to make room
	Reservations     uint64 // version blocks requested
	// LateAnswers counts TreatAsClosed and Stale answers applied after their
	// callback had timed out.
	LateAnswers uint64
	Changes     uint64 // changes made outside the protocol to files in the table (Changed)
}
