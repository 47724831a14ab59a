package snfs1

import (
	"snfs/nfs3"
	"snfs/xdr"
)

// AppendMax is the most data one APPEND carries (docs/protocol.md, "APPEND").
const AppendMax = 1 << 20

// AppendArgs is APPEND1args (docs/protocol.md, "APPEND"): WRITE3args without
// the offset, which the server chooses (its end of file). When decoded, File
// and Data alias the request buffer.
type AppendArgs struct {
	File   nfs3.FH
	Stable nfs3.StableHow
	Data   []byte // at most AppendMax bytes
}

// Encode implements xdr.Encoder.
func (a *AppendArgs) Encode(w *xdr.Writer) {
	w.Opaque(a.File)
	w.Uint32(uint32(a.Stable))
	w.Opaque(a.Data)
}

// Decode implements xdr.Decoder.
func (a *AppendArgs) Decode(r *xdr.Reader) error {
	a.File = nfs3.DecodeFH(r)
	a.Stable = nfs3.StableHow(r.Enum(3))
	a.Data = r.Opaque(AppendMax)
	return r.Err()
}

// AppendRes is APPEND1res: on success, where the server put the data (its end
// of file just before), how much of it, how stable, and the file's wcc_data.
type AppendRes struct {
	Status    Status
	Offset    uint64                   // when OK
	Count     uint32                   // when OK
	Committed nfs3.StableHow           // when OK
	Verf      [nfs3.WriteVerfSize]byte // when OK
	Wcc       nfs3.WccData             // when OK
}

// SetStatus sets the status of a failure result.
func (x *AppendRes) SetStatus(s Status) { x.Status = s }

// Encode implements xdr.Encoder.
func (x *AppendRes) Encode(w *xdr.Writer) {
	w.Uint32(uint32(x.Status))
	if x.Status == 0 {
		w.Uint64(x.Offset)
		w.Uint32(x.Count)
		w.Uint32(uint32(x.Committed))
		w.FixedOpaque(x.Verf[:])
		x.Wcc.Encode(w)
	}
}

// Decode implements xdr.Decoder.
func (x *AppendRes) Decode(r *xdr.Reader) error {
	if x.Status = decodeStatus(r); x.Status == 0 {
		x.Offset = r.Uint64()
		x.Count = r.Uint32()
		x.Committed = nfs3.StableHow(r.Enum(3))
		copy(x.Verf[:], r.FixedOpaque(nfs3.WriteVerfSize))
		x.Wcc.Decode(r)
	}
	return r.Err()
}
