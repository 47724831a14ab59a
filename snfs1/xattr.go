package snfs1

import (
	"snfs/nfs3"
	"snfs/xdr"
)

// Extended attributes (docs/protocol.md, "GETXATTR" to "REMOVEXATTR"): RFC
// 8276's four operations for the user namespace, with its limits.
const (
	// XattrNameMax is SNFS_XATTR_NAMEMAX: the longest attribute name, its
	// "user." prefix included (Linux's XATTR_NAME_MAX).
	XattrNameMax = 255
	// XattrSizeMax is SNFS_XATTR_SIZEMAX: the largest value (XATTR_SIZE_MAX).
	XattrSizeMax = 65536
	// XattrListMax is SNFS_XATTR_LISTMAX: the most name bytes (each name's
	// XDR encoding) one LISTXATTRS reply carries.
	XattrListMax = 65536
	// XattrPrefix is the one namespace served.
	XattrPrefix = "user."
)

// RFC 8276's statuses, with its numbers (NFS4ERR_NOXATTR, NFS4ERR_XATTR2BIG).
const (
	// ErrNoXattr: no attribute of that name (ENODATA).
	ErrNoXattr Status = 10095
	// ErrXattr2Big: the value is larger than the server's file system or
	// this protocol allows (E2BIG).
	ErrXattr2Big Status = 10096
)

// SetXattrOption is setxattr_option1 (RFC 8276's setxattr_option4).
type SetXattrOption uint32

// SETXATTR options.
const (
	XattrEither  SetXattrOption = 0 // create or replace
	XattrCreate  SetXattrOption = 1 // fail with EXIST if the name exists
	XattrReplace SetXattrOption = 2 // fail with NOXATTR if it does not
)

// XattrArgs is GETXATTR1args and REMOVEXATTR1args: a file and a name. When
// decoded, File aliases the request buffer.
type XattrArgs struct {
	File nfs3.FH
	Name string // at most XattrNameMax bytes
}

// The arguments that are a file and a name.
type (
	GetXattrArgs    = XattrArgs
	RemoveXattrArgs = XattrArgs
)

// Encode implements xdr.Encoder.
func (a *XattrArgs) Encode(w *xdr.Writer) {
	w.Opaque(a.File)
	w.String(a.Name)
}

// Decode implements xdr.Decoder.
func (a *XattrArgs) Decode(r *xdr.Reader) error {
	a.File = nfs3.DecodeFH(r)
	a.Name = r.String(XattrNameMax)
	return r.Err()
}

// GetXattrRes is GETXATTR1res: the value.
type GetXattrRes struct {
	Status Status
	Value  []byte // when OK; at most XattrSizeMax bytes
}

// SetStatus sets the status of a failure result.
func (x *GetXattrRes) SetStatus(s Status) { x.Status = s }

// Encode implements xdr.Encoder.
func (x *GetXattrRes) Encode(w *xdr.Writer) {
	w.Uint32(uint32(x.Status))
	if x.Status == 0 {
		w.Opaque(x.Value)
	}
}

// Decode implements xdr.Decoder.
func (x *GetXattrRes) Decode(r *xdr.Reader) error {
	if x.Status = decodeStatus(r); x.Status == 0 {
		x.Value = r.Opaque(XattrSizeMax)
	}
	return r.Err()
}

// SetXattrArgs is SETXATTR1args. When decoded, File and Value alias the
// request buffer.
type SetXattrArgs struct {
	File   nfs3.FH
	Option SetXattrOption
	Name   string // at most XattrNameMax bytes
	Value  []byte // at most XattrSizeMax bytes
}

// Encode implements xdr.Encoder.
func (a *SetXattrArgs) Encode(w *xdr.Writer) {
	w.Opaque(a.File)
	w.Uint32(uint32(a.Option))
	w.String(a.Name)
	w.Opaque(a.Value)
}

// Decode implements xdr.Decoder.
func (a *SetXattrArgs) Decode(r *xdr.Reader) error {
	a.File = nfs3.DecodeFH(r)
	a.Option = SetXattrOption(r.Enum(3))
	a.Name = r.String(XattrNameMax)
	a.Value = r.Opaque(XattrSizeMax)
	return r.Err()
}

// XattrChangeRes is SETXATTR1res and REMOVEXATTR1res: on success, the file's
// wcc_data (its ctime moved), for a client to tell its own change from
// others' as after SETATTR.
type XattrChangeRes struct {
	Status Status
	Wcc    nfs3.WccData // when OK
}

// The results of the changes.
type (
	SetXattrRes    = XattrChangeRes
	RemoveXattrRes = XattrChangeRes
)

// SetStatus sets the status of a failure result.
func (x *XattrChangeRes) SetStatus(s Status) { x.Status = s }

// Encode implements xdr.Encoder.
func (x *XattrChangeRes) Encode(w *xdr.Writer) {
	w.Uint32(uint32(x.Status))
	if x.Status == 0 {
		x.Wcc.Encode(w)
	}
}

// Decode implements xdr.Decoder.
func (x *XattrChangeRes) Decode(r *xdr.Reader) error {
	if x.Status = decodeStatus(r); x.Status == 0 {
		x.Wcc.Decode(r)
	}
	return r.Err()
}

// ListXattrsArgs is LISTXATTRS1args: where to start (0, or the cookie of the
// previous reply) and how many bytes of names the reply may carry.
type ListXattrsArgs struct {
	File     nfs3.FH
	Cookie   uint64
	MaxCount uint32
}

// Encode implements xdr.Encoder.
func (a *ListXattrsArgs) Encode(w *xdr.Writer) {
	w.Opaque(a.File)
	w.Uint64(a.Cookie)
	w.Uint32(a.MaxCount)
}

// Decode implements xdr.Decoder.
func (a *ListXattrsArgs) Decode(r *xdr.Reader) error {
	a.File = nfs3.DecodeFH(r)
	a.Cookie = r.Uint64()
	a.MaxCount = r.Uint32()
	return r.Err()
}

// xattrNameMin is the fewest bytes one name takes in a LISTXATTRS reply (its
// length word), to bound the count before anything is allocated.
const xattrNameMin = 4

// ListXattrsRes is LISTXATTRS1res: names (whole, "user." included) from the
// cookie on, the cookie to continue from, and whether they are the last.
type ListXattrsRes struct {
	Status Status
	Cookie uint64   // when OK
	Names  []string // when OK; nil when none
	EOF    bool     // when OK
}

// SetStatus sets the status of a failure result.
func (x *ListXattrsRes) SetStatus(s Status) { x.Status = s }

// Encode implements xdr.Encoder.
func (x *ListXattrsRes) Encode(w *xdr.Writer) {
	w.Uint32(uint32(x.Status))
	if x.Status == 0 {
		w.Uint64(x.Cookie)
		w.Uint32(uint32(len(x.Names)))
		for _, n := range x.Names {
			w.String(n)
		}
		w.Bool(x.EOF)
	}
}

// Decode implements xdr.Decoder.
func (x *ListXattrsRes) Decode(r *xdr.Reader) error {
	if x.Status = decodeStatus(r); x.Status != 0 {
		return r.Err()
	}
	x.Cookie = r.Uint64()
	n := r.ArrayLen(XattrListMax/xattrNameMin, xattrNameMin)
	x.Names = nil
	if n > 0 {
		x.Names = make([]string, n)
	}
	for i := 0; i < n && r.Err() == nil; i++ {
		x.Names[i] = r.String(XattrNameMax)
	}
	x.EOF = r.Bool()
	return r.Err()
}

// XattrNameSize is the bytes name takes in a LISTXATTRS reply.
func XattrNameSize(name string) int { return 4 + (len(name)+3)&^3 }
