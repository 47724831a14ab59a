package server

import (
	"context"

	"snfs/snfs1"
	"snfs/sunrpc"
	"snfs/xdr"
)

// dirRelease is DIR_RELEASE (docs/protocol.md section 4.20): a client gives
// back directory promises. The handles are not resolved: a promise is found
// by its handle's bytes, and a handle that names nothing names no promise.
func (s *Server) dirRelease(ctx context.Context, c *sunrpc.Call, args *xdr.Reader, w *xdr.Writer) error {
	var a snfs1.DirReleaseArgs
	if a.Decode(args) != nil {
		return sunrpc.ErrGarbageArgs
	}
	mid, err := s.consist.Client(a.Client)
	if err == nil {
		fhs := make([][]byte, len(a.Dirs))
		for i, fh := range a.Dirs {
			fhs[i] = fh
		}
		s.consist.DirRelease(mid, fhs)
	}
	res := snfs1.DirReleaseRes{Status: statusOf(err)}
	res.Encode(w)
	return nil
}
