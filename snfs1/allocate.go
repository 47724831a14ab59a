package snfs1

import (
	"fmt"

	"snfs/nfs3"
	"snfs/xdr"
)

// AllocMode is allocmode1: what an ALLOCATE does to its range
// (docs/protocol.md, "ALLOCATE").
type AllocMode uint32

// Allocation modes: fallocate(2)'s mode 0, FALLOC_FL_KEEP_SIZE, and
// FALLOC_FL_PUNCH_HOLE|FALLOC_FL_KEEP_SIZE (NFSv4.2's DEALLOCATE).
const (
	Allocate         AllocMode = 1 // reserve the range; the size grows to its end
	AllocateKeepSize AllocMode = 2 // reserve the range; the size stays
	Deallocate       AllocMode = 3 // free the range (reads give zeros); the size stays
)

func (m AllocMode) String() string {
	switch m {
	case Allocate:
		return "ALLOC_ALLOCATE"
	case AllocateKeepSize:
		return "ALLOC_KEEP_SIZE"
	case Deallocate:
		return "ALLOC_DEALLOCATE"
	}
	return fmt.Sprintf("allocmode1(%d)", uint32(m))
}

// AllocateArgs is ALLOCATE1args (docs/protocol.md, "ALLOCATE"). When decoded,
// File aliases the request buffer.
type AllocateArgs struct {
	File   nfs3.FH
	Mode   AllocMode
	Offset uint64
	Length uint64
}

// Encode implements xdr.Encoder.
func (a *AllocateArgs) Encode(w *xdr.Writer) {
	w.Opaque(a.File)
	w.Uint32(uint32(a.Mode))
	w.Uint64(a.Offset)
	w.Uint64(a.Length)
}

// Decode implements xdr.Decoder.
func (a *AllocateArgs) Decode(r *xdr.Reader) error {
	a.File = nfs3.DecodeFH(r)
	a.Mode = AllocMode(r.Uint32())
	if r.Err() == nil && (a.Mode < Allocate || a.Mode > Deallocate) {
		r.SetErr(fmt.Errorf("snfs1: allocation mode %d", uint32(a.Mode)))
	}
	a.Offset = r.Uint64()
	a.Length = r.Uint64()
	return r.Err()
}

// AllocateRes is ALLOCATE1res: on success, the file's attributes after the
// change (and after the flush that made it durable).
type AllocateRes struct {
	Status Status
	Attr   *nfs3.Fattr // post_op_attr, when OK
}

// SetStatus sets the status of a failure result.
func (x *AllocateRes) SetStatus(s Status) { x.Status = s }

// Encode implements xdr.Encoder.
func (x *AllocateRes) Encode(w *xdr.Writer) {
	w.Uint32(uint32(x.Status))
	if x.Status == 0 {
		nfs3.EncodePostOpAttr(w, x.Attr)
	}
}

// Decode implements xdr.Decoder.
func (x *AllocateRes) Decode(r *xdr.Reader) error {
	if x.Status = decodeStatus(r); x.Status == 0 {
		x.Attr = nfs3.DecodePostOpAttr(r)
	}
	return r.Err()
}
