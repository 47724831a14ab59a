package server

import (
	"context"

	"golang.org/x/sys/unix"

	"snfs/nfs3"
	"snfs/sunrpc"
)

// rmdir is RMDIR (RFC 1813 section 3.3.13): remove an empty directory.
func (s *Server) rmdir(ctx context.Context, c *sunrpc.Call, a *nfs3.DirOpArgs, res *nfs3.WccRes) {
	switch a.Name {
	case ".":
		res.Status = nfs3.ErrInval
		return
	case "..":
		res.Status = nfs3.ErrNotEmpty
		return
	}
	s.unlink(c, a, res, func(r *req) error {
		err := s.store.Rmdir(r.node, a.Name)
		if isErrno(err, unix.EEXIST) {
			return nfs3.ErrNotEmpty // some file systems say EEXIST for ENOTEMPTY
		}
		return err
	})
}
