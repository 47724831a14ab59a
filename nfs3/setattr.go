package nfs3

import "snfs/xdr"

// SetattrArgs is SETATTR3args (RFC 1813 section 3.3.2, SETATTR: set file attributes).
type SetattrArgs struct {
	Object FH
	New    Sattr
	Guard  *Time // sattrguard3: when set, the object's ctime must equal it
}

// Encode implements xdr.Encoder.
func (x *SetattrArgs) Encode(w *xdr.Writer) {
	w.Opaque(x.Object)
	x.New.Encode(w)
	w.Bool(x.Guard != nil)
	if x.Guard != nil {
		x.Guard.encode(w)
	}
}

// Decode implements xdr.Decoder.
func (x *SetattrArgs) Decode(r *xdr.Reader) error {
	x.Object = DecodeFH(r)
	x.New.Decode(r)
	x.Guard = nil
	if r.Bool() {
		t := decodeTime(r)
		x.Guard = &t
	}
	return r.Err()
}

// WccRes is the result of the procedures whose both arms are a status and one
// wcc_data: SETATTR3res, REMOVE3res, RMDIR3res.
type WccRes struct {
	Status Status
	Wcc    WccData
}

// SetStatus implements Result.
func (x *WccRes) SetStatus(s Status) { x.Status = s }

// Encode implements xdr.Encoder.
func (x *WccRes) Encode(w *xdr.Writer) { w.Uint32(uint32(x.Status)); x.Wcc.Encode(w) }

// Decode implements xdr.Decoder.
func (x *WccRes) Decode(r *xdr.Reader) error {
	x.Status = decodeStatus(r)
	return x.Wcc.Decode(r)
}
