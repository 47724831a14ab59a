package server

import (
	"context"
	"errors"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/store"
	"snfs/sunrpc"
	"snfs/xdr"
)

// openName is OPEN_NAME (docs/protocol.md, "OPEN_NAME"): LOOKUP and OPEN in one
// round trip. It never creates.
//
// The lookup is a read of the directory, so the row's preamble treats it as
// LOOKUP's (Dirs: docs/protocol.md sections 21.4, "Reads recall too", and
// 21.9, "The grace period's gate"): another client's write-back permit on
// the directory is recalled first, and during the grace period the call is
// answered JUKEBOX while that permit may still be reclaimed or is held.
// Without that, a name the holder's application was told exists, logged but
// not yet reintegrated, would be answered NFS3ERR_NOENT. After a recall the
// call runs with its reply deferred already (deferred): answerOpen then
// waits for the open's callbacks instead of deferring again.
func (s *Server) openName(ctx context.Context, c *sunrpc.Call, dir *req, a *snfs1.OpenNameArgs, w *xdr.Writer, deferred bool) error {
	mid, err := s.consist.Client(a.Client)
	if err == nil {
		err = checkName(a.Where.Name)
	}
	var fh []byte
	var r *req
	if err == nil {
		fh, r, err = s.lookupOpen(c, dir, a.Where.Name)
	}
	if err == nil {
		err = s.mayOpen(r, a.Mode)
		r.release()
	}
	if err != nil {
		return encodeFailure[snfs1.OpenNameRes](w, err)
	}
	return s.answerOpen(c, w, nil, mid, fh, a.Mode, deferred, func(ok *snfs1.OpenOK) nfs3.Result {
		return &snfs1.OpenNameRes{File: fh, OpenOK: *ok}
	}, func() nfs3.Result { return new(snfs1.OpenNameRes) })
}

// lookupPatience bounds how long OPEN_NAME keeps looking a name up again
// because the file it found was replaced before it could be opened. A name
// replaced as fast as it is looked up (a writer saving by rename in a loop)
// makes a try fail about as often as not, so a count of tries would fail
// now and then; a time bound fails only a name replaced without pause.
const lookupPatience = time.Second

// lookupOpen looks name up in dir and resolves the file it names. The name
// may be replaced (another client renames a new file over it, as editors
// save) between the lookup and the resolution, which then finds the old file
// gone (NFS3ERR_STALE, about a handle the client never asked for): the name
// is looked up again, as the client would have to.
func (s *Server) lookupOpen(c *sunrpc.Call, dir *req, name string) (fh []byte, r *req, err error) {
	start := time.Now()
	for {
		var st unix.Stat_t
		err = store.As(dir.cred, func() (err error) { fh, st, err = s.store.Lookup(dir.node, name); return err })
		if err == nil && st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			err = nfs3.ErrIsDir
		}
		if err != nil {
			return nil, nil, err
		}
		// ENOMEM: open_by_handle_at's answer, now and then, for a file
		// freed while the name was replaced (seen under load).
		if r, err = s.resolve(c, fh); !errors.Is(err, store.ErrStale) && !errors.Is(err, syscall.ENOMEM) {
			return fh, r, err
		}
		if time.Since(start) > lookupPatience {
			return nil, nil, err
		}
		s.store.ForgetEntries(dir.node)
		if err := dir.node.Refresh(); err != nil {
			return nil, nil, err
		}
	}
}
