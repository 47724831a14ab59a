package nfs3

import "snfs/xdr"

// LinkArgs is LINK3args (RFC 1813 section 3.3.15, LINK: create link to an object).
type LinkArgs struct {
	File FH
	Link DirOpArgs
}

// Encode implements xdr.Encoder.
func (x *LinkArgs) Encode(w *xdr.Writer) { w.Opaque(x.File); x.Link.Encode(w) }

// Decode implements xdr.Decoder.
func (x *LinkArgs) Decode(r *xdr.Reader) error {
	x.File = DecodeFH(r)
	return x.Link.Decode(r)
}

// LinkRes is LINK3res.
type LinkRes struct {
	Status  Status
	Attr    *Fattr
	LinkWcc WccData
}

// SetStatus implements Result.
func (x *LinkRes) SetStatus(s Status) { x.Status = s }

// Encode implements xdr.Encoder.
func (x *LinkRes) Encode(w *xdr.Writer) {
	w.Uint32(uint32(x.Status))
	EncodePostOpAttr(w, x.Attr)
	x.LinkWcc.Encode(w)
}

// Decode implements xdr.Decoder.
func (x *LinkRes) Decode(r *xdr.Reader) error {
	x.Status = decodeStatus(r)
	x.Attr = DecodePostOpAttr(r)
	return x.LinkWcc.Decode(r)
}
