package server

import (
	"context"

	"snfs/nfs3"
	"snfs/sunrpc"
)

// readdirplus is READDIRPLUS (RFC 1813 section 3.3.17): READDIR with each entry's
// attributes and handle.
func (s *Server) readdirplus(ctx context.Context, c *sunrpc.Call, r *req, a *nfs3.ReaddirplusArgs, res *nfs3.ReaddirRes) {
	s.listDir(c, r, a.Cookie, a.DirCount, a.MaxCount, true, res)
}
