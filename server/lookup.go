package server

import (
	"context"

	"golang.org/x/sys/unix"

	"snfs/nfs3"
	"snfs/store"
	"snfs/sunrpc"
)

// lookup is LOOKUP (RFC 1813 section 3.3.3): find a name in a directory.
func (s *Server) lookup(ctx context.Context, c *sunrpc.Call, r *req, a *nfs3.DirOpArgs, res *nfs3.LookupRes) {
	res.DirAttr = fattr(&r.node.Stat, r.fsid())
	if err := checkLookupName(a.Name); err != nil {
		res.Status = statusOf(err)
		return
	}
	var fh []byte
	var st unix.Stat_t
	err := store.As(r.cred, func() (err error) {
		fh, st, err = s.store.Lookup(r.node, a.Name)
		return err
	})
	if err != nil {
		res.Status = statusOf(err)
		return
	}
	res.Object, res.ObjAttr = fh, fattr(&st, r.fsid())
}

// checkLookupName validates a name to look up ("." and ".." are allowed).
func checkLookupName(name string) error {
	if name == "." || name == ".." {
		return nil
	}
	return checkName(name)
}
