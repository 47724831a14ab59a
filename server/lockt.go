package server

import (
	"context"

	"snfs/lockmgr"
	"snfs/snfs1"
	"snfs/sunrpc"
)

// lockt is LOCKT (docs/protocol.md, "LOCKT"; NLM4 TEST): the lock a
// non-blocking LOCK would meet, another client's or a process's on the server
// machine (the backing file's F_OFD_GETLK). A mount holding locks also sends
// it to renew its lock lease: SNFS_ERR_FENCED tells it its locks were revoked.
func (s *Server) lockt(ctx context.Context, c *sunrpc.Call, r *req, a *snfs1.LockTArgs, res *snfs1.LockRes) {
	mid, err := s.consist.Client(a.Client)
	if err == nil {
		err = s.locksRevoked(mid) // lock leases (locklease.go); the mount's renewal
	}
	if err == nil && s.lockProbing(mid) {
		// Not while a probe of the client is out: a renewal answered now
		// could vouch for locks the probe is about to revoke.
		err = errJukebox
	}
	if err == nil {
		err = s.mayLock(r)
	}
	if err != nil {
		res.Status = statusOf(err)
		return
	}
	s.syncLockGrace()
	lr := s.locks.Test(lockmgr.FileKey(a.File), snfsOwner(mid, a.Owner), lockType(a.Type), lockRange(a.Offset, a.Length))
	lockResult(lr, res)
}
