package nlm4

import (
	"fmt"

	"snfs/nfs3"
	"snfs/xdr"
)

// FshMode is fsh4_mode: what a share reservation denies to others. The values
// are bit sets (deny read 1, deny write 2) and must not change.
type FshMode uint32

// fsh4_mode values.
const (
	DenyNone      FshMode = 0 // fsm_DN
	DenyRead      FshMode = 1 // fsm_DR
	DenyWrite     FshMode = 2 // fsm_DW
	DenyReadWrite FshMode = 3 // fsm_DRW
)

// FshAccess is fsh4_access: what a share reservation opens the file for (read
// 1, write 2, as bits).
type FshAccess uint32

// fsh4_access values.
const (
	AccessNone      FshAccess = 0 // fsa_NONE
	AccessRead      FshAccess = 1 // fsa_R
	AccessWrite     FshAccess = 2 // fsa_W
	AccessReadWrite FshAccess = 3 // fsa_RW
)

func (m FshMode) String() string {
	if m <= DenyReadWrite {
		return [...]string{"fsm_DN", "fsm_DR", "fsm_DW", "fsm_DRW"}[m]
	}
	return fmt.Sprintf("fsh4_mode(%d)", uint32(m))
}

func (a FshAccess) String() string {
	if a <= AccessReadWrite {
		return [...]string{"fsa_NONE", "fsa_R", "fsa_W", "fsa_RW"}[a]
	}
	return fmt.Sprintf("fsh4_access(%d)", uint32(a))
}

// Share is nlm4_share: a DOS-style share reservation on a whole file by an
// owner (XNFS chapter 10, "Share Reservations").
type Share struct {
	CallerName string
	FH         nfs3.FH // at most MaxFH bytes
	OH         []byte  // at most MaxNetobj bytes
	Mode       FshMode
	Access     FshAccess
}

// Encode implements xdr.Encoder.
func (s *Share) Encode(w *xdr.Writer) {
	w.String(s.CallerName)
	w.Opaque(s.FH)
	w.Opaque(s.OH)
	w.Uint32(uint32(s.Mode))
	w.Uint32(uint32(s.Access))
}

// Decode implements xdr.Decoder.
func (s *Share) Decode(r *xdr.Reader) error {
	s.CallerName = r.String(MaxStrLen)
	s.FH = nfs3.FH(r.Opaque(MaxFH))
	s.OH = r.Opaque(MaxNetobj)
	s.Mode = FshMode(r.Enum(4))
	s.Access = FshAccess(r.Enum(4))
	return r.Err()
}

// ShareArgs is nlm4_shareargs (XNFS chapter 10, NLM_SHARE and NLM_UNSHARE;
// RFC 1813 Appendix II, NLMPROC4_SHARE and NLMPROC4_UNSHARE): the argument of
// SHARE (20), take a share reservation, and UNSHARE (21), release it. Reclaim
// is as in LockArgs. There is no _MSG form.
type ShareArgs struct {
	Cookie  []byte // at most MaxNetobj bytes
	Share   Share
	Reclaim bool
}

// Encode implements xdr.Encoder.
func (a *ShareArgs) Encode(w *xdr.Writer) {
	w.Opaque(a.Cookie)
	a.Share.Encode(w)
	w.Bool(a.Reclaim)
}

// Decode implements xdr.Decoder.
func (a *ShareArgs) Decode(r *xdr.Reader) error {
	a.Cookie = r.Opaque(MaxNetobj)
	a.Share.Decode(r)
	a.Reclaim = r.Bool()
	return r.Err()
}

// ShareRes is nlm4_shareres, the result of SHARE and UNSHARE. Sequence is
// unused (Linux's lockd and XNFS's reference send 0).
type ShareRes struct {
	Cookie   []byte // at most MaxNetobj bytes
	Stat     Stat
	Sequence int32
}

// SetStatus implements Result.
func (x *ShareRes) SetStatus(s Stat) { x.Stat = s }

// Encode implements xdr.Encoder.
func (x *ShareRes) Encode(w *xdr.Writer) {
	w.Opaque(x.Cookie)
	w.Uint32(uint32(x.Stat))
	w.Int32(x.Sequence)
}

// Decode implements xdr.Decoder.
func (x *ShareRes) Decode(r *xdr.Reader) error {
	x.Cookie = r.Opaque(MaxNetobj)
	x.Stat = decodeStat(r)
	x.Sequence = r.Int32()
	return r.Err()
}
