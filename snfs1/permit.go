package snfs1

import (
	"snfs/nfs3"
	"snfs/xdr"
)

// Write-back permits (docs/protocol.md section 21): GET_PERMIT asks for one
// on a directory, PERMIT_RELEASE gives permits back, REINTEGRATE
// (reintegrate.go) applies a client's modification log under them.

// PermitReleaseMax is SNFS_PERMIT_RELEASE_MAX: the most permits one
// PERMIT_RELEASE gives back, and the most one REINTEGRATE names.
const PermitReleaseMax = 256

// GetPermitArgs is GET_PERMIT1args (docs/protocol.md, "GET_PERMIT").
type GetPermitArgs struct {
	Client ClientID
	Dir    nfs3.FH
}

// Encode implements xdr.Encoder.
func (a *GetPermitArgs) Encode(w *xdr.Writer) {
	w.Uint64(uint64(a.Client))
	w.Opaque(a.Dir)
}

// Decode implements xdr.Decoder. Dir aliases the reader's buffer.
func (a *GetPermitArgs) Decode(r *xdr.Reader) error {
	a.Client = ClientID(r.Uint64())
	a.Dir = nfs3.DecodeFH(r)
	return r.Err()
}

// GetPermitRes is GET_PERMIT1res: a failure is its status alone; on success,
// whether the permit is granted and, if it is, its id (never 0).
type GetPermitRes struct {
	Status  Status
	Granted bool
	Permit  uint64 // when Granted
}

// SetStatus sets the status of a failure result.
func (x *GetPermitRes) SetStatus(s Status) { x.Status = s }

// Encode implements xdr.Encoder.
func (x *GetPermitRes) Encode(w *xdr.Writer) {
	w.Uint32(uint32(x.Status))
	if x.Status != 0 {
		return
	}
	w.Bool(x.Granted)
	if x.Granted {
		w.Uint64(x.Permit)
	}
}

// Decode implements xdr.Decoder.
func (x *GetPermitRes) Decode(r *xdr.Reader) error {
	*x = GetPermitRes{Status: decodeStatus(r)}
	if x.Status != 0 || r.Err() != nil {
		return r.Err()
	}
	if x.Granted = r.Bool(); x.Granted {
		x.Permit = r.Uint64()
	}
	return r.Err()
}

// PermitRef is permitref1: a permit a client holds, by its directory and id.
type PermitRef struct {
	Dir    nfs3.FH
	Permit uint64
}

func (p *PermitRef) encode(w *xdr.Writer) {
	w.Opaque(p.Dir)
	w.Uint64(p.Permit)
}

func (p *PermitRef) decode(r *xdr.Reader) {
	p.Dir = nfs3.DecodeFH(r)
	p.Permit = r.Uint64()
}

func encodePermitRefs(w *xdr.Writer, ps []PermitRef) {
	w.Uint32(uint32(len(ps)))
	for i := range ps {
		ps[i].encode(w)
	}
}

func decodePermitRefs(r *xdr.Reader) []PermitRef {
	n := r.Uint32()
	if r.Err() == nil && n > PermitReleaseMax {
		r.SetErr(xdr.ErrTooLong)
	}
	if r.Err() != nil || n == 0 {
		return nil
	}
	ps := make([]PermitRef, 0, min(n, 16))
	for range n {
		var p PermitRef
		p.decode(r)
		if r.Err() != nil {
			return nil
		}
		ps = append(ps, p)
	}
	return ps
}

// PermitReleaseArgs is PERMIT_RELEASE1args (docs/protocol.md,
// "PERMIT_RELEASE"): the permits a client gives back. The result is a
// status alone (StatusRes).
type PermitReleaseArgs struct {
	Client  ClientID
	Permits []PermitRef
}

// Encode implements xdr.Encoder.
func (a *PermitReleaseArgs) Encode(w *xdr.Writer) {
	w.Uint64(uint64(a.Client))
	encodePermitRefs(w, a.Permits)
}

// Decode implements xdr.Decoder. The handles alias the reader's buffer.
func (a *PermitReleaseArgs) Decode(r *xdr.Reader) error {
	a.Client = ClientID(r.Uint64())
	a.Permits = decodePermitRefs(r)
	return r.Err()
}

// PermitReleaseRes is PERMIT_RELEASE1res.
type PermitReleaseRes = StatusRes
