package snfs1

import (
	"errors"

	"snfs/nfs3"
	"snfs/state"
	"snfs/xdr"
)

var errEmptyName = errors.New("snfs1: empty client name")

// OpenArgs is OPEN1args (docs/protocol.md, "OPEN"; the paper's section 3.1).
type OpenArgs struct {
	Client ClientID
	File   nfs3.FH
	Mode   state.Mode
}

// Encode implements xdr.Encoder.
func (a *OpenArgs) Encode(w *xdr.Writer) {
	w.Uint64(uint64(a.Client))
	w.Opaque(a.File)
	w.Uint32(uint32(a.Mode))
}

// Decode implements xdr.Decoder. File aliases the reader's buffer.
func (a *OpenArgs) Decode(r *xdr.Reader) error {
	a.Client = ClientID(r.Uint64())
	a.File = nfs3.DecodeFH(r)
	a.Mode = decodeMode(r)
	return r.Err()
}

// OpenOK is OPEN1resok: may the client cache, and which cached data is still good.
type OpenOK struct {
	// CacheVersion is the file's version from this open on. Data the client
	// cached at CacheVersion or OldCacheVersion is current.
	CacheVersion    uint64
	OldCacheVersion uint64
	CacheEnabled    bool
	Attr            *nfs3.Fattr // post_op_attr
}

func (o *OpenOK) encode(w *xdr.Writer) {
	w.Uint64(o.CacheVersion)
	w.Uint64(o.OldCacheVersion)
	w.Bool(o.CacheEnabled)
	nfs3.EncodePostOpAttr(w, o.Attr)
}

func (o *OpenOK) decode(r *xdr.Reader) {
	o.CacheVersion = r.Uint64()
	o.OldCacheVersion = r.Uint64()
	o.CacheEnabled = r.Bool()
	o.Attr = nfs3.DecodePostOpAttr(r)
}

// OpenRes is OPEN1res.
type OpenRes struct {
	Status Status
	OpenOK // when OK
}

// SetStatus sets the status of a failure result.
func (x *OpenRes) SetStatus(s Status) { x.Status = s }

// Encode implements xdr.Encoder.
func (x *OpenRes) Encode(w *xdr.Writer) {
	w.Uint32(uint32(x.Status))
	if x.Status == 0 {
		x.OpenOK.encode(w)
	}
}

// Decode implements xdr.Decoder.
func (x *OpenRes) Decode(r *xdr.Reader) error {
	if x.Status = decodeStatus(r); x.Status == 0 {
		x.OpenOK.decode(r)
	}
	return r.Err()
}
