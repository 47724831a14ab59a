package snfs1

import (
	"snfs/nfs3"
	"snfs/xdr"
)

// ReclaimItem is reclaim1: what a client holds of one file, reported after a
// server restart (docs/protocol.md, "RECLAIM"; Sprite's recovery).
type ReclaimItem struct {
	File    nfs3.FH
	Readers uint32 // opens for reading
	Writers uint32 // opens for writing
	Caching bool   // the client caches the file's data
	Dirty   bool   // the client holds data of the file not yet written back
	Version uint64 // the version of the file its cache holds
}

// reclaimItemMin is the fewest bytes an item takes on the wire (an empty handle).
const reclaimItemMin = 4 + 4 + 4 + 4 + 4 + 8

func (it *ReclaimItem) encode(w *xdr.Writer) {
	w.Opaque(it.File)
	w.Uint32(it.Readers)
	w.Uint32(it.Writers)
	w.Bool(it.Caching)
	w.Bool(it.Dirty)
	w.Uint64(it.Version)
}

func (it *ReclaimItem) decode(r *xdr.Reader) {
	it.File = nfs3.DecodeFH(r)
	it.Readers = r.Uint32()
	it.Writers = r.Uint32()
	it.Caching = r.Bool()
	it.Dirty = r.Bool()
	it.Version = r.Uint64()
}

// ReclaimArgs is RECLAIM1args: one batch of a client's reclaims, at most
// ReclaimMax items.
type ReclaimArgs struct {
	Client ClientID
	Items  []ReclaimItem
}

// Encode implements xdr.Encoder.
func (a *ReclaimArgs) Encode(w *xdr.Writer) {
	w.Uint64(uint64(a.Client))
	w.Uint32(uint32(len(a.Items)))
	for i := range a.Items {
		a.Items[i].encode(w)
	}
}

// Decode implements xdr.Decoder. The items' handles alias the reader's
// buffer; the count is checked against ReclaimMax and the bytes left before
// anything is allocated.
func (a *ReclaimArgs) Decode(r *xdr.Reader) error {
	a.Client = ClientID(r.Uint64())
	n := r.ArrayLen(ReclaimMax, reclaimItemMin)
	a.Items = nil
	if n > 0 {
		a.Items = make([]ReclaimItem, n)
	}
	for i := 0; i < n && r.Err() == nil; i++ {
		a.Items[i].decode(r)
	}
	return r.Err()
}

// ClientArgs is the arguments of RECLAIM_DONE and UNREGISTER: the client id.
type ClientArgs struct{ Client ClientID }

// ReclaimDoneArgs is RECLAIM_DONE1args: the client has reclaimed everything.
type ReclaimDoneArgs = ClientArgs

// UnregisterArgs is UNREGISTER1args: a clean end of the client (unmount).
type UnregisterArgs = ClientArgs

// Encode implements xdr.Encoder.
func (a *ClientArgs) Encode(w *xdr.Writer) { w.Uint64(uint64(a.Client)) }

// Decode implements xdr.Decoder.
func (a *ClientArgs) Decode(r *xdr.Reader) error {
	a.Client = ClientID(r.Uint64())
	return r.Err()
}

// StatusRes is a result that is its status alone: RECLAIM1res,
// RECLAIM_DONE1res, UNREGISTER1res.
type StatusRes struct{ Status Status }

// The results that are a status alone.
type (
	ReclaimRes     = StatusRes
	ReclaimDoneRes = StatusRes
	UnregisterRes  = StatusRes
)

// SetStatus sets the status of a failure result.
func (x *StatusRes) SetStatus(s Status) { x.Status = s }

// Encode implements xdr.Encoder.
func (x *StatusRes) Encode(w *xdr.Writer) { w.Uint32(uint32(x.Status)) }

// Decode implements xdr.Decoder.
func (x *StatusRes) Decode(r *xdr.Reader) error {
	x.Status = decodeStatus(r)
	return r.Err()
}
