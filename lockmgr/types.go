package lockmgr

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// FileKey names a file: an opaque key the driver derives from the file handle
// (the handle's bytes as a string will do). The machine never interprets it.
type FileKey string

// ClientID names a client: an NLM host (its caller_name or address, interned by
// the driver), an snfs mount's registration, or the server itself. Everything
// a client holds goes at once with ClientGone.
type ClientID uint64

// Owner is a lock owner: locks of the same owner never conflict with each other
// and replace each other (POSIX semantics). ID is opaque bytes the driver packs:
// NLMOwner for NLM, the lock owner id for the snfs protocol, a per open file
// description id for flock.
type Owner struct {
	Client ClientID
	ID     string
}

// NLMOwner is the owner of an NLM lock: the client host, the process id
// (svid) and the owner handle (oh) of its nlm4_lock.
func NLMOwner(c ClientID, svid uint32, oh []byte) Owner {
	b := make([]byte, 4, 4+len(oh))
	binary.BigEndian.PutUint32(b, svid)
	return Owner{Client: c, ID: string(append(b, oh...))}
}

func (o Owner) String() string { return fmt.Sprintf("%d/%x", o.Client, o.ID) }

func (o Owner) less(p Owner) bool {
	if o.Client != p.Client {
		return o.Client < p.Client
	}
	return o.ID < p.ID
}

// ReqID names a lock request. The driver gives every LOCK a ReqID unique among
// the machine's live requests (waiting, acquiring the backing lock, or granted
// with its callback out); actions about the request carry it.
type ReqID uint64

// LockType is the type of a lock, or Unlocked for the backing file's releases.
type LockType uint8

// Lock types. Read is shared (F_RDLCK, NLM exclusive = FALSE), Write is
// exclusive (F_WRLCK, exclusive = TRUE).
const (
	Unlocked LockType = iota
	Read
	Write
)

func (t LockType) String() string {
	switch t {
	case Unlocked:
		return "unlocked"
	case Read:
		return "read"
	case Write:
		return "write"
	}
	return fmt.Sprintf("LockType(%d)", uint8(t))
}

// ToEnd is the End of a range that runs to the end of the file (and past it).
const ToEnd = math.MaxUint64

// Range is a byte range [Start, End], End inclusive, so that every range of
// the 64-bit offset space is representable: End == ToEnd runs to the end of
// the file.
type Range struct {
	Start, End uint64
}

// RangeOf is the range of an NLM4 or fcntl (offset, length) pair: length 0
// means to the end of the file; so does a length that would run past the last
// offset, 2^64-1 (there is no byte beyond it, so the two ranges are the same
// set of bytes).
func RangeOf(offset, length uint64) Range {
	if length == 0 || length-1 > ToEnd-offset {
		return Range{offset, ToEnd}
	}
	return Range{offset, offset + length - 1}
}

// Whole is the range of the whole file: flock's.
var Whole = Range{0, ToEnd}

// Offset and Length are the range as an NLM4 or fcntl pair (Length 0: to the end).
func (r Range) Offset() uint64 { return r.Start }

// Length is the range's length, 0 when it runs to the end of the file.
func (r Range) Length() uint64 {
	if r.End == ToEnd {
		return 0
	}
	return r.End - r.Start + 1
}

func (r Range) String() string {
	if r.End == ToEnd {
		return fmt.Sprintf("[%d,∞)", r.Start)
	}
	return fmt.Sprintf("[%d,%d]", r.Start, r.End)
}

func (r Range) valid() bool { return r.Start <= r.End }

func (r Range) overlaps(s Range) bool { return r.Start <= s.End && s.Start <= r.End }

// adjacent reports whether s starts right after r ends.
func (r Range) adjacent(s Range) bool { return r.End != ToEnd && r.End+1 == s.Start }

// Lock is a held lock: what TEST reports as the holder and ActGranted carries.
type Lock struct {
	Owner Owner
	Type  LockType
	Range Range
}

func (l Lock) String() string { return fmt.Sprintf("%v %v %v", l.Owner, l.Type, l.Range) }

// Verdict is the machine's answer to a request.
type Verdict uint8

// Verdicts, with the NLM4 status each maps to.
const (
	// Granted: the lock is held (NLM4_GRANTED); for Test, no conflict.
	Granted Verdict = iota
	// Acquiring: granted here, but the backing file must take it too: carry
	// out the ActBacking with the request's Req and report BackingDone, whose
	// Result is the answer.
	Acquiring
	// Denied: a conflicting lock (Result.Holder), or a local process on the
	// server (Result.Local) (NLM4_DENIED).
	Denied
	// Blocked: queued; ActGranted with Result.Req follows (NLM4_BLOCKED).
	Blocked
	// Deadlock: waiting would close a cycle of owners waiting for each other
	// (NLM4_DEADLCK).
	Deadlock
	// NoLocks: the client is at its bound of lock records
	// (NLM4_DENIED_NOLOCKS, NFS3ERR_JUKEBOX in the snfs protocol).
	NoLocks
	// Grace: the server is in its grace period and this is not a reclaim
	// (NLM4_DENIED_GRACE_PERIOD).
	Grace
)

func (v Verdict) String() string {
	return [...]string{"granted", "acquiring", "denied", "blocked", "deadlock", "nolocks", "grace", "?"}[min(v, Grace+1)]
}

// Result is the answer to Lock, Test and BackingDone.
type Result struct {
	Verdict Verdict
	// Holder is, for Denied, the first conflicting lock (lowest start, then
	// owner order): a held lock, or if none is held, the earlier waiting
	// request the fairness rule makes this one wait for.
	Holder Lock
	// Local: Denied because the backing file refused the lock (a local
	// process holds a conflicting one); Holder is zero.
	Local bool
	// Req is, for Blocked, the request that waits: an earlier identical one
	// when this request is a retransmission of it.
	Req ReqID
}

// LockArgs is a lock request (NLM4 LOCK, snfs LOCK, a FUSE SETLK or flock).
type LockArgs struct {
	Req     ReqID
	File    FileKey
	Owner   Owner
	Type    LockType // Read or Write
	Range   Range
	Block   bool // wait for the lock (NLM block = TRUE, F_SETLKW)
	Reclaim bool // a reclaim after a server restart (NLM reclaim = TRUE)
}

// CancelArgs names a waiting request as NLM4 CANCEL does: by its lock.
type CancelArgs struct {
	File  FileKey
	Owner Owner
	Type  LockType
	Range Range
}

// ShareMode is an NLM4 share reservation's deny mode (fsh4_mode).
type ShareMode uint8

// Deny modes.
const (
	DenyNone  ShareMode = 0 // fsm_DN
	DenyRead  ShareMode = 1 // fsm_DR
	DenyWrite ShareMode = 2 // fsm_DW
	DenyBoth  ShareMode = 3 // fsm_DRW
)

// ShareAccess is an NLM4 share reservation's access (fsh4_access).
type ShareAccess uint8

// Accesses.
const (
	AccessNone  ShareAccess = 0 // fsa_NONE
	AccessRead  ShareAccess = 1 // fsa_R
	AccessWrite ShareAccess = 2 // fsa_W
	AccessBoth  ShareAccess = 3 // fsa_RW
)

// ShareArgs is an NLM4 SHARE: a DOS-style share reservation of a file.
type ShareArgs struct {
	File    FileKey
	Owner   Owner // the client and the oh; NLM shares have no svid
	Mode    ShareMode
	Access  ShareAccess
	Reclaim bool
}

// ActionKind is what an action asks of the driver.
type ActionKind uint8

// Action kinds.
const (
	// ActBacking: set Owner's lock on File's backing file over Range to Type
	// (F_OFD_SETLK on the owner's own open file description of the file;
	// Unlocked releases). With Acquire, the call may be refused: report
	// BackingDone(Req, ok) at once. Without, it only lowers locks the
	// description holds and cannot conflict. Last: the owner holds nothing of
	// the file any more; its description may be closed.
	ActBacking ActionKind = iota + 1
	// ActGranted: the blocked request Req is granted (Owner, Type, Range on
	// File): send the NLM GRANTED or snfs callback and report GrantDone.
	ActGranted
)

func (k ActionKind) String() string {
	switch k {
	case ActBacking:
		return "backing"
	case ActGranted:
		return "granted"
	}
	return fmt.Sprintf("ActionKind(%d)", uint8(k))
}

// Action is one thing for the driver to carry out, in the order returned.
type Action struct {
	Kind    ActionKind
	Req     ReqID
	File    FileKey
	Owner   Owner
	Type    LockType
	Range   Range
	Acquire bool
	Last    bool
}

func (a Action) String() string {
	s := fmt.Sprintf("%v req=%d %q %v %v %v", a.Kind, a.Req, a.File, a.Owner, a.Type, a.Range)
	if a.Acquire {
		s += " acquire"
	}
	if a.Last {
		s += " last"
	}
	return s
}

// Config bounds and times the machine.
type Config struct {
	// MaxPerClient bounds a client's lock records (a merged range of one
	// owner on one file counts one), waiting requests (two each: the most a
	// grant can add) and share reservations together. Default 4096.
	MaxPerClient int
	// LocalRetry is how long a waiter the backing file refused (a local
	// process holds the lock) waits before Tick tries it again. Default 1s.
	LocalRetry time.Duration
	// Grace is the grace period New starts with (0: none).
	Grace time.Duration
}

func (c *Config) defaults() {
	if c.MaxPerClient <= 0 {
		c.MaxPerClient = 4096
	}
	if c.LocalRetry <= 0 {
		c.LocalRetry = time.Second
	}
}
