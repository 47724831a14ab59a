package nfs3

import "snfs/xdr"

// PathconfRes is PATHCONF3res (RFC 1813 section 3.3.20, PATHCONF: retrieve POSIX
// information). The argument is FHArgs.
type PathconfRes struct {
	Status          Status
	Attr            *Fattr
	LinkMax         uint32
	NameMax         uint32
	NoTrunc         bool
	ChownRestricted bool
	CaseInsensitive bool
	CasePreserving  bool
}

// SetStatus implements Result.
func (x *PathconfRes) SetStatus(s Status) { x.Status = s }

// Encode implements xdr.Encoder.
func (x *PathconfRes) Encode(w *xdr.Writer) {
	w.Uint32(uint32(x.Status))
	EncodePostOpAttr(w, x.Attr)
	if x.Status == OK {
		w.Uint32(x.LinkMax)
		w.Uint32(x.NameMax)
		w.Bool(x.NoTrunc)
		w.Bool(x.ChownRestricted)
		w.Bool(x.CaseInsensitive)
		w.Bool(x.CasePreserving)
	}
}

// Decode implements xdr.Decoder.
func (x *PathconfRes) Decode(r *xdr.Reader) error {
	x.Status = decodeStatus(r)
	x.Attr = DecodePostOpAttr(r)
	if x.Status == OK {
		x.LinkMax, x.NameMax = r.Uint32(), r.Uint32()
		x.NoTrunc, x.ChownRestricted, x.CaseInsensitive, x.CasePreserving = r.Bool(), r.Bool(), r.Bool(), r.Bool()
	}
	return r.Err()
}
