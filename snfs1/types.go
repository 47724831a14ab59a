package snfs1

import (
	"fmt"

	"snfs/nfs3"
	"snfs/state"
	"snfs/xdr"
)

// Programs, versions and procedures (docs/protocol.md, "Programs").
const (
	Program   = 0x20534E46 // SNFS_PROGRAM: " SNF"
	Version   = 1
	CBProgram = 0x20534E43 // SNFS_CB_PROGRAM: " SNC"
	CBVersion = 1

	ProcNull     = 0
	ProcRegister = 1
	ProcOpen     = 2
	ProcOpenName = 3
	ProcClose    = 4
	// RECLAIM, RECLAIM_DONE and UNREGISTER: crash recovery (docs/protocol.md,
	// "Grace period").
	ProcReclaim     = 5
	ProcReclaimDone = 6
	ProcUnregister  = 7
	// APPEND: a write placed by the server at its end of file
	// (docs/protocol.md, "APPEND").
	ProcAppend = 8
	// GETXATTR, SETXATTR, LISTXATTRS, REMOVEXATTR: extended attributes of
	// the user namespace, RFC 8276's (docs/protocol.md, "GETXATTR").
	ProcGetXattr    = 9
	ProcSetXattr    = 10
	ProcListXattrs  = 11
	ProcRemoveXattr = 12
	// ALLOCATE: fallocate(2) on the server's file, so that space is
	// reserved there (docs/protocol.md, "ALLOCATE").
	ProcAllocate = 13
	// LOCK, LOCKT and LOCKU: byte-range locks (docs/protocol.md, "LOCK").
	ProcLock  = 14
	ProcLockT = 15
	ProcLockU = 16
	// LISTDIR and DIR_RELEASE: directory promises (docs/protocol.md,
	// "Directory promises"), an extension of version 1: a server without
	// them answers PROC_UNAVAIL.
	ProcListDir    = 17
	ProcDirRelease = 18
	// GET_PERMIT, PERMIT_RELEASE and REINTEGRATE: write-back permits and
	// the client modification log (docs/protocol.md, "Write-back
	// permits"), an extension of version 1 like LISTDIR.
	ProcGetPermit     = 19
	ProcPermitRelease = 20
	ProcReintegrate   = 21
	// CREATE_OPEN: CREATE and OPEN_WRITE of the new file in one round trip
	// (docs/protocol.md, "CREATE_OPEN"), an extension of version 1 like
	// LISTDIR: a server without it answers PROC_UNAVAIL.
	ProcCreateOpen = 22
	// RECLAIM_PERMIT: a write-back permit held before a restart, granted
	// again in the grace period (docs/protocol.md, "RECLAIM_PERMIT"), an
	// extension of version 1 like LISTDIR: a server without it answers
	// PROC_UNAVAIL.
	ProcReclaimPermit = 23
	NumProcs          = 24

	CBProcNull     = 0
	CBProcCallback = 1
	CBProcGranted  = 2 // a blocked LOCK is granted (docs/protocol.md, "CB_GRANTED")
	NumCBProcs     = 3

	NameLen  = 256 // longest client name
	VerfSize = 8   // verifier8
	// ReclaimMax is SNFS_RECLAIM_MAX: the most items one RECLAIM carries.
	ReclaimMax = 1024
)

// ProcNames and CBProcNames are the procedure names, indexed by number.
var (
	ProcNames = [NumProcs]string{"NULL", "REGISTER", "OPEN", "OPEN_NAME", "CLOSE", "RECLAIM", "RECLAIM_DONE", "UNREGISTER", "APPEND",
		"GETXATTR", "SETXATTR", "LISTXATTRS", "REMOVEXATTR", "ALLOCATE",
		ProcLock: "LOCK", ProcLockT: "LOCKT", ProcLockU: "LOCKU",
		ProcListDir: "LISTDIR", ProcDirRelease: "DIR_RELEASE",
		ProcGetPermit: "GET_PERMIT", ProcPermitRelease: "PERMIT_RELEASE", ProcReintegrate: "REINTEGRATE",
		ProcCreateOpen: "CREATE_OPEN", ProcReclaimPermit: "RECLAIM_PERMIT"}
	CBProcNames = [NumCBProcs]string{"CB_NULL", "CB_CALLBACK", "CB_GRANTED"}
)

// Status is snfsstat1: nfsstat3's values, plus two of this protocol's own.
type Status = nfs3.Status

// This protocol's own statuses (docs/protocol.md, "Errors"). They are also
// returned in NFSv3 replies, but only to clients of this protocol.
const (
	// ErrStaleClientID: the client id is not (or no longer) registered: the server
	// restarted, or the client registered again with a new boot verifier.
	// REGISTER again.
	ErrStaleClientID Status = 10100
	// ErrFenced: the client did not answer a callback on this file in time; the
	// server forgot its opens and cached state of the file. Every request on the
	// file fails so until the client OPENs it again.
	ErrFenced Status = 10101
	// ErrNoGrace: a RECLAIM outside the server's grace period, or from a client
	// the server did not know before it restarted: nothing was reclaimed, and
	// every item must be treated as fenced.
	ErrNoGrace Status = 10102
	// ErrNoPermit: a REINTEGRATE record touches a directory the client holds
	// no write-back permit on (never had one, released it, or lost it to a
	// recall it did not answer in time): that record and the ones after it
	// are not applied (docs/protocol.md, "REINTEGRATE").
	ErrNoPermit Status = 10103
)

// StatusName names a Status, this protocol's own included.
func StatusName(s Status) string {
	switch s {
	case ErrStaleClientID:
		return "SNFS_ERR_STALE_CLIENTID"
	case ErrFenced:
		return "SNFS_ERR_FENCED"
	case ErrNoGrace:
		return "SNFS_ERR_NOGRACE"
	case ErrNoPermit:
		return "SNFS_ERR_NOPERMIT"
	case ErrNoXattr:
		return "SNFS_ERR_NOXATTR"
	case ErrXattr2Big:
		return "SNFS_ERR_XATTR2BIG"
	}
	return s.String()
}

// ClientID is clientid1: the server's name for a registration.
type ClientID uint64

// Verifier is verifier8.
type Verifier [VerfSize]byte

func (v *Verifier) decode(r *xdr.Reader) { copy(v[:], r.FixedOpaque(VerfSize)) }

// The protocol's openmode1, cbmode1 and cbstat1 are state's Mode,
// CallbackMode and Outcome: state owns the vocabulary (what a mode asks, what
// an answer means), this package encodes it. Their values are the wire
// values; the decoders below refuse any other.

// decodeMode decodes an openmode1 (state.Read or state.Write). It checks
// the 32-bit value before narrowing it, so a value out of range cannot wrap
// onto a valid one.
func decodeMode(r *xdr.Reader) state.Mode {
	m := r.Uint32()
	if r.Err() == nil && m != uint32(state.Read) && m != uint32(state.Write) {
		r.SetErr(fmt.Errorf("snfs1: open mode %d", m))
	}
	return state.Mode(m)
}

// decodeCallbackMode decodes a cbmode1 (state.Writeback to state.RecallPermit).
func decodeCallbackMode(r *xdr.Reader) state.CallbackMode {
	m := r.Uint32()
	if r.Err() == nil && (m < uint32(state.Writeback) || m > uint32(state.RecallPermit)) {
		r.SetErr(fmt.Errorf("snfs1: callback mode %d", m))
	}
	return state.CallbackMode(m)
}

// decodeAnswer decodes a cbstat1: a client's answer, state.OK to
// state.MaxAnswer (state.Failed is the server's own verdict, never sent).
func decodeAnswer(r *xdr.Reader) state.Outcome {
	s := r.Uint32()
	if r.Err() == nil && s > uint32(state.MaxAnswer) {
		r.SetErr(fmt.Errorf("snfs1: callback status %d", s))
	}
	return state.Outcome(s)
}

func decodeStatus(r *xdr.Reader) Status { return Status(r.Uint32()) }
