package nfs3

import "snfs/xdr"

// ReadlinkRes is READLINK3res (RFC 1813 section 3.3.5, READLINK: read from symbolic
// link). The argument is FHArgs.
type ReadlinkRes struct {
	Status Status
	Attr   *Fattr
	Path   string // when OK
}

// SetStatus implements Result.
func (x *ReadlinkRes) SetStatus(s Status) { x.Status = s }

// Encode implements xdr.Encoder.
func (x *ReadlinkRes) Encode(w *xdr.Writer) {
	w.Uint32(uint32(x.Status))
	EncodePostOpAttr(w, x.Attr)
	if x.Status == OK {
		w.String(x.Path)
	}
}

// Decode implements xdr.Decoder.
func (x *ReadlinkRes) Decode(r *xdr.Reader) error {
	x.Status = decodeStatus(r)
	x.Attr = DecodePostOpAttr(r)
	if x.Status == OK {
		x.Path = r.String(MaxPath)
	}
	return r.Err()
}
