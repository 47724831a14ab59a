package server

import (
	"context"

	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/sunrpc"
	"snfs/xdr"
)

// register is REGISTER (docs/protocol.md, "REGISTER"): a client introduces
// itself by name and boot verifier; the connection it came on becomes its
// callback path, and the server probes that path before it grants caching.
func (s *Server) register(ctx context.Context, c *sunrpc.Call, args *xdr.Reader, w *xdr.Writer) error {
	var a snfs1.RegisterArgs
	if a.Decode(args) != nil {
		return sunrpc.ErrGarbageArgs
	}
	var res snfs1.RegisterRes
	if c.Conn == nil {
		res.Status = nfs3.ErrNotSupp
		res.Encode(w)
		return nil
	}
	id, err := s.consist.Register(c.Conn, a.Name, a.ClientVerf)
	if err != nil {
		s.log.Error("REGISTER failed", "client", string(a.Name), "err", err)
		res.Status = statusOf(err)
		res.Encode(w)
		return nil
	}
	res.Client, res.ServerVerf = id, s.consist.ServerVerifier()
	res.CallbackTimeoutMs = uint32(s.consist.CallbackTimeout().Milliseconds())
	res.Encode(w)
	return nil
}
