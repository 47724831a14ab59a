package nsm

import "snfs/xdr"

// StatChge is stat_chge (XNFS chapter 11, SM_NOTIFY): the argument of
// SM_NOTIFY (6), which a host's monitor sends to the monitor of every host it
// was asked to watch it for (its peers) when it starts: host MonName is now
// at state State (odd: up). SM_NOTIFY has no result.
type StatChge struct {
	MonName string // at most MaxStrLen bytes
	State   int32
}

// Encode implements xdr.Encoder.
func (s *StatChge) Encode(w *xdr.Writer) {
	w.String(s.MonName)
	w.Int32(s.State)
}

// Decode implements xdr.Decoder.
func (s *StatChge) Decode(r *xdr.Reader) error {
	s.MonName = r.String(MaxStrLen)
	s.State = r.Int32()
	return r.Err()
}

// Status is status (sm_inter.x; nlm_sm_status in nlm_prot.x): the argument of
// the call a monitor makes to the procedure named by an SM_MON's MyID when
// the monitored host MonName reports a new State in an SM_NOTIFY, with the
// Priv the lock manager gave SM_MON. Linux's lockd serves it as NLM program
// 100021 procedure 16 (NLMPROC_NSM_NOTIFY); it has no result.
type Status struct {
	MonName string // at most MaxStrLen bytes
	State   int32
	Priv    [PrivSize]byte
}

// Encode implements xdr.Encoder.
func (s *Status) Encode(w *xdr.Writer) {
	w.String(s.MonName)
	w.Int32(s.State)
	w.FixedOpaque(s.Priv[:])
}

// Decode implements xdr.Decoder.
func (s *Status) Decode(r *xdr.Reader) error {
	s.MonName = r.String(MaxStrLen)
	s.State = r.Int32()
	copy(s.Priv[:], r.FixedOpaque(PrivSize))
	return r.Err()
}
