package server

import (
	"context"
	"errors"
	"sync"

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
//
// Once the file is made the reply is never dropped: a reply dropped would
// leave the client's retransmission to run the create again (a GUARDED one
// answering NFS3ERR_EXIST to the client that made the file), after a
// restart too. An open the table can no longer answer - the driver stopped
// (a graceful shutdown), or abandoned the request (the client's state was
// dropped) - is reported not granted (JUKEBOX: not counted, never CLOSEd,
// the client OPENs), and the reply is cached and saved as any other.
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
	var op openPart
	obj, err := s.resolve(c, fh)
	if err == nil {
		if err = s.mayOpen(obj, state.Write); err != nil {
			obj.release()
			obj = nil
		}
	}
	if err != nil {
		op.settle(state.OpenReply{}, err)
	}
	start := func(done func(error)) {
		open := func() {
			if !op.settled() && stopped(s.consist) {
				// The driver stopped while the breaks were out: its table
				// would park the open for good.
				op.settle(state.OpenReply{}, consist.ErrJukebox)
			}
			if op.settled() {
				done(nil)
				return
			}
			s.tableOpen(obj, mid, fh, state.Write, func(rep state.OpenReply, err error) {
				// The open's failure is the result's open status, not the
				// call's: the reply is cached (saved) like a success, the
				// file having been made.
				op.settle(rep, err)
				done(nil)
			})
		}
		if len(breaks) == 0 {
			open()
			return
		}
		s.consist.DirChanged(s.consist.Caller(c), breaks, open)
	}
	finish := func(w *xdr.Writer, _ error, waited bool) error {
		defer obj.release()
		if w == nil {
			return nil
		}
		if rep, err := op.result(); err != nil {
			res.Open.Status = statusOf(err)
		} else {
			res.Open.OpenOK = *s.openOK(obj, fh, rep, deferred || waited)
		}
		res.Encode(w)
		return nil
	}
	return s.laterOrWait(c, w, deferred, &op, start, finish)
}

// openPart is the outcome of CREATE_OPEN's open: the first of the table's
// answer and what ends it otherwise (a failure before the table, the
// driver's stop) settles it; a later answer is ignored (the table that gave
// it is stopping). ErrGone, the request abandoned, is an open not granted.
type openPart struct {
	mu    sync.Mutex
	done  bool
	reply state.OpenReply
	err   error
}

func (p *openPart) settle(rep state.OpenReply, err error) {
	if errors.Is(err, consist.ErrGone) {
		err = consist.ErrJukebox
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.done {
		p.done, p.reply, p.err = true, rep, err
	}
}

func (p *openPart) settled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

func (p *openPart) result() (state.OpenReply, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reply, p.err
}

// stopped reports whether the driver has stopped.
func stopped(d *consist.Driver) bool {
	select {
	case <-d.Done():
		return true
	default:
		return false
	}
}

// laterOrWait is later, for a reply that may be deferred already
// (deferred): that one is not deferred again but waited for on the goroutine
// that delivers it (a continuation of the driver's, its own goroutine), as
// afterBreaks does, no longer than the driver runs: when it stops first, the
// open is settled not granted and the reply written all the same (op).
func (s *Server) laterOrWait(c *sunrpc.Call, w *xdr.Writer, deferred bool, op *openPart, start func(done func(error)),
	finish func(w *xdr.Writer, err error, deferred bool) error) error {
	if !deferred {
		_, err := later(c, w, nil, start, finish)
		return err
	}
	ch := make(chan error, 1)
	start(func(err error) { ch <- err })
	select {
	case err := <-ch:
		return finish(w, err, true)
	case <-s.consist.Done():
		op.settle(state.OpenReply{}, consist.ErrJukebox)
		return finish(w, nil, true)
	}
}

// createOpenAccess is CREATE's: an UNCHECKED create that sets the size of an
// existing regular file is a SETATTR of it for the consistency table.
func createOpenAccess(s *Server, c *sunrpc.Call, r *req, a *snfs1.CreateOpenArgs) []fileAccess {
	return createAccess(s, c, r, &a.Create)
}
