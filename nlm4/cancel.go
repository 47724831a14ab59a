package nlm4

import "snfs/xdr"

// CancArgs is nlm4_cancargs (XNFS chapter 10, NLM_CANCEL; RFC 1813 Appendix
// II, NLMPROC4_CANCEL): withdraw a blocked LOCK, named by the same Block,
// Exclusive and Lock it was requested with. It is the argument of CANCEL (3)
// and CANCEL_MSG (8); the result is Res, returned by CANCEL and sent in a
// CANCEL_RES (13) call for a CANCEL_MSG.
type CancArgs struct {
	Cookie    []byte // at most MaxNetobj bytes
	Block     bool
	Exclusive bool
	Lock      Lock
}

// Encode implements xdr.Encoder.
func (a *CancArgs) Encode(w *xdr.Writer) {
	w.Opaque(a.Cookie)
	w.Bool(a.Block)
	w.Bool(a.Exclusive)
	a.Lock.Encode(w)
}

// Decode implements xdr.Decoder.
func (a *CancArgs) Decode(r *xdr.Reader) error {
	a.Cookie = r.Opaque(MaxNetobj)
	a.Block = r.Bool()
	a.Exclusive = r.Bool()
	return a.Lock.Decode(r)
}
