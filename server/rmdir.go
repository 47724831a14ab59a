package server

import (
	"context"

	"golang.org/x/sys/unix"

	"snfs/nfs3"
	"snfs/sunrpc"
)

// rmdir is RMDIR (RFC 1813 section 3.3.13): remove an empty directory. The table
// refuses "." and ".." before resolving the directory (checkRmdirName).
//
// A write-back permit on the removed directory ends with it
// (docs/protocol.md section 21.6): the directory is looked up first while
// any permit exists. Another client's permit on it was recalled before an
// NFSv3 RMDIR ran (the table's Removed, rmdirRemoved) or a REINTEGRATE RMDIR
// record was applied (batch.removedPermits); one granted since is recalled
// without holding the RMDIR.
func (s *Server) rmdir(ctx context.Context, c *sunrpc.Call, r *req, a *nfs3.DirOpArgs, res *nfs3.WccRes) {
	var gone []byte
	if s.consist.PermitsActive() {
		gone = s.handleIn(r, a.Name)
	}
	s.unlink(r, a, res, func(r *req) error {
		err := s.store.Rmdir(r.node, a.Name)
		if isErrno(err, unix.EEXIST) {
			return nfs3.ErrNotEmpty // some file systems say EEXIST for ENOTEMPTY
		}
		return err
	})
	if gone != nil && res.Status == nfs3.OK {
		s.consist.PermitDirRemoved(s.consist.Caller(c), gone)
	}
}

// checkRmdirName refuses to remove "." (NFS3ERR_INVAL) or ".." (NFS3ERR_NOTEMPTY),
// whatever the directory.
func checkRmdirName(a *nfs3.DirOpArgs) error {
	switch a.Name {
	case ".":
		return nfs3.ErrInval
	case "..":
		return nfs3.ErrNotEmpty
	}
	return nil
}
