package server

import (
	"snfs/lockmgr"
	"snfs/nlm4"
	"snfs/sunrpc"
)

// nlmUnlock is NLM4 UNLOCK and UNLOCK_MSG (XNFS chapter 10, NLM_UNLOCK; RFC
// 1813 Appendix II, NLMPROC4_UNLOCK): release the owner's locks on a range
// (idempotent; a part of a held range splits it). It needs no valid handle
// beyond its bytes: the locks of a file removed meanwhile are released too.
func (s *Server) nlmUnlock(c *sunrpc.Call, a *nlm4.UnlockArgs, res *nlm4.Res) {
	res.Cookie = a.Cookie
	h := s.nlm.host(a.Lock.CallerName, callerIP(c))
	if h == nil {
		res.Stat = nlm4.DeniedNoLocks
		return
	}
	v := s.locks.Unlock(lockmgr.FileKey(a.Lock.FH), lockmgr.NLMOwner(h.id, uint32(a.Lock.Svid), a.Lock.OH),
		lockmgr.RangeOf(a.Lock.Offset, a.Lock.Len))
	res.Stat = nlmStat(v)
}
