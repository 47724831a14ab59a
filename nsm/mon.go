package nsm

import "snfs/xdr"

// Mon is mon (XNFS chapter 11, SM_MON): the argument of SM_MON (2), by which a
// lock manager asks its host's monitor to watch MonID.MonName and to call
// MonID.MyID back with Priv when that host restarts. The result is StatRes:
// StatSucc and the monitor's own state number, or StatFail when it cannot.
type Mon struct {
	MonID MonID
	Priv  [PrivSize]byte
}

// Encode implements xdr.Encoder.
func (m *Mon) Encode(w *xdr.Writer) {
	m.MonID.Encode(w)
	w.FixedOpaque(m.Priv[:])
}

// Decode implements xdr.Decoder.
func (m *Mon) Decode(r *xdr.Reader) error {
	m.MonID.Decode(r)
	copy(m.Priv[:], r.FixedOpaque(PrivSize))
	return r.Err()
}
