package server

import (
	"context"

	"snfs/nfs3"
	"snfs/sunrpc"
)

// pathconf is PATHCONF (RFC 1813 section 3.3.20): POSIX limits of the file system.
func (s *Server) pathconf(ctx context.Context, c *sunrpc.Call, r *req, a *nfs3.FHArgs, res *nfs3.PathconfRes) {
	res.Attr = fattr(&r.node.Stat, r.fsid())
	res.NameMax = nfs3.MaxName
	if st, err := s.store.Statfs(r.node); err == nil && st.Namelen > 0 && st.Namelen < nfs3.MaxName {
		res.NameMax = uint32(st.Namelen)
	}
	res.LinkMax = 65000 // ext4's EXT4_LINK_MAX; other file systems report EMLINK themselves
	res.NoTrunc, res.ChownRestricted, res.CaseInsensitive, res.CasePreserving = true, true, false, true
}
