package snfs1

import (
	"fmt"

	"snfs/nfs3"
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
	NumProcs  = 17

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
		ProcLock: "LOCK", ProcLockT: "LOCKT", ProcLockU: "LOCKU"}
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

// OpenMode is openmode1.
type OpenMode uint32

// Open modes.
const (
	Read  OpenMode = 1
	Write OpenMode = 2
)

func (m OpenMode) String() string {
	switch m {
	case Read:
		return "READ"
	case Write:
		return "WRITE"
	}
	return fmt.Sprintf("openmode1(%d)", uint32(m))
}

func decodeMode(r *xdr.Reader) OpenMode {
	m := OpenMode(r.Uint32())
	if r.Err() == nil && m != Read && m != Write {
		r.SetErr(fmt.Errorf("snfs1: open mode %d", m))
	}
	return m
}

// CallbackMode is cbmode1: what a CALLBACK asks of the client.
type CallbackMode uint32

// Callback modes (the paper's SNFS_CBWRITE, SNFS_CBINVAL, SNFS_WRINVAL, and
// section 6.2's relinquish).
const (
	CBWriteback           CallbackMode = 1
	CBInvalidate          CallbackMode = 2
	CBWritebackInvalidate CallbackMode = 3
	CBRelinquish          CallbackMode = 4
	// CBRecallLocks: give back a lock delegation (docs/protocol.md, "Lock
	// delegation"): send the locks held locally as LOCKs, then answer.
	CBRecallLocks CallbackMode = 5
)

func (m CallbackMode) String() string {
	switch m {
	case CBWriteback:
		return "WRITEBACK"
	case CBInvalidate:
		return "INVALIDATE"
	case CBWritebackInvalidate:
		return "WRITEBACK_INVALIDATE"
	case CBRelinquish:
		return "RELINQUISH"
	case CBRecallLocks:
		return "RECALL_LOCKS"
	}
	return fmt.Sprintf("cbmode1(%d)", uint32(m))
}

// WritesBack reports whether the mode asks for dirty data to be written back.
func (m CallbackMode) WritesBack() bool { return m != CBInvalidate && m != CBRecallLocks }

// Invalidates reports whether the mode asks the client to drop its cached data
// and stop caching.
func (m CallbackMode) Invalidates() bool {
	return m == CBInvalidate || m == CBWritebackInvalidate
}

// CallbackStatus is cbstat1: the client's answer to a CALLBACK.
type CallbackStatus uint32

// Callback answers.
const (
	CBOK            CallbackStatus = 0 // done; the client keeps its opens
	CBTreatAsClosed CallbackStatus = 1 // done, and every open of the file is a delayed close
	CBStale         CallbackStatus = 2 // the client holds nothing of the file
	// CBPinned: done (dirty data written back), but the client's kernel
	// writes into its cache of the file itself while its write opens last:
	// it stays the file's dirty holder, and other clients' requests wait
	// for its write-backs (protocol.md, section 10.1).
	CBPinned CallbackStatus = 3
)

func (s CallbackStatus) String() string {
	switch s {
	case CBOK:
		return "CB_OK"
	case CBTreatAsClosed:
		return "CB_TREAT_AS_CLOSED"
	case CBStale:
		return "CB_STALE"
	case CBPinned:
		return "CB_PINNED"
	}
	return fmt.Sprintf("cbstat1(%d)", uint32(s))
}

func decodeStatus(r *xdr.Reader) Status { return Status(r.Uint32()) }
