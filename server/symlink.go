package server

import (
	"context"

	"golang.org/x/sys/unix"

	"snfs/nfs3"
	"snfs/sunrpc"
)

// symlink is SYMLINK (RFC 1813 section 3.3.10): make a symbolic link. The target is
// stored as given; the server never follows it.
func (s *Server) symlink(ctx context.Context, c *sunrpc.Call, r *req, a *nfs3.SymlinkArgs, res *nfs3.CreateRes) {
	s.makeNode(r, &a.Where, &a.Attr, res, func(r *req) ([]byte, unix.Stat_t, error) {
		if a.Path == "" {
			return nil, unix.Stat_t{}, nfs3.ErrInval
		}
		return s.store.Symlink(r.node, a.Where.Name, a.Path)
	})
}
