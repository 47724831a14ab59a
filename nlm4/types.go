package nlm4

import (
	"fmt"

	"snfs/nfs3"
	"snfs/xdr"
)

// Program, version and bounds (RFC 1813 Appendix II; XNFS chapter 10).
const (
	Program = 100021
	Version = 4

	// MaxStrLen is LM_MAXSTRLEN: the longest caller_name and nlm4_notify name.
	// (rpcsvc/nlm_prot.x declares the v4 names <MAXNAMELEN>, one more, for a C
	// terminator; XNFS and Linux's lockd decode them against LM_MAXSTRLEN.)
	MaxStrLen = 1024
	// MaxNetobj is MAXNETOBJ_SZ: the longest netobj (owner handles, cookies).
	MaxNetobj = 1024
	// MaxCookieSent is the longest cookie to put in a call (GRANTED to a
	// client): Linux's lockd refuses cookies longer than its NLM_MAXCOOKIELEN
	// (fs/lockd/xdr4.c, clnt4xdr.c), and reads an empty one as four zeros.
	MaxCookieSent = 32
	// MaxFH is the longest file handle in an nlm4_lock or nlm4_share: the
	// netobj carries an nfs_fh3.
	MaxFH = nfs3.FHSize
)

// Procedure numbers (RFC 1813 Appendix II; XNFS chapter 10). 16 to 19 are not
// NLM v4 procedures.
const (
	ProcNull       = 0
	ProcTest       = 1
	ProcLock       = 2
	ProcCancel     = 3
	ProcUnlock     = 4
	ProcGranted    = 5
	ProcTestMsg    = 6
	ProcLockMsg    = 7
	ProcCancelMsg  = 8
	ProcUnlockMsg  = 9
	ProcGrantedMsg = 10
	ProcTestRes    = 11
	ProcLockRes    = 12
	ProcCancelRes  = 13
	ProcUnlockRes  = 14
	ProcGrantedRes = 15
	ProcShare      = 20
	ProcUnshare    = 21
	ProcNMLock     = 22
	ProcFreeAll    = 23
	NumProcs       = 24

	// ProcNSMNotify is not an NLM v4 procedure but Linux's private 16
	// (NLMPROC_NSM_NOTIFY, include/linux/lockd/nlm.h): the procedure its lockd
	// names in SM_MON's my_id (with version 3), which a status monitor calls
	// with an nsm.Status when a monitored host restarts.
	ProcNSMNotify = 16
)

// ProcNames are the procedure names as in the XDR, indexed by number; the
// numbers that are not procedures have no name.
var ProcNames = [NumProcs]string{"NULL", "TEST", "LOCK", "CANCEL", "UNLOCK", "GRANTED",
	"TEST_MSG", "LOCK_MSG", "CANCEL_MSG", "UNLOCK_MSG", "GRANTED_MSG",
	"TEST_RES", "LOCK_RES", "CANCEL_RES", "UNLOCK_RES", "GRANTED_RES",
	"", "", "", "", "SHARE", "UNSHARE", "NM_LOCK", "FREE_ALL"}

// Stat is nlm4_stats. It is an error on the client side.
type Stat uint32

// nlm4_stats values (XNFS chapter 10; 5 to 9 are new in version 4, RFC 1813
// Appendix II).
const (
	Granted           Stat = 0 // NLM4_GRANTED
	Denied            Stat = 1 // NLM4_DENIED: a conflicting lock is held
	DeniedNoLocks     Stat = 2 // NLM4_DENIED_NOLOCKS: no resources for the lock
	Blocked           Stat = 3 // NLM4_BLOCKED: queued; a GRANTED call will follow
	DeniedGracePeriod Stat = 4 // NLM4_DENIED_GRACE_PERIOD: only reclaims now
	Deadlock          Stat = 5 // NLM4_DEADLCK
	ROFS              Stat = 6 // NLM4_ROFS: a write lock on a read-only file system
	StaleFH           Stat = 7 // NLM4_STALE_FH
	FBig              Stat = 8 // NLM4_FBIG: offset or length out of range
	Failed            Stat = 9 // NLM4_FAILED: any other failure
	numStats               = 10
)

var statNames = [numStats]string{"NLM4_GRANTED", "NLM4_DENIED", "NLM4_DENIED_NOLOCKS",
	"NLM4_BLOCKED", "NLM4_DENIED_GRACE_PERIOD", "NLM4_DEADLCK", "NLM4_ROFS",
	"NLM4_STALE_FH", "NLM4_FBIG", "NLM4_FAILED"}

func (s Stat) String() string {
	if s < numStats {
		return statNames[s]
	}
	return fmt.Sprintf("nlm4_stats(%d)", uint32(s))
}

func (s Stat) Error() string { return s.String() }

// Err returns nil for Granted and the status as an error otherwise.
func (s Stat) Err() error {
	if s == Granted {
		return nil
	}
	return s
}

// decodeStat reads an nlm4_stats; values past NLM4_FAILED are errors (as
// Linux's client decodes them).
func decodeStat(r *xdr.Reader) Stat { return Stat(r.Enum(numStats)) }

// Result is the result of a procedure that has one (nlm4_testres, nlm4_res,
// nlm4_shareres): every one starts with the caller's cookie and carries a
// status, so a server can answer any procedure's failure (such as
// DeniedGracePeriod) without knowing its type.
type Result interface {
	xdr.Encoder
	xdr.Decoder
	SetStatus(Stat)
}

// Lock is nlm4_lock: who (CallerName, the client's host name, and the owner
// OH with the process-like Svid), which file (FH) and which range. A Len of 0
// means "to the end of the file and beyond". Offset and Len are unsigned on
// the wire in version 4; Linux's lockd takes a range whose last byte would
// lie past 2^63-1 as reaching to the end (fs/lockd/xdr4.c).
type Lock struct {
	CallerName string
	FH         nfs3.FH // at most MaxFH bytes
	OH         []byte  // at most MaxNetobj bytes
	Svid       int32
	Offset     uint64
	Len        uint64
}

// Encode implements xdr.Encoder.
func (l *Lock) Encode(w *xdr.Writer) {
	w.String(l.CallerName)
	w.Opaque(l.FH)
	w.Opaque(l.OH)
	w.Int32(l.Svid)
	w.Uint64(l.Offset)
	w.Uint64(l.Len)
}

// Decode implements xdr.Decoder.
func (l *Lock) Decode(r *xdr.Reader) error {
	l.CallerName = r.String(MaxStrLen)
	l.FH = nfs3.FH(r.Opaque(MaxFH))
	l.OH = r.Opaque(MaxNetobj)
	l.Svid = r.Int32()
	l.Offset = r.Uint64()
	l.Len = r.Uint64()
	return r.Err()
}

// Holder is nlm4_holder: the lock that a TEST found in the way.
type Holder struct {
	Exclusive bool
	Svid      int32
	OH        []byte // at most MaxNetobj bytes
	Offset    uint64
	Len       uint64
}

// Encode implements xdr.Encoder.
func (h *Holder) Encode(w *xdr.Writer) {
	w.Bool(h.Exclusive)
	w.Int32(h.Svid)
	w.Opaque(h.OH)
	w.Uint64(h.Offset)
	w.Uint64(h.Len)
}

// Decode implements xdr.Decoder.
func (h *Holder) Decode(r *xdr.Reader) error {
	h.Exclusive = r.Bool()
	h.Svid = r.Int32()
	h.OH = r.Opaque(MaxNetobj)
	h.Offset = r.Uint64()
	h.Len = r.Uint64()
	return r.Err()
}

// Res is nlm4_res: the result of LOCK, CANCEL, UNLOCK, GRANTED and NM_LOCK,
// and the argument of LOCK_RES, CANCEL_RES, UNLOCK_RES and GRANTED_RES. The
// cookie is the one of the call it answers.
type Res struct {
	Cookie []byte // at most MaxNetobj bytes
	Stat   Stat
}

// SetStatus implements Result.
func (x *Res) SetStatus(s Stat) { x.Stat = s }

// Encode implements xdr.Encoder.
func (x *Res) Encode(w *xdr.Writer) {
	w.Opaque(x.Cookie)
	w.Uint32(uint32(x.Stat))
}

// Decode implements xdr.Decoder.
func (x *Res) Decode(r *xdr.Reader) error {
	x.Cookie = r.Opaque(MaxNetobj)
	x.Stat = decodeStat(r)
	return r.Err()
}
