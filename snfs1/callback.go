package snfs1

import (
	"snfs/nfs3"
	"snfs/state"
	"snfs/xdr"
)

// CallbackArgs is CALLBACK1args (docs/protocol.md, "CALLBACK"; the paper's
// section 3.2), sent by the server on the client's own connection.
type CallbackArgs struct {
	File nfs3.FH
	Mode state.CallbackMode
	Attr *nfs3.Fattr // post_op_attr; snfs serve sends none (docs/protocol.md section 5.1)
}

// Encode implements xdr.Encoder.
func (a *CallbackArgs) Encode(w *xdr.Writer) {
	w.Opaque(a.File)
	w.Uint32(uint32(a.Mode))
	nfs3.EncodePostOpAttr(w, a.Attr)
}

// Decode implements xdr.Decoder. File is copied.
func (a *CallbackArgs) Decode(r *xdr.Reader) error {
	a.File = append(nfs3.FH(nil), nfs3.DecodeFH(r)...)
	a.Mode = decodeCallbackMode(r)
	a.Attr = nfs3.DecodePostOpAttr(r)
	return r.Err()
}

// CallbackRes is CALLBACK1res. Status is one of the answers OK to
// state.MaxAnswer.
type CallbackRes struct{ Status state.Outcome }

// Encode implements xdr.Encoder.
func (x *CallbackRes) Encode(w *xdr.Writer) { w.Uint32(uint32(x.Status)) }

// Decode implements xdr.Decoder.
func (x *CallbackRes) Decode(r *xdr.Reader) error {
	x.Status = decodeAnswer(r)
	return r.Err()
}
