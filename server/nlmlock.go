package server

import (
	"snfs/lockmgr"
	"snfs/nlm4"
	"snfs/sunrpc"
)

// nlmLock is NLM4 LOCK and LOCK_MSG (XNFS chapter 10, NLM_LOCK; RFC 1813
// Appendix II, NLMPROC4_LOCK). It never waits: a blocking request that
// conflicts is answered NLM4_BLOCKED, and a GRANTED call to the client brings
// the grant (nlmService.granted). A retransmitted or re-sent blocking LOCK
// (Linux's client asks again every 30 s) keeps its place in the queue. The
// client host is recorded on disk at its first lock, so that it is sent
// SM_NOTIFY after a restart of this server (nsm.go).
func (s *Server) nlmLock(c *sunrpc.Call, a *nlm4.LockArgs, res *nlm4.Res) {
	s.nlmDoLock(c, a, res, true)
}

// nlmNMLock is NLM4 NM_LOCK (XNFS chapter 10, NLM_NM_LOCK; RFC 1813 Appendix
// II, NLMPROC4_NM_LOCK): LOCK from a client that runs no status monitor. It
// is not recorded for SM_NOTIFY (the client tells of its restarts with
// FREE_ALL), and it never blocks.
func (s *Server) nlmNMLock(c *sunrpc.Call, a *nlm4.LockArgs, res *nlm4.Res) {
	a.Block = false
	s.nlmDoLock(c, a, res, false)
}

func (s *Server) nlmDoLock(c *sunrpc.Call, a *nlm4.LockArgs, res *nlm4.Res, monitor bool) {
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
	if monitor {
		if err := s.nlm.nsm.monitor(h.name, h.ip); err != nil {
			s.log.Error("NLM: cannot record the client for SM_NOTIFY", "client", h.name, "err", err)
			res.Stat = nlm4.DeniedNoLocks
			return
		}
	}
	req := s.locks.NewReq()
	if a.Block {
		s.nlm.wait(req, h, c.Network, a)
	}
	r := s.locks.Lock(lockmgr.LockArgs{Req: req, File: k, Owner: lockmgr.NLMOwner(h.id, uint32(a.Lock.Svid), a.Lock.OH),
		Type: nlmType(a.Exclusive), Range: lockmgr.RangeOf(a.Lock.Offset, a.Lock.Len), Block: a.Block, Reclaim: a.Reclaim})
	if a.Block && (r.Verdict != lockmgr.Blocked || r.Req != req) {
		s.nlm.unwait(req) // granted or refused now, or a re-sent request whose first one waits
	}
	res.Stat = nlmStat(r.Verdict)
}
