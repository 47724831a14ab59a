package nfs3

import "snfs/xdr"

// GetattrRes is GETATTR3res (RFC 1813 section 3.3.1, GETATTR: get file attributes).
// The argument is FHArgs.
type GetattrRes struct {
	Status Status
	Attr   Fattr // when OK
}

// SetStatus implements Result.
func (x *GetattrRes) SetStatus(s Status) { x.Status = s }

// Encode implements xdr.Encoder.
func (x *GetattrRes) Encode(w *xdr.Writer) {
	w.Uint32(uint32(x.Status))
	if x.Status == OK {
		x.Attr.Encode(w)
	}
}

// Decode implements xdr.Decoder.
func (x *GetattrRes) Decode(r *xdr.Reader) error {
	if x.Status = decodeStatus(r); x.Status == OK {
		x.Attr.Decode(r)
	}
	return r.Err()
}
