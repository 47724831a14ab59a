package nlm4

import "snfs/xdr"

// TestArgs is nlm4_testargs (XNFS chapter 10, NLM_TEST; RFC 1813 Appendix
// II, NLMPROC4_TEST): would this lock be granted? It is the argument of TEST
// (1) and TEST_MSG (6), and of GRANTED (5) and GRANTED_MSG (10), where the
// server tells the client that its blocked lock is now held (granted.go).
type TestArgs struct {
	Cookie    []byte // at most MaxNetobj bytes
	Exclusive bool
	Lock      Lock
}

// Encode implements xdr.Encoder.
func (a *TestArgs) Encode(w *xdr.Writer) {
	w.Opaque(a.Cookie)
	w.Bool(a.Exclusive)
	a.Lock.Encode(w)
}

// Decode implements xdr.Decoder.
func (a *TestArgs) Decode(r *xdr.Reader) error {
	a.Cookie = r.Opaque(MaxNetobj)
	a.Exclusive = r.Bool()
	return a.Lock.Decode(r)
}

// TestRes is nlm4_testres, the result of TEST and the argument of TEST_RES
// (11), the server's answer to a TEST_MSG: the union nlm4_testrply carries
// the conflicting lock when the status is Denied, and nothing otherwise.
type TestRes struct {
	Cookie []byte // at most MaxNetobj bytes
	Stat   Stat
	Holder Holder // when Denied
}

// SetStatus implements Result.
func (x *TestRes) SetStatus(s Stat) { x.Stat = s }

// Encode implements xdr.Encoder.
func (x *TestRes) Encode(w *xdr.Writer) {
	w.Opaque(x.Cookie)
	w.Uint32(uint32(x.Stat))
	if x.Stat == Denied {
		x.Holder.Encode(w)
	}
}

// Decode implements xdr.Decoder.
func (x *TestRes) Decode(r *xdr.Reader) error {
	x.Cookie = r.Opaque(MaxNetobj)
	x.Holder = Holder{}
	if x.Stat = decodeStat(r); x.Stat == Denied {
		x.Holder.Decode(r)
	}
	return r.Err()
}
