package server

import (
	"context"

	"snfs/nfs3"
	"snfs/store"
	"snfs/sunrpc"
)

// write is WRITE (RFC 1813 section 3.3.7). UNSTABLE data is left in the page cache.
// DATA_SYNC and FILE_SYNC data is written without syncing and then gathered with the
// other stable writes and COMMITs to the same file (package gather): one flush
// covers them all, and none is answered before the flush that covers it returned.
// All members of a batch reply with the same post-operation attributes.
func (s *Server) write(ctx context.Context, c *sunrpc.Call, r *req, a *nfs3.WriteArgs, res *nfs3.WriteRes) {
	res.Wcc.Before = wccAttr(&r.node.Stat)
	// The verifier is taken before the data is written: if a flush fails while this
	// write is in progress, the client sees the old verifier here and the new one at
	// COMMIT, and writes again.
	verf := s.Verifier()
	after, err := s.doWrite(c, r, a)
	res.Wcc.After = after
	if err != nil {
		res.Status = statusOf(err)
		return
	}
	res.Count, res.Committed, res.Verf = a.Count, a.Stable, verf
}

// doWrite writes and, for a stable write, waits for the gathered flush; it returns
// the post-operation attributes.
func (s *Server) doWrite(c *sunrpc.Call, r *req, a *nfs3.WriteArgs) (*nfs3.Fattr, error) {
	if err := regularFile(r); err != nil {
		return r.attr(), err
	}
	if int(a.Count) > len(a.Data) || a.Count > maxIO || a.Offset > 1<<63-1-uint64(a.Count) {
		return r.attr(), nfs3.ErrInval
	}
	if err := s.store.OpenIO(r.node); err != nil {
		return r.attr(), err
	}
	if err := store.As(r.cred, func() error { return s.store.MayIO(r.node, r.cred.UID, true) }); err != nil {
		return r.attr(), err
	}
	// A write by anyone but root clears the set-ID bits, as a local write
	// without CAP_FSETID does (and knfsd's, which writes as the caller).
	if r.cred.UID != 0 {
		if err := s.store.ClearSetID(r.node); err != nil {
			return r.attr(), err
		}
	}
	if a.Stable == nfs3.Unstable {
		_, err := s.store.WriteAt(r.node, a.Data[:a.Count], int64(a.Offset))
		return r.attr(), err
	}
	ticket := r.exp.gather.Begin(r.node.Key())
	if _, err := s.store.WriteAt(r.node, a.Data[:a.Count], int64(a.Offset)); err != nil {
		ticket.Cancel()
		return r.attr(), err
	}
	after, err := s.waitFlush(c, r, ticket, a.Stable == nfs3.DataSync)
	if err != nil {
		return r.attr(), err
	}
	return after, nil
}
