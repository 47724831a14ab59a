package nfs3

import (
	"fmt"

	"snfs/xdr"
)

// Program number, version and sizes (RFC 1813 section 2.4).
const (
	Program = 100003
	Version = 3

	FHSize         = 64
	CookieVerfSize = 8
	CreateVerfSize = 8
	WriteVerfSize  = 8

	MaxPath    = 4096  // bound on filename3/nfspath3 while decoding
	MaxName    = 255   // longest name the server accepts
	MaxEntries = 65536 // bound on entries in one decoded READDIR reply
	MaxData    = 1 << 20
)

// Procedure numbers (section 3.3).
const (
	ProcNull = iota
	ProcGetattr
	ProcSetattr
	ProcLookup
	ProcAccess
	ProcReadlink
	ProcRead
	ProcWrite
	ProcCreate
	ProcMkdir
	ProcSymlink
	ProcMknod
	ProcRemove
	ProcRmdir
	ProcRename
	ProcLink
	ProcReaddir
	ProcReaddirplus
	ProcFsstat
	ProcFsinfo
	ProcPathconf
	ProcCommit
	NumProcs
)

// ProcNames are the procedure names as in the RFC, indexed by number.
var ProcNames = [NumProcs]string{"NULL", "GETATTR", "SETATTR", "LOOKUP", "ACCESS", "READLINK", "READ",
	"WRITE", "CREATE", "MKDIR", "SYMLINK", "MKNOD", "REMOVE", "RMDIR", "RENAME", "LINK", "READDIR",
	"READDIRPLUS", "FSSTAT", "FSINFO", "PATHCONF", "COMMIT"}

// Status is nfsstat3 (section 2.6). It is an error on the client side.
type Status uint32

// nfsstat3 values.
const (
	OK             Status = 0
	ErrPerm        Status = 1
	ErrNoEnt       Status = 2
	ErrIO          Status = 5
	ErrNXIO        Status = 6
	ErrAcces       Status = 13
	ErrExist       Status = 17
	ErrXDev        Status = 18
	ErrNoDev       Status = 19
	ErrNotDir      Status = 20
	ErrIsDir       Status = 21
	ErrInval       Status = 22
	ErrFBig        Status = 27
	ErrNoSpc       Status = 28
	ErrROFS        Status = 30
	ErrMLink       Status = 31
	ErrNameTooLong Status = 63
	ErrNotEmpty    Status = 66
	ErrDQuot       Status = 69
	ErrStale       Status = 70
	ErrRemote      Status = 71
	ErrBadHandle   Status = 10001
	ErrNotSync     Status = 10002
	ErrBadCookie   Status = 10003
	ErrNotSupp     Status = 10004
	ErrTooSmall    Status = 10005
	ErrServerFault Status = 10006
	ErrBadType     Status = 10007
	ErrJukebox     Status = 10008
)

var statusNames = map[Status]string{OK: "NFS3_OK", ErrPerm: "NFS3ERR_PERM", ErrNoEnt: "NFS3ERR_NOENT",
	ErrIO: "NFS3ERR_IO", ErrNXIO: "NFS3ERR_NXIO", ErrAcces: "NFS3ERR_ACCES", ErrExist: "NFS3ERR_EXIST",
	ErrXDev: "NFS3ERR_XDEV", ErrNoDev: "NFS3ERR_NODEV", ErrNotDir: "NFS3ERR_NOTDIR", ErrIsDir: "NFS3ERR_ISDIR",
	ErrInval: "NFS3ERR_INVAL", ErrFBig: "NFS3ERR_FBIG", ErrNoSpc: "NFS3ERR_NOSPC", ErrROFS: "NFS3ERR_ROFS",
	ErrMLink: "NFS3ERR_MLINK", ErrNameTooLong: "NFS3ERR_NAMETOOLONG", ErrNotEmpty: "NFS3ERR_NOTEMPTY",
	ErrDQuot: "NFS3ERR_DQUOT", ErrStale: "NFS3ERR_STALE", ErrRemote: "NFS3ERR_REMOTE",
	ErrBadHandle: "NFS3ERR_BADHANDLE", ErrNotSync: "NFS3ERR_NOT_SYNC", ErrBadCookie: "NFS3ERR_BAD_COOKIE",
	ErrNotSupp: "NFS3ERR_NOTSUPP", ErrTooSmall: "NFS3ERR_TOOSMALL", ErrServerFault: "NFS3ERR_SERVERFAULT",
	ErrBadType: "NFS3ERR_BADTYPE", ErrJukebox: "NFS3ERR_JUKEBOX"}

func (s Status) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("nfsstat3(%d)", uint32(s))
}

func (s Status) Error() string { return s.String() }

// Err returns nil for OK and the status as an error otherwise.
func (s Status) Err() error {
	if s == OK {
		return nil
	}
	return s
}

// FType is ftype3.
type FType uint32

// ftype3 values.
const (
	TypeReg  FType = 1
	TypeDir  FType = 2
	TypeBlk  FType = 3
	TypeChr  FType = 4
	TypeLnk  FType = 5
	TypeSock FType = 6
	TypeFifo FType = 7
)

// SpecData is specdata3.
type SpecData struct{ Major, Minor uint32 }

// FH is nfs_fh3: an opaque handle of at most FHSize bytes.
type FH []byte

// Encode implements xdr.Encoder.
func (f FH) Encode(w *xdr.Writer) { w.Opaque(f) }

// Result is the result of a procedure other than NULL (GETATTR3res, ...). Every
// result starts with its nfsstat3, and a failed one carries only what its resfail
// arm holds: a result whose status is set to an error and whose other fields are
// zero is that procedure's answer for a call that failed before touching any object.
type Result interface {
	xdr.Encoder
	xdr.Decoder
	SetStatus(Status)
}

// DecodeFH decodes an nfs_fh3; the result aliases the reader's buffer.
func DecodeFH(r *xdr.Reader) FH { return FH(r.Opaque(FHSize)) }

// PeekFH returns the nfs_fh3 that encoded arguments start with (every procedure's
// but NULL's do), aliasing b, without decoding the rest: ok is false when no handle
// decodes there. It is DecodeFH on a reader of its own.
func PeekFH(b []byte) (fh FH, ok bool) {
	var r xdr.Reader
	r.Reset(b)
	fh = DecodeFH(&r)
	return fh, r.Err() == nil
}

// Time is nfstime3.
type Time struct{ Sec, Nsec uint32 }

func (t Time) encode(w *xdr.Writer) { w.Uint32(t.Sec); w.Uint32(t.Nsec) }
func decodeTime(r *xdr.Reader) Time { return Time{r.Uint32(), r.Uint32()} }

// Fattr is fattr3.
type Fattr struct {
	Type   FType
	Mode   uint32
	Nlink  uint32
	UID    uint32
	GID    uint32
	Size   uint64
	Used   uint64
	Rdev   SpecData
	FSID   uint64
	FileID uint64
	Atime  Time
	Mtime  Time
	Ctime  Time
}

// Encode implements xdr.Encoder.
func (a *Fattr) Encode(w *xdr.Writer) {
	w.Uint32(uint32(a.Type))
	w.Uint32(a.Mode)
	w.Uint32(a.Nlink)
	w.Uint32(a.UID)
	w.Uint32(a.GID)
	w.Uint64(a.Size)
	w.Uint64(a.Used)
	w.Uint32(a.Rdev.Major)
	w.Uint32(a.Rdev.Minor)
	w.Uint64(a.FSID)
	w.Uint64(a.FileID)
	a.Atime.encode(w)
	a.Mtime.encode(w)
	a.Ctime.encode(w)
}

// Decode implements xdr.Decoder.
func (a *Fattr) Decode(r *xdr.Reader) error {
	a.Type = FType(r.Uint32())
	a.Mode, a.Nlink, a.UID, a.GID = r.Uint32(), r.Uint32(), r.Uint32(), r.Uint32()
	a.Size, a.Used = r.Uint64(), r.Uint64()
	a.Rdev = SpecData{r.Uint32(), r.Uint32()}
	a.FSID, a.FileID = r.Uint64(), r.Uint64()
	a.Atime, a.Mtime, a.Ctime = decodeTime(r), decodeTime(r), decodeTime(r)
	return r.Err()
}

// WccAttr is wcc_attr: the pre-operation attributes.
type WccAttr struct {
	Size  uint64
	Mtime Time
	Ctime Time
}

// WccData is wcc_data; nil pointers encode as "not present".
type WccData struct {
	Before *WccAttr
	After  *Fattr
}

// Encode implements xdr.Encoder.
func (d *WccData) Encode(w *xdr.Writer) {
	w.Bool(d.Before != nil)
	if d.Before != nil {
		w.Uint64(d.Before.Size)
		d.Before.Mtime.encode(w)
		d.Before.Ctime.encode(w)
	}
	EncodePostOpAttr(w, d.After)
}

// Decode implements xdr.Decoder.
func (d *WccData) Decode(r *xdr.Reader) error {
	d.Before = nil
	if r.Bool() {
		d.Before = &WccAttr{Size: r.Uint64(), Mtime: decodeTime(r), Ctime: decodeTime(r)}
	}
	d.After = DecodePostOpAttr(r)
	return r.Err()
}

// EncodePostOpAttr encodes post_op_attr; nil means no attributes.
func EncodePostOpAttr(w *xdr.Writer, a *Fattr) {
	w.Bool(a != nil)
	if a != nil {
		a.Encode(w)
	}
}

// DecodePostOpAttr decodes post_op_attr.
func DecodePostOpAttr(r *xdr.Reader) *Fattr {
	if !r.Bool() {
		return nil
	}
	a := new(Fattr)
	a.Decode(r)
	return a
}

// EncodePostOpFH encodes post_op_fh3; nil means no handle.
func EncodePostOpFH(w *xdr.Writer, fh FH) {
	w.Bool(fh != nil)
	if fh != nil {
		w.Opaque(fh)
	}
}

// DecodePostOpFH decodes post_op_fh3, copying the handle.
func DecodePostOpFH(r *xdr.Reader) FH {
	if !r.Bool() {
		return nil
	}
	return append(FH{}, DecodeFH(r)...)
}

// TimeHow is time_how.
type TimeHow uint32

// time_how values.
const (
	DontChange      TimeHow = 0
	SetToServerTime TimeHow = 1
	SetToClientTime TimeHow = 2
)

// SetTime is set_atime / set_mtime.
type SetTime struct {
	How  TimeHow
	Time Time // when How is SetToClientTime
}

// Sattr is sattr3; nil pointers are "don't set".
type Sattr struct {
	Mode  *uint32
	UID   *uint32
	GID   *uint32
	Size  *uint64
	Atime SetTime
	Mtime SetTime
}

func encodeOptU32(w *xdr.Writer, v *uint32) {
	w.Bool(v != nil)
	if v != nil {
		w.Uint32(*v)
	}
}

func decodeOptU32(r *xdr.Reader) *uint32 {
	if !r.Bool() {
		return nil
	}
	v := r.Uint32()
	return &v
}

// Encode implements xdr.Encoder.
func (s *Sattr) Encode(w *xdr.Writer) {
	encodeOptU32(w, s.Mode)
	encodeOptU32(w, s.UID)
	encodeOptU32(w, s.GID)
	w.Bool(s.Size != nil)
	if s.Size != nil {
		w.Uint64(*s.Size)
	}
	for _, t := range []SetTime{s.Atime, s.Mtime} {
		w.Uint32(uint32(t.How))
		if t.How == SetToClientTime {
			t.Time.encode(w)
		}
	}
}

// Decode implements xdr.Decoder.
func (s *Sattr) Decode(r *xdr.Reader) error {
	s.Mode, s.UID, s.GID = decodeOptU32(r), decodeOptU32(r), decodeOptU32(r)
	s.Size = nil
	if r.Bool() {
		v := r.Uint64()
		s.Size = &v
	}
	for _, t := range []*SetTime{&s.Atime, &s.Mtime} {
		t.How = TimeHow(r.Enum(3))
		t.Time = Time{}
		if t.How == SetToClientTime {
			t.Time = decodeTime(r)
		}
	}
	return r.Err()
}

// DirOpArgs is diropargs3.
type DirOpArgs struct {
	Dir  FH
	Name string
}

// Encode implements xdr.Encoder.
func (d *DirOpArgs) Encode(w *xdr.Writer) { w.Opaque(d.Dir); w.String(d.Name) }

// Decode implements xdr.Decoder.
func (d *DirOpArgs) Decode(r *xdr.Reader) error {
	d.Dir = DecodeFH(r)
	d.Name = r.String(MaxPath)
	return r.Err()
}

// FHArgs is the argument of the procedures that take only a handle
// (GETATTR3args, READLINK3args, FSSTAT3args, FSINFO3args, PATHCONF3args).
type FHArgs struct{ FH FH }

// Encode implements xdr.Encoder.
func (a *FHArgs) Encode(w *xdr.Writer) { w.Opaque(a.FH) }

// Decode implements xdr.Decoder.
func (a *FHArgs) Decode(r *xdr.Reader) error { a.FH = DecodeFH(r); return r.Err() }

// decodeStatus reads a result's status.
func decodeStatus(r *xdr.Reader) Status { return Status(r.Uint32()) }
