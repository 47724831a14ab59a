package server

import (
	"context"

	"snfs/nfs3"
	"snfs/sunrpc"
)

// getattr is GETATTR (RFC 1813 section 3.3.1): the attributes of an object.
func (s *Server) getattr(ctx context.Context, c *sunrpc.Call, r *req, a *nfs3.FHArgs, res *nfs3.GetattrRes) {
	res.Attr = *fattr(&r.node.Stat, r.fsid())
}
