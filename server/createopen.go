package server

import (
	"context"
	"errors"

	"snfs/consist"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
	"snfs/sunrpc"
	"snfs/xdr"
)

// createOpen is CREATE_OPEN (docs/protocol.md, "CREATE_OPEN"): NFSv3 CREATE
// (RFC 1813 section 3.3.8, create.go) of a regular file and OPEN_WRITE of
// it (open.go), in one round trip. The row's preamble is CREATE's: a
// write-back permit on the directory recalled first (Dirs), an UNCHECKED
// CREATE's truncation of an existing file applied to its holders first
// (Access). Then: nothing is made during the grace period (JUKEBOX, as
// OPEN); the file is made as CREATE makes it, the directory promises the
// change breaks are broken, and the new file is opened as OPEN opens it. The
// open has its own status in the result: the file stays made when the open
// fails (its callbacks took too long: JUKEBOX), and the client OPENs it
// itself.
func (s *Server) createOpen(ctx context.Context, c *sunrpc.Call, r *req, a *snfs1.CreateOpenArgs, w *xdr.Writer, deferred bool) error {
	mid, err := s.consist.Client(a.Client)
	if err == nil && s.consist.InGrace() {
		// Checked before anything is made: the retry, with a new xid, finds
		// nothing made by this try (a GUARDED one would answer EXIST).
		err = consist.ErrGrace
		c.NoCache = true
	}
	if err != nil {
		return encodeFailure[snfs1.CreateOpenRes](w, err)
	}
	after := createChanges(a.Create.Where.Dir)
	var cres nfs3.CreateRes
	s.create(ctx, c, r, &a.Create, &cres)
	res := snfs1.CreateOpenRes{Status: cres.Status, File: cres.Object, Attr: cres.Attr, DirWcc: cres.DirWcc,
		ServerVerf: s.consist.ServerVerifier()}
	if cres.Status != nfs3.OK {
		res.Encode(w)
		return nil
	}
	var breaks [][]byte
	if s.consist.DirsActive() {
		breaks = after(&cres)
	}
	fh := cres.Object
	obj, openErr := s.resolve(c, fh)
	if openErr == nil {
		if openErr = s.mayOpen(obj, state.Write); openErr != nil {
			obj.release()
			obj = nil
		}
	}
	var reply state.OpenReply
	start := func(done func(error)) {
		open := func() {
			if openErr != nil {
				done(nil)
				return
			}
			s.tableOpen(obj, mid, fh, state.Write, func(rep state.OpenReply, err error) {
				if errors.Is(err, consist.ErrGone) {
					done(err)
					return
				}
				// The open's failure is the result's open status, not the
				// call's: the reply is cached (saved) like a success, the
				// file having been made.
				reply, openErr = rep, err
				done(nil)
			})
		}
		if len(breaks) == 0 {
			open()
			return
		}
		s.consist.DirChanged(s.consist.Caller(c), breaks, open)
	}
	finish := func(w *xdr.Writer, err error, waited bool) error {
		defer obj.release()
		if w == nil {
			return nil
		}
		if openErr != nil {
			res.Open.Status = statusOf(openErr)
		} else {
			res.Open.OpenOK = *s.openOK(obj, fh, reply, deferred || waited)
		}
		res.Encode(w)
		return nil
	}
	return s.laterOrWait(c, w, deferred, start, finish)
}

// laterOrWait is later, for a reply that may be deferred already
// (deferred): that one is not deferred again but waited for on the goroutine
// that delivers it, as afterBreaks does, no longer than the driver runs.
func (s *Server) laterOrWait(c *sunrpc.Call, w *xdr.Writer, deferred bool, start func(done func(error)),
	finish func(w *xdr.Writer, err error, deferred bool) error) error {
	if !deferred {
		_, err := later(c, w, nil, start, finish)
		return err
	}
	ch := make(chan error, 1)
	start(func(err error) { ch <- err })
	select {
	case err := <-ch:
		if errors.Is(err, consist.ErrGone) {
			finish(nil, err, true)
			return err
		}
		return finish(w, err, true)
	case <-s.consist.Done():
		return consist.ErrGone
	}
}

// createOpenAccess is CREATE's: an UNCHECKED create that sets the size of an
// existing regular file is a SETATTR of it for the consistency table.
func createOpenAccess(s *Server, c *sunrpc.Call, r *req, a *snfs1.CreateOpenArgs) []fileAccess {
	return createAccess(s, c, r, &a.Create)
}
