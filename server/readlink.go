package server

import (
	"context"

	"golang.org/x/sys/unix"

	"snfs/nfs3"
	"snfs/store"
	"snfs/sunrpc"
)

// readlink is READLINK (RFC 1813 section 3.3.5): a symbolic link's target.
func (s *Server) readlink(ctx context.Context, c *sunrpc.Call, r *req, a *nfs3.FHArgs, res *nfs3.ReadlinkRes) {
	res.Attr = fattr(&r.node.Stat, r.fsid())
	if r.node.Stat.Mode&unix.S_IFMT != unix.S_IFLNK {
		res.Status = nfs3.ErrInval
		return
	}
	err := store.As(r.cred, func() (err error) {
		res.Path, err = s.store.Readlink(r.node)
		return err
	})
	res.Status = statusOf(err)
}
