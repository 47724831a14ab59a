package server

import (
	"context"

	"snfs/lockmgr"
	"snfs/snfs1"
	"snfs/sunrpc"
)

// lock is LOCK (docs/protocol.md, "LOCK"; NLM4 LOCK of the Open Group's XNFS
// is its model): a byte-range lock for the client's lock owner. It never
// waits: a blocking request that conflicts is answered LOCK_BLOCKED, and
// CB_GRANTED brings the grant. A conflict probes the holders' callback paths
// (lock leases, locklease.go); a client whose locks were revoked is told
// once (SNFS_ERR_FENCED). A reclaim (docs/protocol.md, "Server restart")
// is taken only from a client that may still reclaim in the grace period
// (SNFS_ERR_NOGRACE otherwise), and never waits.
func (s *Server) lock(ctx context.Context, c *sunrpc.Call, r *req, a *snfs1.LockArgs, res *snfs1.LockRes) {
	mid, err := s.consist.Client(a.Client)
	if err == nil {
		err = s.locksRevoked(mid)
	}
	if err == nil && a.Reclaim {
		err = s.consist.MayReclaim(a.Client) // SNFS_ERR_NOGRACE: its grace is over
	}
	if err == nil {
		err = s.mayLock(r)
	}
	if err != nil {
		res.Status = statusOf(err)
		return
	}
	s.syncLockGrace()
	k := lockmgr.FileKey(a.File)
	var g grant
	if a.Delegate && !a.Reclaim {
		g = s.delegs.prepare(k, mid, a.File) // lock delegation (lockdeleg.go)
	}
	lr := s.locks.Lock(lockmgr.LockArgs{File: k, Owner: snfsOwner(mid, a.Owner),
		Type: lockType(a.Type), Range: lockRange(a.Offset, a.Length), Block: a.Block, Reclaim: a.Reclaim})
	lockResult(lr, res)
	res.Delegated = s.delegs.finish(k, mid, g, lr.Verdict == lockmgr.Granted)
	if (lr.Verdict == lockmgr.Denied && !lr.Local) || lr.Verdict == lockmgr.Blocked {
		s.probeLockHolders(mid, lockmgr.FileKey(a.File), lockType(a.Type), lockRange(a.Offset, a.Length)) // lock leases (locklease.go)
	}
}
