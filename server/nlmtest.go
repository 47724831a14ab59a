package server

import (
	"snfs/lockmgr"
	"snfs/nlm4"
	"snfs/sunrpc"
)

// nlmTest is NLM4 TEST and TEST_MSG (XNFS chapter 10, NLM_TEST; RFC 1813
// Appendix II, NLMPROC4_TEST): the lock a non-blocking LOCK would meet, another
// client's (NLM or snfs) or a local process's on the backing file (svid 0, no
// oh).
func (s *Server) nlmTest(c *sunrpc.Call, a *nlm4.TestArgs, res *nlm4.TestRes) {
	res.Cookie = a.Cookie
	k, err := s.nlmFile(c, a.Lock.FH)
	if err != nil {
		res.Stat = nlmErrStat(err)
		return
	}
	h := s.nlm.host(a.Lock.CallerName, callerIP(c))
	if h == nil {
		res.Stat = nlm4.DeniedNoLocks
		return
	}
	r := s.locks.Test(k, lockmgr.NLMOwner(h.id, uint32(a.Lock.Svid), a.Lock.OH), nlmType(a.Exclusive),
		lockmgr.RangeOf(a.Lock.Offset, a.Lock.Len))
	res.Stat = nlmStat(r.Verdict)
	if r.Verdict == lockmgr.Denied {
		res.Holder = nlmHolder(r)
	}
}
