package server

import (
	"context"
	"syscall"

	"golang.org/x/sys/unix"

	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/store"
	"snfs/sunrpc"
	"snfs/xdr"
)

// openName is OPEN_NAME (docs/protocol.md, "OPEN_NAME"): LOOKUP and OPEN in one
// round trip. It never creates.
func (s *Server) openName(ctx context.Context, c *sunrpc.Call, dir *req, a *snfs1.OpenNameArgs, w *xdr.Writer) error {
	mid, err := s.consist.Client(a.Client)
	if err == nil {
		err = checkName(a.Where.Name)
	}
	var fh []byte
	var st unix.Stat_t
	if err == nil {
		err = store.As(dir.cred, func() (err error) { fh, st, err = s.store.Lookup(dir.node, a.Where.Name); return err })
	}
	if err == nil && st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		err = nfs3.ErrIsDir
	}
	var r *req
	if err == nil {
		r, err = s.resolve(c, fh)
	}
	if err == nil {
		err = s.mayOpen(r, a.Mode)
		r.release()
	}
	if err != nil {
		return encodeFailure[snfs1.OpenNameRes](w, err)
	}
	return s.answerOpen(c, w, nil, mid, fh, a.Mode, func(ok *snfs1.OpenOK) nfs3.Result {
		return &snfs1.OpenNameRes{File: fh, OpenOK: *ok}
	}, func() nfs3.Result { return new(snfs1.OpenNameRes) })
}
