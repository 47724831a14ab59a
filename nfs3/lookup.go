package nfs3

import "snfs/xdr"

// LookupRes is LOOKUP3res (RFC 1813 section 3.3.3, LOOKUP: lookup filename).
// The argument is DirOpArgs.
type LookupRes struct {
	Status  Status
	Object  FH     // when OK
	ObjAttr *Fattr // when OK
	DirAttr *Fattr
}

// SetStatus implements Result.
func (x *LookupRes) SetStatus(s Status) { x.Status = s }

// Encode implements xdr.Encoder.
func (x *LookupRes) Encode(w *xdr.Writer) {
	w.Uint32(uint32(x.Status))
	if x.Status == OK {
		w.Opaque(x.Object)
		EncodePostOpAttr(w, x.ObjAttr)
	}
	EncodePostOpAttr(w, x.DirAttr)
}

// Decode implements xdr.Decoder.
func (x *LookupRes) Decode(r *xdr.Reader) error {
	if x.Status = decodeStatus(r); x.Status == OK {
		x.Object = append(FH{}, DecodeFH(r)...)
		x.ObjAttr = DecodePostOpAttr(r)
	}
	x.DirAttr = DecodePostOpAttr(r)
	return r.Err()
}
