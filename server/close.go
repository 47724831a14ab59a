package server

import (
	"context"

	"snfs/snfs1"
	"snfs/sunrpc"
)

// close is CLOSE (docs/protocol.md, "CLOSE"; Spritely NFS section 3.1): one open
// of the mode fewer; dirty says whether the client still holds data not yet
// written back. It never waits for callbacks.
func (s *Server) close(ctx context.Context, c *sunrpc.Call, r *req, a *snfs1.CloseArgs, res *snfs1.CloseRes) {
	mid, err := s.consist.Client(a.Client)
	if err == nil {
		err = s.consist.Close(mid, a.File, a.Mode, a.Dirty)
	}
	if err != nil {
		res.Status = statusOf(err)
		return
	}
	if r.node != nil { // nil: the file is gone (replaced or removed by another client); its open is closed all the same
		res.Attr = fattr(&r.node.Stat, r.fsid()) // read when r was resolved, as GETATTR's
	}
}
