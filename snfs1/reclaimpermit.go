package snfs1

import (
	"snfs/nfs3"
	"snfs/xdr"
)

// ReclaimPermitMax is SNFS_RECLAIM_PERMIT_MAX: the most directories one
// RECLAIM_PERMIT names.
const ReclaimPermitMax = 256

// ReclaimPermitArgs is RECLAIM_PERMIT1args (docs/protocol.md,
// "RECLAIM_PERMIT"): the directories whose write-back permits a client held
// before the server restarted, with records logged under them still to be
// reintegrated.
type ReclaimPermitArgs struct {
	Client ClientID
	Dirs   []nfs3.FH
}

// Encode implements xdr.Encoder.
func (a *ReclaimPermitArgs) Encode(w *xdr.Writer) {
	w.Uint64(uint64(a.Client))
	w.Uint32(uint32(len(a.Dirs)))
	for _, d := range a.Dirs {
		w.Opaque(d)
	}
}

// Decode implements xdr.Decoder. The handles alias the reader's buffer; the
// count is checked against ReclaimPermitMax and the bytes left before
// anything is allocated.
func (a *ReclaimPermitArgs) Decode(r *xdr.Reader) error {
	a.Client = ClientID(r.Uint64())
	n := r.ArrayLen(ReclaimPermitMax, 4)
	a.Dirs = nil
	if n > 0 {
		a.Dirs = make([]nfs3.FH, n)
	}
	for i := 0; i < n && r.Err() == nil; i++ {
		a.Dirs[i] = nfs3.DecodeFH(r)
	}
	return r.Err()
}

// ReclaimPermitRes is RECLAIM_PERMIT1res: a failure is its status alone; on
// success, one permit id per directory of the call, in its order, 0 for a
// directory whose permit is not granted again.
type ReclaimPermitRes struct {
	Status  Status
	Permits []uint64
}

// SetStatus sets the status of a failure result.
func (x *ReclaimPermitRes) SetStatus(s Status) { x.Status = s }

// Encode implements xdr.Encoder.
func (x *ReclaimPermitRes) Encode(w *xdr.Writer) {
	w.Uint32(uint32(x.Status))
	if x.Status != 0 {
		return
	}
	w.Uint32(uint32(len(x.Permits)))
	for _, p := range x.Permits {
		w.Uint64(p)
	}
}

// Decode implements xdr.Decoder.
func (x *ReclaimPermitRes) Decode(r *xdr.Reader) error {
	*x = ReclaimPermitRes{Status: decodeStatus(r)}
	if x.Status != 0 || r.Err() != nil {
		return r.Err()
	}
	n := r.ArrayLen(ReclaimPermitMax, 8)
	if n > 0 {
		x.Permits = make([]uint64, n)
	}
	for i := 0; i < n && r.Err() == nil; i++ {
		x.Permits[i] = r.Uint64()
	}
	return r.Err()
}
