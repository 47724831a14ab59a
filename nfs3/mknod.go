package nfs3

import "snfs/xdr"

// MknodArgs is MKNOD3args (RFC 1813 section 3.3.11, MKNOD: create a special device).
// The result is CreateRes.
type MknodArgs struct {
	Where DirOpArgs
	Type  FType
	Attr  Sattr    // CHR, BLK, SOCK, FIFO
	Spec  SpecData // CHR, BLK
}

// Encode implements xdr.Encoder.
func (x *MknodArgs) Encode(w *xdr.Writer) {
	x.Where.Encode(w)
	w.Uint32(uint32(x.Type))
	switch x.Type {
	case TypeChr, TypeBlk:
		x.Attr.Encode(w)
		w.Uint32(x.Spec.Major)
		w.Uint32(x.Spec.Minor)
	case TypeSock, TypeFifo:
		x.Attr.Encode(w)
	}
}

// Decode implements xdr.Decoder.
func (x *MknodArgs) Decode(r *xdr.Reader) error {
	x.Where.Decode(r)
	x.Type = FType(r.Uint32())
	switch x.Type {
	case TypeChr, TypeBlk:
		x.Attr.Decode(r)
		x.Spec = SpecData{r.Uint32(), r.Uint32()}
	case TypeSock, TypeFifo:
		x.Attr.Decode(r)
	case TypeReg, TypeDir, TypeLnk:
	default:
		r.SetErr(xdr.ErrBadEnum)
	}
	return r.Err()
}
