package nfs3

import "snfs/xdr"

// CreateMode is createmode3.
type CreateMode uint32

// createmode3 values.
const (
	Unchecked CreateMode = 0
	Guarded   CreateMode = 1
	Exclusive CreateMode = 2
)

// CreateArgs is CREATE3args (RFC 1813 section 3.3.8, CREATE: create a file).
type CreateArgs struct {
	Where DirOpArgs
	Mode  CreateMode
	Attr  Sattr                // UNCHECKED, GUARDED
	Verf  [CreateVerfSize]byte // EXCLUSIVE
}

// Encode implements xdr.Encoder.
func (x *CreateArgs) Encode(w *xdr.Writer) {
	x.Where.Encode(w)
	w.Uint32(uint32(x.Mode))
	if x.Mode == Exclusive {
		w.FixedOpaque(x.Verf[:])
	} else {
		x.Attr.Encode(w)
	}
}

// Decode implements xdr.Decoder.
func (x *CreateArgs) Decode(r *xdr.Reader) error {
	x.Where.Decode(r)
	x.Mode = CreateMode(r.Enum(3))
	if x.Mode == Exclusive {
		copy(x.Verf[:], r.FixedOpaque(CreateVerfSize))
	} else {
		x.Attr.Decode(r)
	}
	return r.Err()
}

// CreateRes is CREATE3res, and also MKDIR3res, SYMLINK3res and MKNOD3res, which
// have the same shape.
type CreateRes struct {
	Status Status
	Object FH     // post_op_fh3, when OK
	Attr   *Fattr // when OK
	DirWcc WccData
}

// SetStatus implements Result.
func (x *CreateRes) SetStatus(s Status) { x.Status = s }

// Encode implements xdr.Encoder.
func (x *CreateRes) Encode(w *xdr.Writer) {
	w.Uint32(uint32(x.Status))
	if x.Status == OK {
		EncodePostOpFH(w, x.Object)
		EncodePostOpAttr(w, x.Attr)
	}
	x.DirWcc.Encode(w)
}

// Decode implements xdr.Decoder.
func (x *CreateRes) Decode(r *xdr.Reader) error {
	if x.Status = decodeStatus(r); x.Status == OK {
		x.Object = DecodePostOpFH(r)
		x.Attr = DecodePostOpAttr(r)
	}
	return x.DirWcc.Decode(r)
}
