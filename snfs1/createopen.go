package snfs1

import (
	"snfs/nfs3"
	"snfs/xdr"
)

// CreateOpenArgs is CREATE_OPEN1args (docs/protocol.md, "CREATE_OPEN"):
// NFSv3 CREATE of a regular file and OPEN_WRITE of it, in one round trip.
type CreateOpenArgs struct {
	Client ClientID
	Create nfs3.CreateArgs // CREATE3args: where, and createhow3
}

// Encode implements xdr.Encoder.
func (a *CreateOpenArgs) Encode(w *xdr.Writer) {
	w.Uint64(uint64(a.Client))
	a.Create.Encode(w)
}

// Decode implements xdr.Decoder. Create.Where aliases the reader's buffer.
func (a *CreateOpenArgs) Decode(r *xdr.Reader) error {
	a.Client = ClientID(r.Uint64())
	return a.Create.Decode(r)
}

// CreateOpenRes is CREATE_OPEN1res. On success: the new file's handle and
// attributes, the directory's wcc_data, the server's boot verifier, and the
// open's own result (Open: an
// OPEN1res, whose status may be a failure though the file was made). On
// failure: the directory's wcc_data only, as CREATE3resfail (nothing was made
// and nothing opened).
type CreateOpenRes struct {
	Status Status
	File   nfs3.FH     // when OK
	Attr   *nfs3.Fattr // when OK: post_op_attr
	DirWcc nfs3.WccData
	// ServerVerf is the boot verifier of the server instance that made the
	// reply, when OK: a reply saved before a restart and replayed after it
	// carries the old one, and its open is not counted by the new server.
	ServerVerf Verifier
	Open       OpenRes // when OK
}

// SetStatus sets the status of a failure result.
func (x *CreateOpenRes) SetStatus(s Status) { x.Status = s }

// Encode implements xdr.Encoder.
func (x *CreateOpenRes) Encode(w *xdr.Writer) {
	w.Uint32(uint32(x.Status))
	if x.Status != 0 {
		x.DirWcc.Encode(w)
		return
	}
	w.Opaque(x.File)
	nfs3.EncodePostOpAttr(w, x.Attr)
	x.DirWcc.Encode(w)
	w.FixedOpaque(x.ServerVerf[:])
	x.Open.Encode(w)
}

// Decode implements xdr.Decoder. File is copied.
func (x *CreateOpenRes) Decode(r *xdr.Reader) error {
	if x.Status = decodeStatus(r); x.Status != 0 {
		return x.DirWcc.Decode(r)
	}
	x.File = append(nfs3.FH(nil), nfs3.DecodeFH(r)...)
	x.Attr = nfs3.DecodePostOpAttr(r)
	x.DirWcc.Decode(r)
	x.ServerVerf.decode(r)
	return x.Open.Decode(r)
}
