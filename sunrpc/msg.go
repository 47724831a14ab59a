package sunrpc

import (
	"errors"
	"fmt"

	"snfs/xdr"
)

// Message types and reply/accept/reject/auth status values from RFC 5531 section 9.
const (
	msgCall  = 0
	msgReply = 1

	rpcVersion = 2

	msgAccepted = 0
	msgDenied   = 1

	rpcMismatch = 0
	authError   = 1
)

// AcceptStat is the accept_stat of an accepted reply.
type AcceptStat uint32

// accept_stat values.
const (
	Success      AcceptStat = 0
	ProgUnavail  AcceptStat = 1
	ProgMismatch AcceptStat = 2
	ProcUnavail  AcceptStat = 3
	GarbageArgs  AcceptStat = 4
	SystemErr    AcceptStat = 5
)

func (s AcceptStat) String() string {
	switch s {
	case Success:
		return "SUCCESS"
	case ProgUnavail:
		return "PROG_UNAVAIL"
	case ProgMismatch:
		return "PROG_MISMATCH"
	case ProcUnavail:
		return "PROC_UNAVAIL"
	case GarbageArgs:
		return "GARBAGE_ARGS"
	case SystemErr:
		return "SYSTEM_ERR"
	}
	return fmt.Sprintf("accept_stat(%d)", uint32(s))
}

// AuthStat is the auth_stat of an AUTH_ERROR rejection.
type AuthStat uint32

// auth_stat values.
const (
	AuthOK           AuthStat = 0
	AuthBadCred      AuthStat = 1
	AuthRejectedCred AuthStat = 2
	AuthBadVerf      AuthStat = 3
	AuthRejectedVerf AuthStat = 4
	AuthTooWeak      AuthStat = 5
)

// Auth flavors.
const (
	AuthNone  = 0
	AuthSys   = 1
	maxAuthSz = 400 // opaque_auth body limit, RFC 5531 section 8.2
)

// OpaqueAuth is an opaque_auth: a flavor and up to 400 bytes of body.
type OpaqueAuth struct {
	Flavor uint32
	Body   []byte
}

func (a *OpaqueAuth) decode(r *xdr.Reader) {
	a.Flavor = r.Uint32()
	a.Body = r.Opaque(maxAuthSz)
}

func (a OpaqueAuth) encode(w *xdr.Writer) {
	w.Uint32(a.Flavor)
	w.Opaque(a.Body)
}

// CallHeader is the header of a call message, up to the procedure arguments.
type CallHeader struct {
	XID  uint32
	Prog uint32
	Vers uint32
	Proc uint32
	Cred OpaqueAuth
	Verf OpaqueAuth
}

// errNotCall marks a message that is not a CALL or has a bad RPC version; the
// server drops the former and answers RPC_MISMATCH to the latter.
var (
	errNotCall     = errors.New("sunrpc: not a call message")
	errRPCMismatch = errors.New("sunrpc: rpc version mismatch")
)

// DecodeCall decodes a call header; on return r is positioned at the arguments.
func DecodeCall(r *xdr.Reader) (CallHeader, error) {
	var h CallHeader
	h.XID = r.Uint32()
	if mt := r.Uint32(); r.Err() == nil && mt != msgCall {
		return h, errNotCall
	}
	if v := r.Uint32(); r.Err() == nil && v != rpcVersion {
		return h, errRPCMismatch
	}
	h.Prog = r.Uint32()
	h.Vers = r.Uint32()
	h.Proc = r.Uint32()
	h.Cred.decode(r)
	h.Verf.decode(r)
	if err := r.Err(); err != nil {
		return h, fmt.Errorf("sunrpc: call header: %w", err)
	}
	return h, nil
}

// EncodeCall writes a call header.
func EncodeCall(w *xdr.Writer, h *CallHeader) {
	w.Uint32(h.XID)
	w.Uint32(msgCall)
	w.Uint32(rpcVersion)
	w.Uint32(h.Prog)
	w.Uint32(h.Vers)
	w.Uint32(h.Proc)
	h.Cred.encode(w)
	h.Verf.encode(w)
}

var nullVerf = OpaqueAuth{Flavor: AuthNone}

// encodeAccepted writes an accepted reply header with the given status.
func encodeAccepted(w *xdr.Writer, xid uint32, stat AcceptStat) {
	w.Uint32(xid)
	w.Uint32(msgReply)
	w.Uint32(msgAccepted)
	nullVerf.encode(w)
	w.Uint32(uint32(stat))
}

func encodeProgMismatch(w *xdr.Writer, xid, low, high uint32) {
	encodeAccepted(w, xid, ProgMismatch)
	w.Uint32(low)
	w.Uint32(high)
}

func encodeRPCMismatch(w *xdr.Writer, xid uint32) {
	w.Uint32(xid)
	w.Uint32(msgReply)
	w.Uint32(msgDenied)
	w.Uint32(rpcMismatch)
	w.Uint32(rpcVersion)
	w.Uint32(rpcVersion)
}

func encodeAuthError(w *xdr.Writer, xid uint32, stat AuthStat) {
	w.Uint32(xid)
	w.Uint32(msgReply)
	w.Uint32(msgDenied)
	w.Uint32(authError)
	w.Uint32(uint32(stat))
}

// RPCError is a reply that was not SUCCESS, as seen by a client.
type RPCError struct {
	Accept   AcceptStat // when Denied is false
	Denied   bool
	Auth     AuthStat // when Denied and not a version mismatch
	Mismatch bool     // PROG_MISMATCH or RPC_MISMATCH
	Low      uint32
	High     uint32
}

func (e *RPCError) Error() string {
	switch {
	case e.Denied && e.Mismatch:
		return fmt.Sprintf("sunrpc: RPC_MISMATCH (supported %d-%d)", e.Low, e.High)
	case e.Denied:
		return fmt.Sprintf("sunrpc: AUTH_ERROR (%d)", e.Auth)
	case e.Mismatch:
		return fmt.Sprintf("sunrpc: PROG_MISMATCH (supported %d-%d)", e.Low, e.High)
	}
	return "sunrpc: " + e.Accept.String()
}

// decodeReply parses a reply header. On success r is positioned at the results.
func decodeReply(r *xdr.Reader) (xid uint32, err error) {
	xid = r.Uint32()
	if mt := r.Uint32(); r.Err() == nil && mt != msgReply {
		return xid, errors.New("sunrpc: expected a reply message")
	}
	switch stat := r.Uint32(); stat {
	case msgAccepted:
		var verf OpaqueAuth
		verf.decode(r)
		as := AcceptStat(r.Uint32())
		if r.Err() != nil {
			break
		}
		switch as {
		case Success:
			return xid, nil
		case ProgMismatch:
			e := &RPCError{Accept: as, Mismatch: true, Low: r.Uint32(), High: r.Uint32()}
			return xid, e
		default:
			return xid, &RPCError{Accept: as}
		}
	case msgDenied:
		switch r.Uint32() {
		case rpcMismatch:
			return xid, &RPCError{Denied: true, Mismatch: true, Low: r.Uint32(), High: r.Uint32()}
		case authError:
			return xid, &RPCError{Denied: true, Auth: AuthStat(r.Uint32())}
		}
	}
	if err := r.Err(); err != nil {
		return xid, fmt.Errorf("sunrpc: reply header: %w", err)
	}
	return xid, errors.New("sunrpc: malformed reply header")
}
