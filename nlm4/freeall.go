package nlm4

import "snfs/xdr"

// Notify is nlm4_notify (XNFS chapter 10, NLM_FREE_ALL; RFC 1813 Appendix
// II, NLMPROC4_FREE_ALL): the argument of FREE_ALL (23), by which a client
// that runs no status monitor (one that locked with NM_LOCK) tells the server
// that it restarted: release every lock and share held by Name. State is the
// client's new state number. FREE_ALL has no result.
type Notify struct {
	Name  string // at most MaxStrLen bytes
	State int32
}

// Encode implements xdr.Encoder.
func (n *Notify) Encode(w *xdr.Writer) {
	w.String(n.Name)
	w.Int32(n.State)
}

// Decode implements xdr.Decoder.
func (n *Notify) Decode(r *xdr.Reader) error {
	n.Name = r.String(MaxStrLen)
	n.State = r.Int32()
	return r.Err()
}
