package sunrpc

import (
	"fmt"

	"snfs/xdr"
)

// Credential limits of RFC 5531 appendix A.
const (
	maxMachineName = 255
	maxAuthSysGIDs = 16
)

// AuthSysParams is an authsys_parms credential. A call with AUTH_NONE is given
// the zero value with Flavor AuthNone, and the program decides what it maps to.
type AuthSysParams struct {
	Flavor      uint32
	Stamp       uint32
	MachineName string
	UID         uint32
	GID         uint32
	GIDs        []uint32
}

// DecodeAuthSys decodes an AUTH_SYS credential body.
func DecodeAuthSys(body []byte) (AuthSysParams, error) {
	r := xdr.NewReader(body)
	p := AuthSysParams{Flavor: AuthSys}
	p.Stamp = r.Uint32()
	p.MachineName = r.String(maxMachineName)
	p.UID = r.Uint32()
	p.GID = r.Uint32()
	n := r.ArrayLen(maxAuthSysGIDs, 4)
	if n > 0 {
		p.GIDs = make([]uint32, n)
		for i := range p.GIDs {
			p.GIDs[i] = r.Uint32()
		}
	}
	if err := r.Err(); err != nil {
		return p, fmt.Errorf("sunrpc: AUTH_SYS credential: %w", err)
	}
	if r.Remaining() != 0 {
		return p, fmt.Errorf("sunrpc: AUTH_SYS credential: %d trailing bytes", r.Remaining())
	}
	return p, nil
}

// EncodeAuthSys returns the opaque_auth for an AUTH_SYS credential.
func EncodeAuthSys(p AuthSysParams) OpaqueAuth {
	var w xdr.Writer
	w.Uint32(p.Stamp)
	w.String(p.MachineName)
	w.Uint32(p.UID)
	w.Uint32(p.GID)
	w.Uint32(uint32(len(p.GIDs)))
	for _, g := range p.GIDs {
		w.Uint32(g)
	}
	return OpaqueAuth{Flavor: AuthSys, Body: w.Bytes()}
}
