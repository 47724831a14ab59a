package server

import (
	"context"

	"golang.org/x/sys/unix"

	"snfs/nfs3"
	"snfs/sunrpc"
)

// mknod is MKNOD (RFC 1813 section 3.3.11): make a device, socket or FIFO.
func (s *Server) mknod(ctx context.Context, c *sunrpc.Call, a *nfs3.MknodArgs, res *nfs3.CreateRes) {
	var kind uint32
	switch a.Type {
	case nfs3.TypeChr:
		kind = unix.S_IFCHR
	case nfs3.TypeBlk:
		kind = unix.S_IFBLK
	case nfs3.TypeSock:
		kind = unix.S_IFSOCK
	case nfs3.TypeFifo:
		kind = unix.S_IFIFO
	default:
		res.Status = nfs3.ErrBadType
		return
	}
	perm := uint32(0o644)
	if a.Attr.Mode != nil {
		perm = *a.Attr.Mode & 0o7777
	}
	dev := unix.Mkdev(a.Spec.Major, a.Spec.Minor)
	s.makeNode(c, &a.Where, &a.Attr, res, func(r *req) ([]byte, unix.Stat_t, error) {
		return s.store.Mknod(r.node, a.Where.Name, kind|perm, dev)
	})
}
