package nfs3

import "snfs/xdr"

// SymlinkArgs is SYMLINK3args (RFC 1813 section 3.3.10, SYMLINK: create a symbolic
// link). The result is CreateRes.
type SymlinkArgs struct {
	Where DirOpArgs
	Attr  Sattr
	Path  string
}

// Encode implements xdr.Encoder.
func (x *SymlinkArgs) Encode(w *xdr.Writer) { x.Where.Encode(w); x.Attr.Encode(w); w.String(x.Path) }

// Decode implements xdr.Decoder.
func (x *SymlinkArgs) Decode(r *xdr.Reader) error {
	x.Where.Decode(r)
	x.Attr.Decode(r)
	x.Path = r.String(MaxPath)
	return r.Err()
}
