package nfs3

import "snfs/xdr"

// FSINFO properties bits.
const (
	FSFLink        = 0x0001
	FSFSymlink     = 0x0002
	FSFHomogeneous = 0x0008
	FSFCanSetTime  = 0x0010
)

// FsinfoRes is FSINFO3res (RFC 1813 section 3.3.19, FSINFO: get static file system
// information). The argument is FHArgs.
type FsinfoRes struct {
	Status                Status
	Attr                  *Fattr
	RtMax, RtPref, RtMult uint32
	WtMax, WtPref, WtMult uint32
	DtPref                uint32
	MaxFileSize           uint64
	TimeDelta             Time
	Properties            uint32
}

// SetStatus implements Result.
func (x *FsinfoRes) SetStatus(s Status) { x.Status = s }

// Encode implements xdr.Encoder.
func (x *FsinfoRes) Encode(w *xdr.Writer) {
	w.Uint32(uint32(x.Status))
	EncodePostOpAttr(w, x.Attr)
	if x.Status == OK {
		for _, v := range []uint32{x.RtMax, x.RtPref, x.RtMult, x.WtMax, x.WtPref, x.WtMult, x.DtPref} {
			w.Uint32(v)
		}
		w.Uint64(x.MaxFileSize)
		x.TimeDelta.encode(w)
		w.Uint32(x.Properties)
	}
}

// Decode implements xdr.Decoder.
func (x *FsinfoRes) Decode(r *xdr.Reader) error {
	x.Status = decodeStatus(r)
	x.Attr = DecodePostOpAttr(r)
	if x.Status == OK {
		x.RtMax, x.RtPref, x.RtMult = r.Uint32(), r.Uint32(), r.Uint32()
		x.WtMax, x.WtPref, x.WtMult = r.Uint32(), r.Uint32(), r.Uint32()
		x.DtPref = r.Uint32()
		x.MaxFileSize = r.Uint64()
		x.TimeDelta = decodeTime(r)
		x.Properties = r.Uint32()
	}
	return r.Err()
}
