package server

import (
	"context"

	"golang.org/x/sys/unix"

	"snfs/nfs3"
	"snfs/store"
	"snfs/sunrpc"
)

// access is ACCESS (RFC 1813 section 3.3.4): which of the requested rights the
// caller has, as the kernel's own permission check answers with the caller's identity.
func (s *Server) access(ctx context.Context, c *sunrpc.Call, r *req, a *nfs3.AccessArgs, res *nfs3.AccessRes) {
	res.Attr = fattr(&r.node.Stat, r.fsid())
	isDir := r.node.Stat.Mode&unix.S_IFMT == unix.S_IFDIR
	var got uint32
	store.As(r.cred, func() error {
		got = s.store.Access(r.node, unix.R_OK|unix.W_OK|unix.X_OK)
		return nil
	})
	if r.opts.ReadOnly {
		got &^= unix.W_OK
	}
	var bits uint32
	if got&unix.R_OK != 0 {
		bits |= nfs3.AccessRead
	}
	if got&unix.W_OK != 0 {
		bits |= nfs3.AccessModify | nfs3.AccessExtend
		if isDir {
			bits |= nfs3.AccessDelete
		}
	}
	if got&unix.X_OK != 0 {
		if isDir {
			bits |= nfs3.AccessLookup
		} else {
			bits |= nfs3.AccessExecute
		}
	}
	res.Access = bits & a.Access
}
