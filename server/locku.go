package server

import (
	"context"

	"snfs/lockmgr"
	"snfs/snfs1"
	"snfs/sunrpc"
)

// locku is LOCKU (docs/protocol.md, "LOCKU"; NLM4 UNLOCK and CANCEL): release
// the owner's locks on a range (idempotent: releasing nothing succeeds), or
// withdraw its waiting request. A file removed meanwhile still has its locks
// released.
func (s *Server) locku(ctx context.Context, c *sunrpc.Call, r *req, a *snfs1.LockUArgs, res *snfs1.StatusRes) {
	mid, err := s.consist.Client(a.Client)
	if err == nil {
		err = s.locksRevoked(mid) // lock leases (locklease.go): nothing is held
	}
	if err != nil {
		res.Status = statusOf(err)
		return
	}
	k, o, rg := lockmgr.FileKey(a.File), snfsOwner(mid, a.Owner), lockRange(a.Offset, a.Length)
	if a.Cancel {
		s.locks.Cancel(lockmgr.CancelArgs{File: k, Owner: o, Type: lockType(a.Type), Range: rg})
		return
	}
	if v := s.locks.Unlock(k, o, rg); v == lockmgr.NoLocks {
		res.Status = statusOf(errJukebox) // the split would pass the client's bound
	}
}
