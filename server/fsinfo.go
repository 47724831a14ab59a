package server

import (
	"context"

	"snfs/nfs3"
	"snfs/sunrpc"
)

// fsinfo is FSINFO (RFC 1813 section 3.3.19): transfer sizes and properties.
func (s *Server) fsinfo(ctx context.Context, c *sunrpc.Call, r *req, a *nfs3.FHArgs, res *nfs3.FsinfoRes) {
	res.Attr = fattr(&r.node.Stat, r.fsid())
	res.RtMax, res.RtPref, res.RtMult = maxIO, maxIO, 4096
	res.WtMax, res.WtPref, res.WtMult = maxIO, maxIO, 4096
	res.DtPref = 64 << 10
	res.MaxFileSize = 1<<63 - 1
	res.TimeDelta = nfs3.Time{Sec: 0, Nsec: 1}
	res.Properties = nfs3.FSFLink | nfs3.FSFSymlink | nfs3.FSFHomogeneous | nfs3.FSFCanSetTime
}
