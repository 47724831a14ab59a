package server

import (
	"context"
	"syscall"

	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/sunrpc"
	"snfs/xdr"
)

// getPermit is GET_PERMIT (docs/protocol.md section 21.2): a write-back
// permit on a directory. The permit is recorded pending, every other
// client's directory promise on the directory is broken, and the reply
// waits (deferred, no worker held) until the breaks have ended; a change of
// the directory meanwhile cancels it (granted FALSE). Granted only where the
// server sees local processes' changes (as LISTDIR's promises): elsewhere a
// local change could not recall it.
func (s *Server) getPermit(ctx context.Context, c *sunrpc.Call, r *req, a *snfs1.GetPermitArgs, w *xdr.Writer, _ bool) error {
	mid, err := s.consist.Client(a.Client)
	if err != nil {
		(&snfs1.GetPermitRes{Status: statusOf(err)}).Encode(w)
		return nil
	}
	if r.node.Stat.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		(&snfs1.GetPermitRes{Status: nfs3.ErrNotDir}).Encode(w)
		return nil
	}
	if !r.exp.st.Notified() {
		(&snfs1.GetPermitRes{}).Encode(w)
		return nil
	}
	// A local process's change completed before this GET_PERMIT is
	// applied first (as for LISTDIR, listdir.go): drained later, it would
	// cancel or recall the permit granted after it.
	s.store.DrainChanges()
	fh := append([]byte(nil), a.Dir...)
	var res snfs1.GetPermitRes
	_, err = later(c, w, nil, func(done func(error)) {
		s.consist.GetPermit(mid, fh, func(id uint64, granted bool, err error) {
			res.Granted, res.Permit = granted, id
			done(err)
		})
	}, func(w *xdr.Writer, err error, _ bool) error {
		if w == nil {
			return nil
		}
		if err != nil {
			res = snfs1.GetPermitRes{Status: statusOf(err)}
		}
		if !res.Granted {
			res.Permit = 0
		}
		res.Encode(w)
		return nil
	})
	return err
}
