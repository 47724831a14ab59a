package server

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/fnv"

	"golang.org/x/sys/unix"

	"snfs/consist"
	"snfs/lockmgr"
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
//
// OPEN's row has no preamble that waits (no Dirs, Access or Gate): its reply
// is never deferred before it runs.
func (s *Server) open(ctx context.Context, c *sunrpc.Call, r *req, a *snfs1.OpenArgs, w *xdr.Writer, _ bool) error {
	mid, err := s.consist.Client(a.Client)
	if err == nil {
		err = s.mayOpen(r, a.Mode)
	}
	if err != nil {
		return encodeFailure[snfs1.OpenRes](w, err)
	}
	return s.answerOpen(c, w, r, mid, append([]byte(nil), a.File...), a.Mode, false, func(ok *snfs1.OpenOK) nfs3.Result {
		return &snfs1.OpenRes{OpenOK: *ok}
	}, func() nfs3.Result { return new(snfs1.OpenRes) })
}

// answerOpen applies an OPEN of fh by table client mid, and writes its result
// into w now, or into the deferred reply once the callbacks it needs are
// answered: ok makes the result of a granted OPEN, failed an empty one (for its
// status). Attributes are read after the callbacks (they reflect what was
// written back): looked up again by handle after a wait, r's otherwise.
//
// deferred: the reply was deferred already, by the call's preamble (an
// OPEN_NAME that waited for a permit's recall), and w is the deferred
// reply's, being written on the goroutine that delivered the recall's end
// (the driver's continuation, its own). It is not deferred again - a second
// Defer is the same reply, whose encoding would end empty when this returns,
// and the open's answer would be lost - but the table's answer is waited
// for here, no longer than the driver runs (as afterBreaks and CREATE_OPEN's
// laterOrWait do). A request the table abandons (its client's state was
// dropped, ErrGone) or the driver's stop is then answered JUKEBOX, not
// dropped: the reply is being written.
func (s *Server) answerOpen(c *sunrpc.Call, w *xdr.Writer, r *req, mid state.ClientID, fh []byte, mode state.Mode, deferred bool,
	ok func(*snfs1.OpenOK) nfs3.Result, failed func() nfs3.Result) error {
	finish := func(w *xdr.Writer, reply state.OpenReply, err error, deferred bool) error {
		switch {
		case w == nil:
			return nil
		case err != nil:
			res := failed()
			res.SetStatus(statusOf(err))
			res.Encode(w)
			return nil
		}
		ok(s.openOK(r, fh, reply, deferred)).Encode(w)
		return nil
	}
	if deferred {
		type answer struct {
			reply state.OpenReply
			err   error
		}
		ch := make(chan answer, 1)
		s.tableOpen(r, mid, fh, mode, func(rep state.OpenReply, err error) { ch <- answer{rep, err} })
		var a answer
		select {
		case a = <-ch:
		case <-s.consist.Done():
			a.err = consist.ErrJukebox
		}
		if errors.Is(a.err, consist.ErrGone) {
			a.err = consist.ErrJukebox
		}
		if errors.Is(a.err, consist.ErrJukebox) {
			c.NoCache = true // the retry must run again, not get this answer replayed
		}
		return finish(w, a.reply, a.err, true)
	}
	var reply state.OpenReply
	_, err := later(c, w, nil, func(done func(error)) {
		s.tableOpen(r, mid, fh, mode, func(rep state.OpenReply, err error) {
			reply = rep
			done(err)
		})
	}, func(w *xdr.Writer, err error, deferred bool) error {
		return finish(w, reply, err, deferred)
	})
	return err
}

// tableOpen applies an OPEN of fh (r's node, or nil) by table client mid to
// the consistency table, after another client's lock delegation of the file
// is recalled (lockdeleg.go); answer is called exactly once, before tableOpen
// returns or later from another goroutine (after callbacks).
func (s *Server) tableOpen(r *req, mid state.ClientID, fh []byte, mode state.Mode, answer func(state.OpenReply, error)) {
	// A local process's change completed before this OPEN must give it a new
	// version: the notifier's queue is applied first; without notifications,
	// the table compares the file's change attribute with the last OPEN's.
	s.store.DrainChanges()
	change := s.changeAttr(r, fh)
	s.delegs.admit(lockmgr.FileKey(fh), mid, func(leave func()) {
		s.consist.Open(mid, fh, mode, change, func(rep state.OpenReply, err error) {
			leave()
			answer(rep, err)
		})
	})
}

// openOK is OPEN1resok of a granted open of fh. Attributes are read after
// the callbacks (they reflect what was written back): looked up again by
// handle after a wait (deferred) or without r; r's otherwise, read when it
// was resolved and current, nothing having been called back (as GETATTR's).
func (s *Server) openOK(r *req, fh []byte, reply state.OpenReply, deferred bool) *snfs1.OpenOK {
	var attr *nfs3.Fattr
	if deferred || r == nil {
		attr = s.handleAttr(fh)
	} else {
		attr = fattr(&r.node.Stat, r.fsid())
	}
	return &snfs1.OpenOK{CacheVersion: reply.Version, OldCacheVersion: reply.OldVersion,
		CacheEnabled: reply.CacheEnabled, Attr: attr}
}

// changeAttr is the change attribute of the file fh names (r's node, when
// resolved), a digest of its size, modification and change times, for an
// OPEN of a file on a file system without change notifications; 0 (not
// checked) when it has them (docs/protocol.md section 14.1).
func (s *Server) changeAttr(r *req, fh []byte) uint64 {
	var st *unix.Stat_t
	if r != nil {
		if r.exp.st.Notified() {
			return 0
		}
		st = &r.node.Stat
	} else {
		n, err := s.store.Resolve(fh)
		if err != nil {
			return 0
		}
		defer n.Release()
		if n.Export.Notified() {
			return 0
		}
		st = &n.Stat
	}
	h := fnv.New64a()
	var b [8 * 5]byte
	for i, v := range []int64{st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec} {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(v))
	}
	h.Write(b[:])
	return h.Sum64() | 1 // never 0
}
