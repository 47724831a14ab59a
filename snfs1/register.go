package snfs1

import "snfs/xdr"

// RegisterArgs is REGISTER1args (docs/protocol.md, "REGISTER"): a client
// introduces itself, and this connection becomes its callback path.
type RegisterArgs struct {
	Name       []byte   // stable and unique per client instance, at most NameLen bytes
	ClientVerf Verifier // changes whenever the client restarts
}

// Encode implements xdr.Encoder.
func (a *RegisterArgs) Encode(w *xdr.Writer) { w.Opaque(a.Name); w.FixedOpaque(a.ClientVerf[:]) }

// Decode implements xdr.Decoder.
func (a *RegisterArgs) Decode(r *xdr.Reader) error {
	a.Name = append([]byte(nil), r.Opaque(NameLen)...)
	a.ClientVerf.decode(r)
	if r.Err() == nil && len(a.Name) == 0 {
		r.SetErr(errEmptyName)
	}
	return r.Err()
}

// RegisterRes is REGISTER1res.
type RegisterRes struct {
	Status     Status
	Client     ClientID // when OK
	ServerVerf Verifier // when OK: changes whenever the server restarts
	// CallbackTimeoutMs is how long the server waits for a CALLBACK's answer
	// before it fences the client for the file (when OK).
	CallbackTimeoutMs uint32
}

// SetStatus sets the status of a failure result.
func (x *RegisterRes) SetStatus(s Status) { x.Status = s }

// Encode implements xdr.Encoder.
func (x *RegisterRes) Encode(w *xdr.Writer) {
	w.Uint32(uint32(x.Status))
	if x.Status == 0 {
		w.Uint64(uint64(x.Client))
		w.FixedOpaque(x.ServerVerf[:])
		w.Uint32(x.CallbackTimeoutMs)
	}
}

// Decode implements xdr.Decoder.
func (x *RegisterRes) Decode(r *xdr.Reader) error {
	if x.Status = decodeStatus(r); x.Status == 0 {
		x.Client = ClientID(r.Uint64())
		x.ServerVerf.decode(r)
		x.CallbackTimeoutMs = r.Uint32()
	}
	return r.Err()
}
