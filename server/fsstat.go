package server

import (
	"context"

	"snfs/nfs3"
	"snfs/sunrpc"
)

// fsstat is FSSTAT (RFC 1813 section 3.3.18): space and inodes of the file system.
func (s *Server) fsstat(ctx context.Context, c *sunrpc.Call, r *req, a *nfs3.FHArgs, res *nfs3.FsstatRes) {
	res.Attr = fattr(&r.node.Stat, r.fsid())
	st, err := s.store.Statfs(r.node)
	if err != nil {
		res.Status = statusOf(err)
		return
	}
	bs := uint64(st.Bsize)
	res.TBytes, res.FBytes, res.ABytes = st.Blocks*bs, st.Bfree*bs, st.Bavail*bs
	res.TFiles, res.FFiles, res.AFiles = st.Files, st.Ffree, st.Ffree
}
