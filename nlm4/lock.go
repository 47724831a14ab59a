package nlm4

import "snfs/xdr"

// LockArgs is nlm4_lockargs (XNFS chapter 10, NLM_LOCK and NLM_NM_LOCK; RFC
// 1813 Appendix II, NLMPROC4_LOCK): take a lock. It is the argument of LOCK
// (2), LOCK_MSG (7) and NM_LOCK (22), the last a lock from a client that runs
// no status monitor (the server must not monitor it, and Block must be
// false). The result is Res, returned by LOCK and NM_LOCK and sent in a
// LOCK_RES (12) call for a LOCK_MSG.
//
// Block asks the server to queue a conflicting request (Blocked) and call
// GRANTED when it holds it. Reclaim marks a lock the client held before the
// server restarted, the only kind granted in the grace period. State is the
// client's NSM state number, which tells the server which incarnation of the
// client holds the lock.
type LockArgs struct {
	Cookie    []byte // at most MaxNetobj bytes
	Block     bool
	Exclusive bool
	Lock      Lock
	Reclaim   bool
	State     int32
}

// Encode implements xdr.Encoder.
func (a *LockArgs) Encode(w *xdr.Writer) {
	w.Opaque(a.Cookie)
	w.Bool(a.Block)
	w.Bool(a.Exclusive)
	a.Lock.Encode(w)
	w.Bool(a.Reclaim)
	w.Int32(a.State)
}

// Decode implements xdr.Decoder.
func (a *LockArgs) Decode(r *xdr.Reader) error {
	a.Cookie = r.Opaque(MaxNetobj)
	a.Block = r.Bool()
	a.Exclusive = r.Bool()
	a.Lock.Decode(r)
	a.Reclaim = r.Bool()
	a.State = r.Int32()
	return r.Err()
}
