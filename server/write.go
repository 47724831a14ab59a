package server

import (
	"context"

	"golang.org/x/sys/unix"

	"snfs/nfs3"
	"snfs/store"
	"snfs/sunrpc"
)

// write is WRITE (RFC 1813 section 3.3.7). UNSTABLE data is left in the page cache;
// DATA_SYNC and FILE_SYNC data is on stable storage before the reply says so.
func (s *Server) write(ctx context.Context, c *sunrpc.Call, a *nfs3.WriteArgs, res *nfs3.WriteRes) {
	r, err := s.resolveWrite(c, a.File)
	if err != nil {
		res.Status = statusOf(err)
		return
	}
	defer r.release()
	res.Wcc.Before = wccAttr(&r.node.Stat)
	// The verifier is taken before the data is written: if a flush fails while this
	// write is in progress, the client sees the old verifier here and the new one at
	// COMMIT, and writes again.
	verf := s.Verifier()
	err = s.doWrite(r, a)
	res.Wcc.After = r.attr()
	if err != nil {
		res.Status = statusOf(err)
		return
	}
	res.Count, res.Committed, res.Verf = a.Count, a.Stable, verf
}

func (s *Server) doWrite(r *req, a *nfs3.WriteArgs) error {
	switch r.node.Stat.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFDIR:
		return nfs3.ErrIsDir
	default:
		return nfs3.ErrInval
	}
	if int(a.Count) > len(a.Data) || a.Count > maxIO || a.Offset > 1<<63-1-uint64(a.Count) {
		return nfs3.ErrInval
	}
	if err := s.store.OpenIO(r.node); err != nil {
		return err
	}
	if err := store.As(r.cred, func() error { return s.store.MayIO(r.node, r.cred.UID, true) }); err != nil {
		return err
	}
	if _, err := s.store.WriteAt(r.node, a.Data[:a.Count], int64(a.Offset)); err != nil {
		return err
	}
	if a.Stable == nfs3.Unstable {
		return nil
	}
	if err := s.store.Sync(r.node, a.Stable == nfs3.DataSync); err != nil {
		s.flushFailed(err)
		return err
	}
	return nil
}
