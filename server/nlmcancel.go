package server

import (
	"snfs/lockmgr"
	"snfs/nlm4"
	"snfs/sunrpc"
)

// nlmCancel is NLM4 CANCEL and CANCEL_MSG (XNFS chapter 10, NLM_CANCEL; RFC
// 1813 Appendix II, NLMPROC4_CANCEL): withdraw a blocked LOCK, named by its
// lock. A grant whose GRANTED call is out is backed out. Cancelling nothing
// succeeds, as with Linux's lockd: the client only wants nothing to wait.
func (s *Server) nlmCancel(c *sunrpc.Call, a *nlm4.CancArgs, res *nlm4.Res) {
	res.Cookie = a.Cookie
	h := s.nlm.host(a.Lock.CallerName, callerIP(c))
	if h == nil {
		res.Stat = nlm4.DeniedNoLocks
		return
	}
	k := lockmgr.FileKey(a.Lock.FH)
	o := lockmgr.NLMOwner(h.id, uint32(a.Lock.Svid), a.Lock.OH)
	rg := lockmgr.RangeOf(a.Lock.Offset, a.Lock.Len)
	s.locks.Cancel(lockmgr.CancelArgs{File: k, Owner: o, Type: nlmType(a.Exclusive), Range: rg})
	s.nlm.mu.Lock()
	for req, w := range s.nlm.waiters {
		if w.host == h && w.args.Lock.Svid == a.Lock.Svid && string(w.args.Lock.OH) == string(a.Lock.OH) &&
			string(w.args.Lock.FH) == string(a.Lock.FH) && w.args.Lock.Offset == a.Lock.Offset && w.args.Lock.Len == a.Lock.Len {
			delete(s.nlm.waiters, req)
		}
	}
	s.nlm.mu.Unlock()
	res.Stat = nlm4.Granted
}
