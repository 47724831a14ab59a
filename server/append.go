package server

import (
	"context"
	"errors"

	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
	"snfs/store"
	"snfs/sunrpc"
)

// appendProc is APPEND (docs/protocol.md, "APPEND"): WRITE (RFC 1813 section
// 3.3.7) at the server's end of file, which the reply names. The data is
// placed by one write with RWF_APPEND (store.Append), so two APPENDs never
// overlap, whatever client or local process writes the file meanwhile:
// appends from many clients keep every byte, each append whole.
// Stability is WRITE's: UNSTABLE data is left in the page cache, DATA_SYNC
// and FILE_SYNC data is gathered with the file's other stable writes and
// answered after the flush that covers it. The reply carries no pre-operation
// attributes: those read before the write need not be the file's just before
// it (another write may come in between), and a client chaining its own
// change from them would keep data that lacks that other write. A
// retransmission across a restart is applied once: the data is written after
// an intent is saved (appendintent.go).
func (s *Server) appendProc(ctx context.Context, c *sunrpc.Call, r *req, a *snfs1.AppendArgs, res *snfs1.AppendRes) {
	verf := s.Verifier() // before the data is written, as WRITE's
	committed := a.Stable
	off, n, after, err := s.doAppend(c, r, a)
	if errors.Is(err, errFlushSlow) {
		// Written, not yet flushed: answered as written UNSTABLE (the
		// client COMMITs it), never "try again", which would append the
		// data a second time.
		committed, err = nfs3.Unstable, nil
	}
	if err != nil {
		res.Status = statusOf(err)
		return
	}
	res.Offset, res.Count, res.Committed, res.Verf = off, n, committed, verf
	res.Wcc.After = after
}

func (s *Server) doAppend(c *sunrpc.Call, r *req, a *snfs1.AppendArgs) (off uint64, n uint32, after *nfs3.Fattr, err error) {
	if err := regularFile(r); err != nil {
		return 0, 0, nil, err
	}
	if err := s.store.OpenIO(r.node); err != nil {
		return 0, 0, nil, err
	}
	if err := store.As(r.cred, func() error { return s.store.MayIO(r.node, r.cred.UID, true) }); err != nil {
		return 0, 0, nil, err
	}
	// As WRITE (write.go): a write by anyone but root clears the set-ID bits.
	if r.cred.UID != 0 {
		if err := s.store.ClearSetID(r.node); err != nil {
			return 0, 0, nil, err
		}
	}
	if c.Intent != nil {
		it, err := decodeAppendIntent(c.Intent)
		if err == nil && it.state == intentApplied && it.count == uint32(len(a.Data)) {
			return s.appendApplied(c, r, a, it)
		}
	}
	before := saveAppendIntent(c, a.File, a.Data)
	if a.Stable == nfs3.Unstable {
		o, k, err := s.store.Append(r.node, a.Data, before)
		if err != nil && k == 0 {
			return 0, 0, nil, err
		}
		return uint64(o), uint32(k), r.attr(), nil
	}
	ticket := r.exp.gather.Begin(r.node.Key())
	o, k, err := s.store.Append(r.node, a.Data, before)
	if err != nil && k == 0 {
		ticket.Cancel()
		return 0, 0, nil, err
	}
	after, err = s.waitFlush(c, r, ticket, a.Stable == nfs3.DataSync)
	if errors.Is(err, errJukebox) {
		c.NoCache = false // the reply is the call's: a retransmission gets it
		return uint64(o), uint32(k), r.attr(), errFlushSlow
	}
	if err != nil {
		return 0, 0, nil, err
	}
	return uint64(o), uint32(k), after, nil
}

// errFlushSlow: doAppend wrote the data, whose flush took longer than the
// server waits for one (Config.JukeboxAfter).
var errFlushSlow = errors.New("server: the appended data's flush is slow")

// appendApplied answers the retransmission of an APPEND that its first
// attempt applied before a restart (appendintent.go): nothing is written;
// stable data is flushed again, since the first attempt may not have
// flushed it before the restart.
func (s *Server) appendApplied(c *sunrpc.Call, r *req, a *snfs1.AppendArgs, it *appendIntent) (uint64, uint32, *nfs3.Fattr, error) {
	if a.Stable == nfs3.Unstable {
		return it.size, it.count, r.attr(), nil
	}
	after, err := s.waitFlush(c, r, r.exp.gather.Begin(r.node.Key()), a.Stable == nfs3.DataSync)
	if errors.Is(err, errJukebox) {
		c.NoCache = false
		return it.size, it.count, r.attr(), errFlushSlow
	}
	if err != nil {
		return 0, 0, nil, err
	}
	return it.size, it.count, after, nil
}

// appendAccess: an APPEND changes the file as a WRITE does.
func appendAccess(s *Server, c *sunrpc.Call, r *req, a *snfs1.AppendArgs) []fileAccess {
	return regularAccess(r, a.File, state.AccessWrite)
}
