package server

import (
	"context"

	"snfs/nfs3"
	"snfs/store"
	"snfs/sunrpc"
)

// rename is RENAME (RFC 1813 section 3.3.14): rename, replacing the target. The
// table resolves the source directory (from); the target's is resolved here.
func (s *Server) rename(ctx context.Context, c *sunrpc.Call, from *req, a *nfs3.RenameArgs, res *nfs3.RenameRes) {
	res.FromWcc.Before = wccAttr(&from.node.Stat)
	to, err := s.resolveWrite(c, a.To.Dir)
	if err != nil {
		res.Status = statusOf(err)
		res.FromWcc.After = from.attr()
		return
	}
	defer to.release()
	// A directory the rename replaces is removed: its write-back permit
	// ends as at RMDIR (docs/protocol.md section 21.6). Not when the name
	// is the moved object's own (a rename onto itself changes nothing).
	var replaced []byte
	if s.consist.PermitsActive() {
		if replaced = s.handleIn(to, a.To.Name); replaced != nil && string(replaced) == string(s.handleIn(from, a.From.Name)) {
			replaced = nil
		}
	}
	res.ToWcc.Before = wccAttr(&to.node.Stat)
	err = func() error {
		if from.exp != to.exp {
			return nfs3.ErrXDev
		}
		if err := checkName(a.From.Name); err != nil {
			return err
		}
		if err := checkName(a.To.Name); err != nil {
			return err
		}
		if err := store.As(from.cred, func() error {
			return s.store.Rename(from.node, a.From.Name, to.node, a.To.Name)
		}); err != nil {
			return err
		}
		if err := s.commitMeta(from); err != nil {
			return err
		}
		if to.node.Stat.Ino != from.node.Stat.Ino || to.node.Stat.Dev != from.node.Stat.Dev {
			return s.commitMeta(to)
		}
		return nil
	}()
	res.FromWcc.After = from.attr()
	res.ToWcc.After = to.attr()
	res.Status = statusOf(err)
	if replaced != nil && err == nil {
		s.consist.PermitDirRemoved(s.consist.Caller(c), replaced)
	}
}
