package nfs3

import "snfs/xdr"

// MkdirArgs is MKDIR3args (RFC 1813 section 3.3.9, MKDIR: create a directory).
// The result is CreateRes.
type MkdirArgs struct {
	Where DirOpArgs
	Attr  Sattr
}

// Encode implements xdr.Encoder.
func (x *MkdirArgs) Encode(w *xdr.Writer) { x.Where.Encode(w); x.Attr.Encode(w) }

// Decode implements xdr.Decoder.
func (x *MkdirArgs) Decode(r *xdr.Reader) error {
	x.Where.Decode(r)
	return x.Attr.Decode(r)
}
