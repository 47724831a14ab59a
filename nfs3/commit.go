package nfs3

import "snfs/xdr"

// CommitArgs is COMMIT3args (RFC 1813 section 3.3.21, COMMIT: commit cached data on
// a server to stable storage).
type CommitArgs struct {
	File   FH
	Offset uint64
	Count  uint32
}

// Encode implements xdr.Encoder.
func (x *CommitArgs) Encode(w *xdr.Writer) { w.Opaque(x.File); w.Uint64(x.Offset); w.Uint32(x.Count) }

// Decode implements xdr.Decoder.
func (x *CommitArgs) Decode(r *xdr.Reader) error {
	x.File = DecodeFH(r)
	x.Offset = r.Uint64()
	x.Count = r.Uint32()
	return r.Err()
}

// CommitRes is COMMIT3res.
type CommitRes struct {
	Status Status
	Wcc    WccData
	Verf   [WriteVerfSize]byte // when OK
}

// SetStatus implements Result.
func (x *CommitRes) SetStatus(s Status) { x.Status = s }

// Encode implements xdr.Encoder.
func (x *CommitRes) Encode(w *xdr.Writer) {
	w.Uint32(uint32(x.Status))
	x.Wcc.Encode(w)
	if x.Status == OK {
		w.FixedOpaque(x.Verf[:])
	}
}

// Decode implements xdr.Decoder.
func (x *CommitRes) Decode(r *xdr.Reader) error {
	x.Status = decodeStatus(r)
	x.Wcc.Decode(r)
	if x.Status == OK {
		copy(x.Verf[:], r.FixedOpaque(WriteVerfSize))
	}
	return r.Err()
}
