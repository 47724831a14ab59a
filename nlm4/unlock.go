package nlm4

import "snfs/xdr"

// UnlockArgs is nlm4_unlockargs (XNFS chapter 10, NLM_UNLOCK; RFC 1813
// Appendix II, NLMPROC4_UNLOCK): release a range of the owner's locks (a part
// of a held range splits it). It is the argument of UNLOCK (4) and
// UNLOCK_MSG (9); the result is Res, returned by UNLOCK and sent in an
// UNLOCK_RES (14) call for an UNLOCK_MSG.
type UnlockArgs struct {
	Cookie []byte // at most MaxNetobj bytes
	Lock   Lock
}

// Encode implements xdr.Encoder.
func (a *UnlockArgs) Encode(w *xdr.Writer) {
	w.Opaque(a.Cookie)
	a.Lock.Encode(w)
}

// Decode implements xdr.Decoder.
func (a *UnlockArgs) Decode(r *xdr.Reader) error {
	a.Cookie = r.Opaque(MaxNetobj)
	return a.Lock.Decode(r)
}
