package snfs1

import (
	"fmt"

	"snfs/nfs3"
	"snfs/xdr"
)

// LockType is locktype1: the type of a byte-range lock (docs/protocol.md,
// "LOCK").
type LockType uint32

// Lock types: shared (F_RDLCK) and exclusive (F_WRLCK).
const (
	LockRead  LockType = 1
	LockWrite LockType = 2
)

func (t LockType) String() string {
	switch t {
	case LockRead:
		return "READ"
	case LockWrite:
		return "WRITE"
	}
	return fmt.Sprintf("locktype1(%d)", uint32(t))
}

func decodeLockType(r *xdr.Reader) LockType {
	t := LockType(r.Uint32())
	if r.Err() == nil && t != LockRead && t != LockWrite {
		r.SetErr(fmt.Errorf("snfs1: lock type %d", t))
	}
	return t
}

// LockStat is lockstat1: the answer of LOCK and LOCKT when the request itself
// succeeded (Status OK).
type LockStat uint32

// Lock answers.
const (
	LockGranted LockStat = 0 // held (LOCKT: no conflict)
	LockDenied  LockStat = 1 // a conflicting lock is held: the holder follows
	// LockBlocked: the request waits; CB_GRANTED tells the client when it is
	// granted, unless the client cancels it (LOCKU with cancel).
	LockBlocked  LockStat = 2
	LockDeadlock LockStat = 3 // waiting would close a cycle of waiting owners
	LockGrace    LockStat = 4 // the server's grace period: only reclaims; try again
	LockNoLocks  LockStat = 5 // the client is at its bound of lock records; try again
)

func (s LockStat) String() string {
	switch s {
	case LockGranted:
		return "LOCK_GRANTED"
	case LockDenied:
		return "LOCK_DENIED"
	case LockBlocked:
		return "LOCK_BLOCKED"
	case LockDeadlock:
		return "LOCK_DEADLOCK"
	case LockGrace:
		return "LOCK_GRACE"
	case LockNoLocks:
		return "LOCK_NOLOCKS"
	}
	return fmt.Sprintf("lockstat1(%d)", uint32(s))
}

// LockHolder is lockholder1: the lock a denied request meets. Local is true
// when a process on the server machine holds it (on the backing file).
type LockHolder struct {
	Type   LockType
	Offset uint64
	Length uint64 // 0: to the end of the file
	Local  bool
}

func (h *LockHolder) encode(w *xdr.Writer) {
	w.Uint32(uint32(h.Type))
	w.Uint64(h.Offset)
	w.Uint64(h.Length)
	w.Bool(h.Local)
}

func (h *LockHolder) decode(r *xdr.Reader) {
	h.Type = decodeLockType(r)
	h.Offset = r.Uint64()
	h.Length = r.Uint64()
	h.Local = r.Bool()
}

// LockArgs is LOCK1args (docs/protocol.md, "LOCK"): a byte-range lock of
// (Offset, Length) (Length 0: to the end of the file) for the client's lock
// owner Owner (the FUSE lock owner). File aliases the request buffer when
// decoded.
type LockArgs struct {
	Client  ClientID
	File    nfs3.FH
	Owner   uint64
	Type    LockType
	Offset  uint64
	Length  uint64
	Block   bool // wait: answered LOCK_BLOCKED, granted by CB_GRANTED
	Reclaim bool // a lock held before the server restarted, sent again in its grace period
	// Delegate: the client asks for the file's lock delegation with this
	// lock (docs/protocol.md, "Lock delegation"): it sends it only with no
	// other lock request of the file in flight or waiting.
	Delegate bool
}

// Encode implements xdr.Encoder.
func (a *LockArgs) Encode(w *xdr.Writer) {
	w.Uint64(uint64(a.Client))
	w.Opaque(a.File)
	w.Uint64(a.Owner)
	w.Uint32(uint32(a.Type))
	w.Uint64(a.Offset)
	w.Uint64(a.Length)
	w.Bool(a.Block)
	w.Bool(a.Reclaim)
	w.Bool(a.Delegate)
}

// Decode implements xdr.Decoder.
func (a *LockArgs) Decode(r *xdr.Reader) error {
	a.Client = ClientID(r.Uint64())
	a.File = nfs3.DecodeFH(r)
	a.Owner = r.Uint64()
	a.Type = decodeLockType(r)
	a.Offset = r.Uint64()
	a.Length = r.Uint64()
	a.Block = r.Bool()
	a.Reclaim = r.Bool()
	a.Delegate = r.Bool()
	return r.Err()
}

// LockRes is LOCK1res and LOCKT1res: on OK, the lock's answer, with the
// holder when it is LOCK_DENIED.
type LockRes struct {
	Status Status
	Stat   LockStat   // when OK
	Holder LockHolder // when OK and LOCK_DENIED
	// Delegated, when OK and LOCK_GRANTED: the client may serve this file's
	// locks itself until CB_CALLBACK with CB_RECALL_LOCKS (docs/protocol.md,
	// "Lock delegation"). Always FALSE from LOCKT.
	Delegated bool
}

// SetStatus sets the status of a failure result.
func (x *LockRes) SetStatus(s Status) { x.Status = s }

// Encode implements xdr.Encoder.
func (x *LockRes) Encode(w *xdr.Writer) {
	w.Uint32(uint32(x.Status))
	if x.Status == 0 {
		w.Uint32(uint32(x.Stat))
		switch x.Stat {
		case LockDenied:
			x.Holder.encode(w)
		case LockGranted:
			w.Bool(x.Delegated)
		}
	}
}

// Decode implements xdr.Decoder.
func (x *LockRes) Decode(r *xdr.Reader) error {
	if x.Status = decodeStatus(r); x.Status == 0 {
		x.Stat = LockStat(r.Uint32())
		if r.Err() == nil && x.Stat > LockNoLocks {
			r.SetErr(fmt.Errorf("snfs1: lock status %d", x.Stat))
		}
		switch x.Stat {
		case LockDenied:
			x.Holder.decode(r)
		case LockGranted:
			x.Delegated = r.Bool()
		}
	}
	return r.Err()
}

// LockTArgs is LOCKT1args (docs/protocol.md, "LOCKT"): would LOCK of this
// lock be granted now? File aliases the request buffer when decoded.
type LockTArgs struct {
	Client ClientID
	File   nfs3.FH
	Owner  uint64
	Type   LockType
	Offset uint64
	Length uint64
}

// Encode implements xdr.Encoder.
func (a *LockTArgs) Encode(w *xdr.Writer) {
	w.Uint64(uint64(a.Client))
	w.Opaque(a.File)
	w.Uint64(a.Owner)
	w.Uint32(uint32(a.Type))
	w.Uint64(a.Offset)
	w.Uint64(a.Length)
}

// Decode implements xdr.Decoder.
func (a *LockTArgs) Decode(r *xdr.Reader) error {
	a.Client = ClientID(r.Uint64())
	a.File = nfs3.DecodeFH(r)
	a.Owner = r.Uint64()
	a.Type = decodeLockType(r)
	a.Offset = r.Uint64()
	a.Length = r.Uint64()
	return r.Err()
}

// LockUArgs is LOCKU1args (docs/protocol.md, "LOCKU"): release the owner's
// locks on (Offset, Length), or, with Cancel, withdraw its waiting request
// of exactly that Type and range (nothing the owner holds changes).
type LockUArgs struct {
	Client ClientID
	File   nfs3.FH
	Owner  uint64
	Offset uint64
	Length uint64
	Cancel bool
	Type   LockType // the waiting request's type, with Cancel
}

// Encode implements xdr.Encoder.
func (a *LockUArgs) Encode(w *xdr.Writer) {
	w.Uint64(uint64(a.Client))
	w.Opaque(a.File)
	w.Uint64(a.Owner)
	w.Uint64(a.Offset)
	w.Uint64(a.Length)
	w.Bool(a.Cancel)
	if a.Cancel {
		w.Uint32(uint32(a.Type))
	}
}

// Decode implements xdr.Decoder.
func (a *LockUArgs) Decode(r *xdr.Reader) error {
	a.Client = ClientID(r.Uint64())
	a.File = nfs3.DecodeFH(r)
	a.Owner = r.Uint64()
	a.Offset = r.Uint64()
	a.Length = r.Uint64()
	a.Cancel = r.Bool()
	a.Type = 0
	if a.Cancel {
		a.Type = decodeLockType(r)
	}
	return r.Err()
}

// GrantedArgs is CB_GRANTED1args (docs/protocol.md, "CB_GRANTED"): the
// client's blocked LOCK of this lock is granted. File is copied when decoded.
type GrantedArgs struct {
	File   nfs3.FH
	Owner  uint64
	Type   LockType
	Offset uint64
	Length uint64
}

// Encode implements xdr.Encoder.
func (a *GrantedArgs) Encode(w *xdr.Writer) {
	w.Opaque(a.File)
	w.Uint64(a.Owner)
	w.Uint32(uint32(a.Type))
	w.Uint64(a.Offset)
	w.Uint64(a.Length)
}

// Decode implements xdr.Decoder.
func (a *GrantedArgs) Decode(r *xdr.Reader) error {
	a.File = append(nfs3.FH(nil), nfs3.DecodeFH(r)...)
	a.Owner = r.Uint64()
	a.Type = decodeLockType(r)
	a.Offset = r.Uint64()
	a.Length = r.Uint64()
	return r.Err()
}

// GrantedStat is grantedstat1: the client's answer to CB_GRANTED.
type GrantedStat uint32

// CB_GRANTED answers.
const (
	// GrantedOK: the waiting process has the lock.
	GrantedOK GrantedStat = 0
	// GrantedUnwanted: nobody waits for it any more (the process was
	// interrupted or died): the server takes the grant back.
	GrantedUnwanted GrantedStat = 1
)

// GrantedRes is CB_GRANTED1res.
type GrantedRes struct{ Status GrantedStat }

// Encode implements xdr.Encoder.
func (x *GrantedRes) Encode(w *xdr.Writer) { w.Uint32(uint32(x.Status)) }

// Decode implements xdr.Decoder.
func (x *GrantedRes) Decode(r *xdr.Reader) error {
	x.Status = GrantedStat(r.Uint32())
	if r.Err() == nil && x.Status > GrantedUnwanted {
		r.SetErr(fmt.Errorf("snfs1: granted status %d", x.Status))
	}
	return r.Err()
}
