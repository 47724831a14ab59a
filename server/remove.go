package server

import (
	"context"

	"golang.org/x/sys/unix"

	"snfs/nfs3"
	"snfs/store"
	"snfs/sunrpc"
)

// remove is REMOVE (RFC 1813 section 3.3.12): unlink a non-directory.
func (s *Server) remove(ctx context.Context, c *sunrpc.Call, r *req, a *nfs3.DirOpArgs, res *nfs3.WccRes) {
	s.unlink(r, a, res, func(r *req) error { return s.store.Remove(r.node, a.Name) })
}

// unlink is the common body of REMOVE and RMDIR in the directory r.
func (s *Server) unlink(r *req, a *nfs3.DirOpArgs, res *nfs3.WccRes, op func(r *req) error) {
	res.Wcc.Before = wccAttr(&r.node.Stat)
	err := func() error {
		if r.node.Stat.Mode&unix.S_IFMT != unix.S_IFDIR {
			return nfs3.ErrNotDir
		}
		if err := checkName(a.Name); err != nil {
			return err
		}
		if err := store.As(r.cred, func() error { return op(r) }); err != nil {
			return err
		}
		return s.commitMeta(r)
	}()
	res.Wcc.After = r.attr()
	res.Status = statusOf(err)
}
