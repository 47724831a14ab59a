package snfs1

import (
	"snfs/nfs3"
	"snfs/state"
	"snfs/xdr"
)

// CloseArgs is CLOSE1args (docs/protocol.md, "CLOSE"; the paper's section 3.1).
type CloseArgs struct {
	Client ClientID
	File   nfs3.FH
	Mode   state.Mode
	// Dirty is true while the client still holds dirty data of the file that it
	// has not written back (delayed write-back); false states it holds none.
	Dirty bool
}

// Encode implements xdr.Encoder.
func (a *CloseArgs) Encode(w *xdr.Writer) {
	w.Uint64(uint64(a.Client))
	w.Opaque(a.File)
	w.Uint32(uint32(a.Mode))
	w.Bool(a.Dirty)
}

// Decode implements xdr.Decoder. File aliases the reader's buffer.
func (a *CloseArgs) Decode(r *xdr.Reader) error {
	a.Client = ClientID(r.Uint64())
	a.File = nfs3.DecodeFH(r)
	a.Mode = decodeMode(r)
	a.Dirty = r.Bool()
	return r.Err()
}

// CloseRes is CLOSE1res.
type CloseRes struct {
	Status Status
	Attr   *nfs3.Fattr // post_op_attr, when OK
}

// SetStatus sets the status of a failure result.
func (x *CloseRes) SetStatus(s Status) { x.Status = s }

// Encode implements xdr.Encoder.
func (x *CloseRes) Encode(w *xdr.Writer) {
	w.Uint32(uint32(x.Status))
	if x.Status == 0 {
		nfs3.EncodePostOpAttr(w, x.Attr)
	}
}

// Decode implements xdr.Decoder.
func (x *CloseRes) Decode(r *xdr.Reader) error {
	if x.Status = decodeStatus(r); x.Status == 0 {
		x.Attr = nfs3.DecodePostOpAttr(r)
	}
	return r.Err()
}
