package server

import (
	"context"

	"snfs/nsm"
	"snfs/sunrpc"
	"snfs/xdr"
)

// smNotify is SM_NOTIFY (XNFS chapter 11, SM_NOTIFY): the status monitor of
// host MonName says it restarted. Its lock manager's locks here are void:
// every lock, waiting request and share reservation of that host is released
// and its record removed. The host is the NLM client whose caller_name is
// MonName; if none is (a client whose caller_name and status monitor name
// differ), the NLM clients at the address the notification comes from. No
// reply.
func (s *Server) smNotify(ctx context.Context, c *sunrpc.Call, args *xdr.Reader, w *xdr.Writer) error {
	var a nsm.StatChge
	if a.Decode(args) != nil {
		return sunrpc.ErrGarbageArgs
	}
	ip := callerIP(c)
	if a.MonName == s.nlm.hostname && a.State == s.nlm.nsm.state {
		// This server's own SM_NOTIFY after its restart, come back because a
		// client on this machine shares its rpcbind (a client of 127.0.0.1).
		return nil
	}
	hs := s.nlm.gone(func(h *nlmHost) bool { return h.name == a.MonName })
	if len(hs) == 0 {
		hs = s.nlm.gone(func(h *nlmHost) bool { return h.ip == ip })
	}
	for _, h := range hs {
		s.nlm.nsm.forget(h.name, h.ip)
	}
	s.nlm.nsm.forget(a.MonName, ip) // recorded before a restart of this server
	s.nlm.addrs.forget(ip)          // its lock manager's ports may have changed
	s.log.Info("NSM SM_NOTIFY: a client restarted; its locks are released", "client", a.MonName, "state", a.State,
		"addr", ip, "hosts", len(hs))
	return nil
}
