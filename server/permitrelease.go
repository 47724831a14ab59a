package server

import (
	"context"

	"snfs/consist"
	"snfs/snfs1"
	"snfs/sunrpc"
	"snfs/xdr"
)

// permitRelease is PERMIT_RELEASE (docs/protocol.md section 21.5): a client
// gives back write-back permits, each named by its directory's handle and
// its id (a permit the client no longer holds, or holds under another id,
// is left alone). Released during its recall, a permit's recall ends: the
// changes it held back go on. The handles are not resolved, as
// DIR_RELEASE's are not.
func (s *Server) permitRelease(ctx context.Context, c *sunrpc.Call, args *xdr.Reader, w *xdr.Writer) error {
	var a snfs1.PermitReleaseArgs
	if a.Decode(args) != nil {
		return sunrpc.ErrGarbageArgs
	}
	mid, err := s.consist.Client(a.Client)
	if err == nil {
		refs := make([]consist.PermitRef, len(a.Permits))
		for i, p := range a.Permits {
			refs[i] = consist.PermitRef{Dir: p.Dir, ID: p.Permit}
		}
		s.consist.PermitRelease(mid, refs)
	}
	res := snfs1.PermitReleaseRes{Status: statusOf(err)}
	res.Encode(w)
	return nil
}
