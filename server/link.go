package server

import (
	"context"

	"snfs/nfs3"
	"snfs/store"
	"snfs/sunrpc"
)

// link is LINK (RFC 1813 section 3.3.15): make a hard link. The table resolves the
// file; the directory of the new name is resolved here.
func (s *Server) link(ctx context.Context, c *sunrpc.Call, file *req, a *nfs3.LinkArgs, res *nfs3.LinkRes) {
	dir, err := s.resolveWrite(c, a.Link.Dir)
	if err != nil {
		res.Status = statusOf(err)
		res.Attr = file.attr()
		return
	}
	defer dir.release()
	res.LinkWcc.Before = wccAttr(&dir.node.Stat)
	err = func() error {
		if file.exp != dir.exp {
			return nfs3.ErrXDev
		}
		if err := checkName(a.Link.Name); err != nil {
			return err
		}
		if err := store.As(dir.cred, func() error { return s.store.Link(file.node, dir.node, a.Link.Name) }); err != nil {
			return err
		}
		if err := s.commitObj(file); err != nil { // the link count
			return err
		}
		return s.commitMeta(dir)
	}()
	res.Attr = file.attr()
	res.LinkWcc.After = dir.attr()
	res.Status = statusOf(err)
}
