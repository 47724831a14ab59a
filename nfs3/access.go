package nfs3

import "snfs/xdr"

// ACCESS bits (RFC 1813 section 3.3.4).
const (
	AccessRead    = 0x01
	AccessLookup  = 0x02
	AccessModify  = 0x04
	AccessExtend  = 0x08
	AccessDelete  = 0x10
	AccessExecute = 0x20
)

// AccessArgs is ACCESS3args (RFC 1813 section 3.3.4, ACCESS: check access permission).
type AccessArgs struct {
	Object FH
	Access uint32
}

// Encode implements xdr.Encoder.
func (x *AccessArgs) Encode(w *xdr.Writer) { w.Opaque(x.Object); w.Uint32(x.Access) }

// Decode implements xdr.Decoder.
func (x *AccessArgs) Decode(r *xdr.Reader) error {
	x.Object = DecodeFH(r)
	x.Access = r.Uint32()
	return r.Err()
}

// AccessRes is ACCESS3res.
type AccessRes struct {
	Status Status
	Attr   *Fattr
	Access uint32 // when OK
}

// SetStatus implements Result.
func (x *AccessRes) SetStatus(s Status) { x.Status = s }

// Encode implements xdr.Encoder.
func (x *AccessRes) Encode(w *xdr.Writer) {
	w.Uint32(uint32(x.Status))
	EncodePostOpAttr(w, x.Attr)
	if x.Status == OK {
		w.Uint32(x.Access)
	}
}

// Decode implements xdr.Decoder.
func (x *AccessRes) Decode(r *xdr.Reader) error {
	x.Status = decodeStatus(r)
	x.Attr = DecodePostOpAttr(r)
	if x.Status == OK {
		x.Access = r.Uint32()
	}
	return r.Err()
}
