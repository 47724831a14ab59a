package server

import (
	"context"

	"snfs/nlm4"
	"snfs/sunrpc"
	"snfs/xdr"
)

// nlmFreeAll is NLM4 FREE_ALL (XNFS chapter 10, NLM_FREE_ALL; RFC 1813
// Appendix II, NLMPROC4_FREE_ALL): a client that restarted (one that locked
// with NM_LOCK and runs no status monitor) releases every lock and share
// reservation its host name holds, from the address it calls from. No reply.
func (s *Server) nlmFreeAll(ctx context.Context, c *sunrpc.Call, args *xdr.Reader, w *xdr.Writer) error {
	var a nlm4.Notify
	if a.Decode(args) != nil {
		return sunrpc.ErrGarbageArgs
	}
	ip := callerIP(c)
	hs := s.nlm.gone(func(h *nlmHost) bool { return h.name == a.Name && h.ip == ip })
	for _, h := range hs {
		s.nlm.nsm.forget(h.name, h.ip)
	}
	s.log.Info("NLM FREE_ALL: the client's locks are released", "client", a.Name, "addr", ip, "hosts", len(hs))
	return nil
}
