package server

import (
	"context"

	"golang.org/x/sys/unix"

	"snfs/nfs3"
	"snfs/sunrpc"
)

// mkdir is MKDIR (RFC 1813 section 3.3.9): make a directory.
func (s *Server) mkdir(ctx context.Context, c *sunrpc.Call, r *req, a *nfs3.MkdirArgs, res *nfs3.CreateRes) {
	mode := uint32(0o755)
	if a.Attr.Mode != nil {
		mode = *a.Attr.Mode
	}
	s.makeNode(r, &a.Where, &a.Attr, res, func(r *req) ([]byte, unix.Stat_t, error) {
		return s.store.Mkdir(r.node, a.Where.Name, mode)
	})
}
