package server

import (
	"context"
	"errors"
	"strings"

	"golang.org/x/sys/unix"

	"snfs/snfs1"
	"snfs/store"
	"snfs/sunrpc"
)

// getXattr is GETXATTR (docs/protocol.md, "GETXATTR"; RFC 8276 section
// 8.4.2): the value of one extended attribute of the user namespace, read
// from the exported object's own attributes with the caller's identity (the
// kernel checks read permission). Values are written through by every
// client (SETXATTR), so no client holds one the server lacks: reading one
// is no access for the consistency table.
func (s *Server) getXattr(ctx context.Context, c *sunrpc.Call, r *req, a *snfs1.GetXattrArgs, res *snfs1.GetXattrRes) {
	if err := checkXattrName(a.Name); err != nil {
		res.Status = statusOf(err)
		return
	}
	var val []byte
	err := store.As(r.cred, func() error {
		// Most values are small: a first try with a small buffer, then the
		// largest a value can be.
		var err error
		val, err = s.store.GetXattr(r.node, a.Name, make([]byte, 4096))
		if errors.Is(err, unix.ERANGE) {
			val, err = s.store.GetXattr(r.node, a.Name, make([]byte, snfs1.XattrSizeMax))
		}
		return err
	})
	if err != nil {
		res.Status = statusOf(err)
		return
	}
	res.Value = val
}

// checkXattrName: only the user namespace is served (as RFC 8276 defines);
// a name of another namespace, or none, is NFS3ERR_NOTSUPP.
func checkXattrName(name string) error {
	if !strings.HasPrefix(name, snfs1.XattrPrefix) {
		return errXattrNamespace
	}
	return nil
}
