package server

import (
	"context"

	"snfs/consist"
	"snfs/nfs3"
	"snfs/sunrpc"
)

// commit is COMMIT (RFC 1813 section 3.3.21): everything written to the file is on
// stable storage before the reply. Concurrent COMMITs, and the stable writes being
// gathered for the same file, share one fsync (package gather). A failed flush
// changes the write verifier, so clients write their uncommitted data again.
// During the grace period after a restart it is NFS3ERR_JUKEBOX but for a
// reclaiming client's own file, as the other calls of the coexistence gate.
// A protocol client fenced for the file is refused with SNFS_ERR_FENCED
// (docs/protocol.md section 13) and, as every call the gate refuses, gets
// the failure arm with no attributes: COMMIT takes no part in the table (it
// never waits), so it asks the table directly.
func (s *Server) commit(ctx context.Context, c *sunrpc.Call, r *req, a *nfs3.CommitArgs, res *nfs3.CommitRes) {
	if s.consist.Active() && s.consist.Fenced(s.consist.Caller(c), a.File) {
		res.Status = statusOf(consist.ErrFenced)
		return
	}
	res.Wcc.Before = wccAttr(&r.node.Stat)
	verf := s.Verifier()
	after, err := func() (*nfs3.Fattr, error) {
		if err := regularFile(r); err != nil {
			return r.attr(), err
		}
		if err := s.store.OpenIO(r.node); err != nil {
			return r.attr(), err
		}
		if s.consist.InGrace() {
			if err := s.consist.GraceAccess(s.consist.Caller(c), a.File); err != nil {
				return r.attr(), err
			}
		}
		after, err := s.waitFlush(c, r, r.exp.gather.Begin(r.node.Key()), false)
		if err != nil {
			return r.attr(), err
		}
		return after, nil
	}()
	res.Wcc.After = after
	res.Status = statusOf(err)
	res.Verf = verf
}
