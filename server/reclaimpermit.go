package server

import (
	"context"

	"snfs/snfs1"
	"snfs/sunrpc"
	"snfs/xdr"
)

// reclaimPermit is RECLAIM_PERMIT (docs/protocol.md section 21.9): after a
// restart, a client known before it reports the directories whose
// write-back permits it held with records logged under them still to be
// reintegrated; each is granted again, with a new id, without a recall
// (the grace period kept everyone else from the directory until now:
// permitGraceGate). A handle that does not check (its MAC, an export gone
// or closed to the caller) gets no permit (0), as RECLAIM leaves such items
// out; the handle is not resolved otherwise (a directory removed since has
// a permit that nothing can use, and its records are refused).
func (s *Server) reclaimPermit(ctx context.Context, c *sunrpc.Call, args *xdr.Reader, w *xdr.Writer) error {
	var a snfs1.ReclaimPermitArgs
	if a.Decode(args) != nil {
		return sunrpc.ErrGarbageArgs
	}
	dirs := make([][]byte, len(a.Dirs))
	allowed := map[uint32]bool{}
	for i, fh := range a.Dirs {
		id, _, err := s.store.ParseHandle(fh)
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
			dirs[i] = append([]byte(nil), fh...)
		}
	}
	ids, err := s.consist.ReclaimPermits(a.Client, dirs)
	res := snfs1.ReclaimPermitRes{Status: statusOf(err)}
	if err == nil {
		for i := range ids {
			if dirs[i] == nil {
				ids[i] = 0
			}
		}
		res.Permits = ids
	}
	res.Encode(w)
	return nil
}
