package nfs3

import "snfs/xdr"

// ReaddirplusArgs is READDIRPLUS3args (RFC 1813 section 3.3.17, READDIRPLUS: extended
// read from directory). The result is ReaddirRes with Plus set.
type ReaddirplusArgs struct {
	Dir        FH
	Cookie     uint64
	CookieVerf [CookieVerfSize]byte
	DirCount   uint32
	MaxCount   uint32
}

// Encode implements xdr.Encoder.
func (x *ReaddirplusArgs) Encode(w *xdr.Writer) {
	w.Opaque(x.Dir)
	w.Uint64(x.Cookie)
	w.FixedOpaque(x.CookieVerf[:])
	w.Uint32(x.DirCount)
	w.Uint32(x.MaxCount)
}

// Decode implements xdr.Decoder.
func (x *ReaddirplusArgs) Decode(r *xdr.Reader) error {
	x.Dir = DecodeFH(r)
	x.Cookie = r.Uint64()
	copy(x.CookieVerf[:], r.FixedOpaque(CookieVerfSize))
	x.DirCount = r.Uint32()
	x.MaxCount = r.Uint32()
	return r.Err()
}
