package server

import (
	"context"

	"snfs/snfs1"
	"snfs/sunrpc"
	"snfs/xdr"
)

// reclaim is RECLAIM (docs/protocol.md, "RECLAIM"): after a restart, a client
// known before it reports what it holds of each file, and the table is rebuilt
// from the reports (Sprite's recovery). Items whose handle does not check (its
// MAC, an export that is gone or closed to the caller) are left out: nobody can
// hold state of a file it cannot name.
func (s *Server) reclaim(ctx context.Context, c *sunrpc.Call, args *xdr.Reader, w *xdr.Writer) error {
	var a snfs1.ReclaimArgs
	if a.Decode(args) != nil {
		return sunrpc.ErrGarbageArgs
	}
	items := a.Items[:0]
	allowed := map[uint32]bool{}
	for _, it := range a.Items {
		id, _, err := s.store.ParseHandle(it.File)
		if err != nil {
			continue
		}
		ok, seen := allowed[id]
		if !seen {
			e := s.table().byID[id]
			if e != nil {
				_, err = e.access(c)
			}
			ok = e != nil && err == nil
			allowed[id] = ok
		}
		if ok {
			items = append(items, it)
		}
	}
	if n := len(a.Items) - len(items); n > 0 {
		s.log.Warn("RECLAIM: items left out: their handles do not check or name no export open to the client",
			"clientid", a.Client, "items", n)
	}
	res := snfs1.ReclaimRes{Status: statusOf(s.consist.Reclaim(a.Client, items))}
	res.Encode(w)
	return nil
}

// reclaimDone is RECLAIM_DONE (docs/protocol.md, "RECLAIM_DONE"): the client
// reclaimed everything it holds.
func (s *Server) reclaimDone(ctx context.Context, c *sunrpc.Call, args *xdr.Reader, w *xdr.Writer) error {
	var a snfs1.ReclaimDoneArgs
	if a.Decode(args) != nil {
		return sunrpc.ErrGarbageArgs
	}
	res := snfs1.ReclaimDoneRes{Status: statusOf(s.consist.ReclaimDone(a.Client))}
	res.Encode(w)
	return nil
}

// unregister is UNREGISTER (docs/protocol.md, "UNREGISTER"): a clean end of a
// client; its record is deleted durably and its opens closed.
func (s *Server) unregister(ctx context.Context, c *sunrpc.Call, args *xdr.Reader, w *xdr.Writer) error {
	var a snfs1.UnregisterArgs
	if a.Decode(args) != nil {
		return sunrpc.ErrGarbageArgs
	}
	err := s.consist.Unregister(a.Client)
	if err != nil && statusOf(err) != snfs1.ErrStaleClientID {
		s.log.Error("UNREGISTER failed", "clientid", a.Client, "err", err)
	}
	res := snfs1.UnregisterRes{Status: statusOf(err)}
	res.Encode(w)
	return nil
}
