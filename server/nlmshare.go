package server

import (
	"snfs/lockmgr"
	"snfs/nlm4"
	"snfs/sunrpc"
)

// nlmShare is NLM4 SHARE (XNFS chapter 10, NLM_SHARE, "Share Reservations";
// RFC 1813 Appendix II, NLMPROC4_SHARE): a DOS share reservation of the whole
// file by (host, oh). It never waits. The reservations are the lock
// manager's only: they do not reach the backing file.
func (s *Server) nlmShare(c *sunrpc.Call, a *nlm4.ShareArgs, res *nlm4.ShareRes) {
	res.Cookie = a.Cookie
	k, err := s.nlmFile(c, a.Share.FH)
	if err != nil {
		res.Stat = nlmErrStat(err)
		return
	}
	h := s.nlm.host(a.Share.CallerName, callerIP(c))
	if h == nil {
		res.Stat = nlm4.DeniedNoLocks
		return
	}
	v := s.locks.Share(lockmgr.ShareArgs{File: k, Owner: lockmgr.Owner{Client: h.id, ID: string(a.Share.OH)},
		Mode: lockmgr.ShareMode(a.Share.Mode), Access: lockmgr.ShareAccess(a.Share.Access), Reclaim: a.Reclaim})
	res.Stat = nlmStat(v)
}

// nlmUnshare is NLM4 UNSHARE (XNFS chapter 10, NLM_UNSHARE; RFC 1813
// Appendix II, NLMPROC4_UNSHARE): withdraw the owner's share reservation.
func (s *Server) nlmUnshare(c *sunrpc.Call, a *nlm4.ShareArgs, res *nlm4.ShareRes) {
	res.Cookie = a.Cookie
	h := s.nlm.host(a.Share.CallerName, callerIP(c))
	if h == nil {
		res.Stat = nlm4.DeniedNoLocks
		return
	}
	res.Stat = nlmStat(s.locks.Unshare(lockmgr.FileKey(a.Share.FH), lockmgr.Owner{Client: h.id, ID: string(a.Share.OH)}))
}
