package nfs3

import "snfs/xdr"

// FsstatRes is FSSTAT3res (RFC 1813 section 3.3.18, FSSTAT: get dynamic file system
// information). The argument is FHArgs.
type FsstatRes struct {
	Status                 Status
	Attr                   *Fattr
	TBytes, FBytes, ABytes uint64
	TFiles, FFiles, AFiles uint64
	Invarsec               uint32
}

// SetStatus implements Result.
func (x *FsstatRes) SetStatus(s Status) { x.Status = s }

// Encode implements xdr.Encoder.
func (x *FsstatRes) Encode(w *xdr.Writer) {
	w.Uint32(uint32(x.Status))
	EncodePostOpAttr(w, x.Attr)
	if x.Status == OK {
		for _, v := range []uint64{x.TBytes, x.FBytes, x.ABytes, x.TFiles, x.FFiles, x.AFiles} {
			w.Uint64(v)
		}
		w.Uint32(x.Invarsec)
	}
}

// Decode implements xdr.Decoder.
func (x *FsstatRes) Decode(r *xdr.Reader) error {
	x.Status = decodeStatus(r)
	x.Attr = DecodePostOpAttr(r)
	if x.Status == OK {
		x.TBytes, x.FBytes, x.ABytes = r.Uint64(), r.Uint64(), r.Uint64()
		x.TFiles, x.FFiles, x.AFiles = r.Uint64(), r.Uint64(), r.Uint64()
		x.Invarsec = r.Uint32()
	}
	return r.Err()
}
