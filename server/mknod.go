package server

import (
	"context"

	"golang.org/x/sys/unix"

	"snfs/nfs3"
	"snfs/sunrpc"
)

// mknod is MKNOD (RFC 1813 section 3.3.11): make a device, socket or FIFO. The
// table checks the type before resolving the directory (checkMknodType).
func (s *Server) mknod(ctx context.Context, c *sunrpc.Call, r *req, a *nfs3.MknodArgs, res *nfs3.CreateRes) {
	kind, err := mknodKind(a.Type)
	if err != nil {
		res.Status = statusOf(err)
		return
	}
	perm := uint32(0o644)
	if a.Attr.Mode != nil {
		perm = *a.Attr.Mode & 0o7777
	}
	dev := unix.Mkdev(a.Spec.Major, a.Spec.Minor)
	s.makeNode(r, &a.Where, &a.Attr, res, func(r *req) ([]byte, unix.Stat_t, error) {
		return s.store.Mknod(r.node, a.Where.Name, kind|perm, dev)
	})
}

// checkMknodType answers NFS3ERR_BADTYPE for a type MKNOD does not make (a regular
// file, a directory, a symbolic link), before the directory is resolved.
func checkMknodType(a *nfs3.MknodArgs) error {
	_, err := mknodKind(a.Type)
	return err
}

// mknodKind is the S_IFMT bits of the object MKNOD makes for t.
func mknodKind(t nfs3.FType) (uint32, error) {
	switch t {
	case nfs3.TypeChr:
		return unix.S_IFCHR, nil
	case nfs3.TypeBlk:
		return unix.S_IFBLK, nil
	case nfs3.TypeSock:
		return unix.S_IFSOCK, nil
	case nfs3.TypeFifo:
		return unix.S_IFIFO, nil
	}
	return 0, nfs3.ErrBadType
}
