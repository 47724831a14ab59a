package server

import (
	"context"

	"golang.org/x/sys/unix"

	"snfs/nfs3"
	"snfs/sunrpc"
)

// commit is COMMIT (RFC 1813 section 3.3.21): everything written to the file is
// fsync'd before the reply. A failed flush changes the write verifier, so clients
// write their uncommitted data again.
func (s *Server) commit(ctx context.Context, c *sunrpc.Call, a *nfs3.CommitArgs, res *nfs3.CommitRes) {
	r, err := s.resolve(c, a.File)
	if err != nil {
		res.Status = statusOf(err)
		return
	}
	defer r.release()
	res.Wcc.Before = wccAttr(&r.node.Stat)
	verf := s.Verifier()
	err = func() error {
		switch r.node.Stat.Mode & unix.S_IFMT {
		case unix.S_IFREG:
		case unix.S_IFDIR:
			return nfs3.ErrIsDir
		default:
			return nfs3.ErrInval
		}
		if err := s.store.OpenIO(r.node); err != nil {
			return err
		}
		if err := s.store.Sync(r.node, false); err != nil {
			s.flushFailed(err)
			return err
		}
		return nil
	}()
	res.Wcc.After = r.attr()
	res.Status = statusOf(err)
	res.Verf = verf
}
