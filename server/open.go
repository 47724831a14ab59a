package server

import (
	"context"

	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
	"snfs/sunrpc"
	"snfs/xdr"
)

// open is OPEN (docs/protocol.md, "OPEN"; Spritely NFS section 3.1): the table
// decides whether the client may cache and which versions of its cached data
// are current, after calling back the clients that must write back or
// invalidate first. Meanwhile the reply is deferred; if the callbacks take too
// long it is NFS3ERR_JUKEBOX and the client retries.
func (s *Server) open(ctx context.Context, c *sunrpc.Call, r *req, a *snfs1.OpenArgs, w *xdr.Writer) error {
	mid, err := s.consist.Client(a.Client)
	if err == nil {
		err = s.mayOpen(r, a.Mode)
	}
	if err != nil {
		return encodeFailure[snfs1.OpenRes](w, err)
	}
	fh := append([]byte(nil), a.File...)
	var reply state.OpenReply
	_, err = later(c, w, func(done func(error)) {
		s.consist.Open(mid, fh, tableMode(a.Mode), func(rep state.OpenReply, err error) {
			reply = rep
			done(err)
		})
	}, func(w *xdr.Writer, err error, deferred bool) error {
		switch {
		case w == nil:
			return nil
		case err != nil:
			return encodeFailure[snfs1.OpenRes](w, err)
		}
		// Attributes after the callbacks: of r while the call holds it, else
		// looked up again.
		attr := s.handleAttr
		if !deferred {
			attr = func([]byte) *nfs3.Fattr { return r.attr() }
		}
		res := snfs1.OpenRes{OpenOK: openOK(reply, attr(fh))}
		res.Encode(w)
		return nil
	})
	return err
}

// openOK is the OK result of an OPEN; attributes are read after the callbacks
// (they reflect what was written back).
func openOK(r state.OpenReply, attr *nfs3.Fattr) snfs1.OpenOK {
	return snfs1.OpenOK{CacheVersion: r.Version, OldCacheVersion: r.OldVersion, CacheEnabled: r.CacheEnabled, Attr: attr}
}
