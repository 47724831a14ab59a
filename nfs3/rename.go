package nfs3

import "snfs/xdr"

// RenameArgs is RENAME3args (RFC 1813 section 3.3.14, RENAME: rename a file or directory).
type RenameArgs struct {
	From DirOpArgs
	To   DirOpArgs
}

// Encode implements xdr.Encoder.
func (x *RenameArgs) Encode(w *xdr.Writer) { x.From.Encode(w); x.To.Encode(w) }

// Decode implements xdr.Decoder.
func (x *RenameArgs) Decode(r *xdr.Reader) error {
	x.From.Decode(r)
	return x.To.Decode(r)
}

// RenameRes is RENAME3res.
type RenameRes struct {
	Status  Status
	FromWcc WccData
	ToWcc   WccData
}

// SetStatus implements Result.
func (x *RenameRes) SetStatus(s Status) { x.Status = s }

// Encode implements xdr.Encoder.
func (x *RenameRes) Encode(w *xdr.Writer) {
	w.Uint32(uint32(x.Status))
	x.FromWcc.Encode(w)
	x.ToWcc.Encode(w)
}

// Decode implements xdr.Decoder.
func (x *RenameRes) Decode(r *xdr.Reader) error {
	x.Status = decodeStatus(r)
	x.FromWcc.Decode(r)
	return x.ToWcc.Decode(r)
}
