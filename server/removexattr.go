package server

import (
	"context"

	"snfs/snfs1"
	"snfs/store"
	"snfs/sunrpc"
)

// removeXattr is REMOVEXATTR (docs/protocol.md, "REMOVEXATTR"; RFC 8276
// section 8.4.5): remove one extended attribute of the user namespace
// (NOXATTR if there is none), with the caller's identity (the kernel checks
// write permission), durable before the reply as SETXATTR's change.
func (s *Server) removeXattr(ctx context.Context, c *sunrpc.Call, r *req, a *snfs1.RemoveXattrArgs, res *snfs1.RemoveXattrRes) {
	if err := checkXattrName(a.Name); err != nil {
		res.Status = statusOf(err)
		return
	}
	res.Wcc.Before = wccAttr(&r.node.Stat)
	err := store.As(r.cred, func() error { return s.store.RemoveXattr(r.node, a.Name) })
	res.Status, res.Wcc.After = s.xattrChanged(r, err)
}
