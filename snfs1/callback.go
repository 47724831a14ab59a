package snfs1

import (
	"fmt"

	"snfs/nfs3"
	"snfs/xdr"
)

// CallbackArgs is CALLBACK1args (docs/protocol.md, "CALLBACK"; the paper's
// section 3.2), sent by the server on the client's own connection.
type CallbackArgs struct {
	File nfs3.FH
	Mode CallbackMode
	Attr *nfs3.Fattr // the server's attributes of the file (post_op_attr)
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
	a.Mode = CallbackMode(r.Uint32())
	if r.Err() == nil && (a.Mode < CBWriteback || a.Mode > CBRecallLocks) {
		r.SetErr(fmt.Errorf("snfs1: callback mode %d", a.Mode))
	}
	a.Attr = nfs3.DecodePostOpAttr(r)
	return r.Err()
}

// CallbackRes is CALLBACK1res.
type CallbackRes struct{ Status CallbackStatus }

// Encode implements xdr.Encoder.
func (x *CallbackRes) Encode(w *xdr.Writer) { w.Uint32(uint32(x.Status)) }

// Decode implements xdr.Decoder.
func (x *CallbackRes) Decode(r *xdr.Reader) error {
	x.Status = CallbackStatus(r.Uint32())
	if r.Err() == nil && x.Status > CBPinned {
		r.SetErr(fmt.Errorf("snfs1: callback status %d", x.Status))
	}
	return r.Err()
}
