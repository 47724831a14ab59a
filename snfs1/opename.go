package snfs1

import (
	"snfs/nfs3"
	"snfs/state"
	"snfs/xdr"
)

// OpenNameArgs is OPEN_NAME1args (docs/protocol.md, "OPEN_NAME"): OPEN of the
// regular file a directory entry names, saving the LOOKUP the paper's OPEN
// needed first. It never creates.
type OpenNameArgs struct {
	Client ClientID
	Where  nfs3.DirOpArgs
	Mode   state.Mode
}

// Encode implements xdr.Encoder.
func (a *OpenNameArgs) Encode(w *xdr.Writer) {
	w.Uint64(uint64(a.Client))
	a.Where.Encode(w)
	w.Uint32(uint32(a.Mode))
}

// Decode implements xdr.Decoder. Where aliases the reader's buffer.
func (a *OpenNameArgs) Decode(r *xdr.Reader) error {
	a.Client = ClientID(r.Uint64())
	a.Where.Decode(r)
	a.Mode = decodeMode(r)
	return r.Err()
}

// OpenNameRes is OPEN_NAME1res: the file's handle and the OPEN result.
type OpenNameRes struct {
	Status Status
	File   nfs3.FH // when OK
	OpenOK         // when OK
}

// SetStatus sets the status of a failure result.
func (x *OpenNameRes) SetStatus(s Status) { x.Status = s }

// Encode implements xdr.Encoder.
func (x *OpenNameRes) Encode(w *xdr.Writer) {
	w.Uint32(uint32(x.Status))
	if x.Status == 0 {
		w.Opaque(x.File)
		x.OpenOK.encode(w)
	}
}

// Decode implements xdr.Decoder. File is copied.
func (x *OpenNameRes) Decode(r *xdr.Reader) error {
	if x.Status = decodeStatus(r); x.Status == 0 {
		x.File = append(nfs3.FH(nil), nfs3.DecodeFH(r)...)
		x.OpenOK.decode(r)
	}
	return r.Err()
}
