package server

import (
	"context"
	"fmt"

	"snfs/nfs3"
	"snfs/sunrpc"
	"snfs/xdr"
)

// op is one row of the NFSv3 procedure table, shaped like a row of Linux nfsd's
// nfsd_procedures3: how the arguments decode and the result encodes (A's and R's
// own codecs), the handler, the reply cache class, the scheduling hint, and the
// preamble every handler shares.
//
// The preamble runs between decoding and the handler. Check, if set, rejects
// arguments that are wrong whatever the handle names. Then the handle FH picks out
// of the arguments is resolved, once: its format and MAC, the client's right to the
// export (NFS3ERR_ACCES, or NFS3ERR_PERM from an insecure port), NFS3ERR_ROFS for a
// Write procedure on a read-only export, the object opened as root, the caller's
// identity squashed by the export's options. The handler gets all that as a *req,
// released when the handler returns. If Check or the resolution fails the handler
// does not run: the reply is R with only its status set (nothing was resolved, so
// there are no attributes to report), statusOf the error.
type op[A, R any] struct {
	Name   string
	Cache  replyCache             // reply cache class
	Inline func(args []byte) bool // sunrpc.Proc.Inline: may the call run on the connection's reader
	Check  func(*A) error         // preamble: argument checks answered before the handle is resolved
	FH     func(*A) nfs3.FH       // preamble: the handle the call is about (required)
	Write  bool                   // preamble: the procedure modifies the export
	// Gone: a handle whose file no longer exists (but that passes its MAC and
	// the client's right to its export) still reaches the handler, with
	// r.node nil: CLOSE of a file another client deleted while it was open.
	// So does a handle whose export an exports reload removed, with r.exp nil
	// too (reload.go).
	Gone bool
	// MaxReply is sunrpc.Proc.MaxReply: the largest reply, reserved from the
	// connection's budget while the call runs (0: small).
	MaxReply int
	// Access names the regular files the call reads or changes, for the
	// consistency table (Spritely NFS section 6.1). Each is applied to the table
	// before the handler runs; when protocol clients must be called back first,
	// the reply is deferred and the handler runs once they have answered.
	Access func(s *Server, c *sunrpc.Call, r *req, a *A) []fileAccess
	// Gate, if set (and Access is not), may hold the handler back: it calls
	// proceed at once or later, from another goroutine (a lock delegation
	// recalled first: lockdeleg.go); the reply is deferred meanwhile, and
	// leave runs once the handler has.
	Gate func(s *Server, c *sunrpc.Call, a *A, proceed func(leave func()))
	// Changes, for a change, runs before the handler and returns what names
	// the objects the call changed once it has run (dirchange.go): their
	// directory promises are broken, and the reply waits for the breaks
	// (docs/protocol.md section 20). Handler rows only.
	Changes func(s *Server, c *sunrpc.Call, r *req, a *A) func(res *R) [][]byte
	// Dirs, for a change, names the directories whose entries (or, for a
	// directory, own attributes) it may change, and for a read
	// (readDirs) the directory it reads: another client's write-back
	// permit on one of them is recalled and the call waits, before its
	// Access and its handler, until the recall has ended; during the grace
	// period the call may be answered JUKEBOX instead (docs/protocol.md
	// sections 21.4 and 21.9; permitgate.go).
	Dirs func(a *A) []nfs3.FH
	// Removed, for a change that may remove a directory (RMDIR, a RENAME
	// over one), names it (looked up: nil if none): another client's
	// write-back permit on it is recalled first too, as Dirs', so that the
	// holder's logged entries in it are there when the call runs (an RMDIR
	// then fails NOTEMPTY, as it would have had they been made by calls;
	// docs/protocol.md section 21.6). Looked up only while permits exist.
	Removed func(s *Server, c *sunrpc.Call, r *req, a *A) []nfs3.FH
	// Applied, for a call that saves an intent (sunrpc.Call.SaveIntent),
	// reports whether the intent of an earlier attempt (Call.Intent: a
	// retransmission after a restart) says that attempt took effect: the
	// call then changes nothing and goes to its handler, which answers from
	// the intent, past the gates (grace period, permits, callbacks) - their
	// NFS3ERR_JUKEBOX would have the client send it again with a new xid,
	// which no intent names, and so apply it a second time.
	Applied func(intent []byte) bool
	// Handler fills res; Reply, instead, encodes the whole reply itself (READ
	// reads file data straight into the reply buffer); deferred: the reply was
	// deferred already (the call waited for callbacks or a recall first), and
	// w is the deferred reply's: Reply must not defer it again (later).
	Handler func(ctx context.Context, c *sunrpc.Call, r *req, a *A, res *R)
	Reply   func(ctx context.Context, c *sunrpc.Call, r *req, a *A, w *xdr.Writer, deferred bool) error
}

// nfsProc makes a table row a sunrpc.Proc: decode (GARBAGE_ARGS on failure), the
// preamble, the handler, encode.
func nfsProc[A, R any, PA interface {
	*A
	xdr.Decoder
}, PR interface {
	*R
	nfs3.Result
}](s *Server, o op[A, R]) sunrpc.Proc {
	if o.FH == nil || (o.Handler == nil) == (o.Reply == nil) {
		panic(fmt.Sprintf("server: NFS procedure %s: the table row needs FH and one of Handler or Reply", o.Name))
	}
	if o.Applied != nil && (o.Handler == nil || o.Cache != nonIdempotentSaved) {
		panic(fmt.Sprintf("server: NFS procedure %s: Applied needs a Handler row whose replies are saved", o.Name))
	}
	return sunrpc.Proc{Name: o.Name, Cache: o.Cache != idempotent, Persist: o.Cache == nonIdempotentSaved,
		Inline: o.Inline, MaxReply: o.MaxReply,
		Handler: func(ctx context.Context, c *sunrpc.Call, args *xdr.Reader, w *xdr.Writer) error {
			raw := args.Rest()
			var a A
			if PA(&a).Decode(args) != nil {
				return sunrpc.ErrGarbageArgs
			}
			r, err := preamble(s, c, &a, &o)
			if err != nil {
				c.SaveLater = true // nothing changed: nothing to wait for
				return encodeFailure[R, PR](w, err)
			}
			if o.Applied != nil && c.Intent != nil && o.Applied(c.Intent) {
				defer r.release()
				var res R
				o.Handler(ctx, c, r, &a, &res)
				PR(&res).Encode(w)
				return nil
			}
			// On an async export the change itself is not durable when it is
			// answered: neither need its saved reply be.
			c.SaveLater = r.opts.Async
			// run runs the handler; deferred: the reply was deferred (to wait
			// for callbacks) and is being written now.
			run := func(a *A, w *xdr.Writer, deferred bool) error {
				if o.Reply != nil {
					return o.Reply(ctx, c, r, a, w, deferred)
				}
				var after func(*R) [][]byte
				if o.Changes != nil && s.consist.Active() {
					after = o.Changes(s, c, r, a)
				}
				var res R
				o.Handler(ctx, c, r, a, &res)
				// Checked after the change: a promise recorded later is
				// recorded before its directory is read, so it reads the change.
				if after != nil && s.consist.DirsActive() {
					if fhs := after(&res); len(fhs) > 0 {
						return s.afterBreaks(c, w, deferred, fhs, func(w *xdr.Writer) error {
							PR(&res).Encode(w)
							return nil
						})
					}
				}
				PR(&res).Encode(w)
				return nil
			}
			// removed: the directory the call would remove (RMDIR, RENAME
			// over one), looked up once for both gates below.
			var removed []nfs3.FH
			removedLooked := false
			removedDirs := func() []nfs3.FH {
				if !removedLooked {
					removed, removedLooked = o.Removed(s, c, r, &a), true
				}
				return removed
			}
			if o.Dirs != nil && s.consist.InGrace() {
				// A directory whose permit may still be reclaimed, or is
				// reclaimed, waits for the grace period (permitgate.go).
				dirs := o.Dirs(&a)
				if o.Removed != nil {
					dirs = append(dirs, removedDirs()...)
				}
				if err := s.permitGraceGate(c, r, o.FH(&a), dirs); err != nil {
					r.release()
					c.SaveLater = true // nothing changed: nothing to wait for
					// JUKEBOX: the retry must run again, not get this
					// answer replayed (an OPEN_NAME's, a CREATE's are
					// cached).
					c.NoCache = true
					return encodeFailure[R, PR](w, err)
				}
			}
			if o.Gate != nil && o.Access == nil {
				return gated[A, PA](s, c, w, r, &a, raw, o.Gate, run)
			}
			var pdirs []nfs3.FH
			if o.Dirs != nil && s.consist.PermitsActive() {
				pdirs = o.Dirs(&a)
				if o.Removed != nil {
					if rm := s.othersPermits(c, removedDirs()); rm != nil {
						pdirs = append(pdirs, rm...)
					}
				}
				if !o.Write && o.Changes == nil {
					// A read (readDirs) waits only for another client's
					// permit on its directory: with none, it takes the
					// direct path, as with no permit anywhere.
					pdirs = s.othersPermits(c, pdirs)
				}
			}
			if pdirs == nil && (o.Access == nil || !s.consist.Active()) {
				defer r.release()
				return run(&a, w, false)
			}
			var accs []fileAccess
			if o.Access != nil && s.consist.Active() {
				accs = o.Access(s, c, r, &a)
			}
			recalled := false                                    // the call waited for a permit's recall
			keep := func() { raw = append([]byte(nil), raw...) } // the request buffer is reused once the handler returns
			_, err = later(c, w, keep, func(done func(error)) {
				if pdirs == nil {
					s.admit(s.consist.Caller(c), accs, done)
					return
				}
				s.permitGate(c, pdirs, accs, &recalled, done)
			}, func(w *xdr.Writer, err error, deferred bool) error {
				defer r.release()
				switch {
				case w == nil:
					return nil
				case err != nil:
					return encodeFailure[R, PR](w, err)
				case !deferred:
					return run(&a, w, false)
				}
				a2, err := reDecode[A, PA](raw)
				if err != nil {
					return sunrpc.ErrGarbageArgs
				}
				// The call waited for callbacks: the write-backs they asked for
				// changed the attributes resolved before.
				if err := r.node.Refresh(); err != nil {
					return encodeFailure[R, PR](w, err)
				}
				if recalled && o.Access != nil {
					// The holder's reintegration may have made the files
					// this call removes or truncates.
					if err := s.admitMore(c, accs, o.Access(s, c, r, a2)); err != nil {
						return encodeFailure[R, PR](w, err)
					}
				}
				return run(a2, w, true)
			})
			return err
		}}
}

// gated runs a handler through its op's Gate: now, or once the gate lets it
// proceed, with the arguments decoded again from a copy of raw.
func gated[A any, PA interface {
	*A
	xdr.Decoder
}](s *Server, c *sunrpc.Call, w *xdr.Writer, r *req, a *A, raw []byte,
	gate func(*Server, *sunrpc.Call, *A, func(func())), run func(*A, *xdr.Writer, bool) error) error {
	var leave func()
	keep := func() { raw = append([]byte(nil), raw...) } // the request buffer is reused once the handler returns
	_, err := later(c, w, keep, func(done func(error)) {
		gate(s, c, a, func(lv func()) {
			leave = lv
			done(nil)
		})
	}, func(w *xdr.Writer, err error, deferred bool) error {
		defer r.release()
		defer leave()
		switch {
		case w == nil:
			return nil
		case !deferred:
			return run(a, w, false)
		}
		a2, err := reDecode[A, PA](raw)
		if err != nil {
			return sunrpc.ErrGarbageArgs
		}
		return run(a2, w, true)
	})
	return err
}

// encodeFailure encodes R with only its status set, statusOf(err).
func encodeFailure[R any, PR interface {
	*R
	nfs3.Result
}](w *xdr.Writer, err error) error {
	var res R
	PR(&res).SetStatus(statusOf(err))
	PR(&res).Encode(w)
	return nil
}

// reDecode decodes the call's arguments again from raw, a copy of them taken
// before the reply was deferred, for a handler that runs after the call's
// handler returned: arguments decoded then alias the request buffer, which is
// reused by now.
func reDecode[A any, PA interface {
	*A
	xdr.Decoder
}](raw []byte) (*A, error) {
	var a A
	if err := PA(&a).Decode(xdr.NewReader(raw)); err != nil {
		return nil, err
	}
	return &a, nil
}

// preamble is the shared opening of every NFSv3 handler (see op).
func preamble[A, R any](s *Server, c *sunrpc.Call, a *A, o *op[A, R]) (*req, error) {
	if o.Check != nil {
		if err := o.Check(a); err != nil {
			return nil, err
		}
	}
	if o.Write {
		return s.resolveWrite(c, o.FH(a))
	}
	return s.resolveFor(c, o.FH(a), o.Gone)
}

// replyCache is a procedure's reply cache class (sunrpc.Proc.Cache and Persist).
type replyCache int

const (
	idempotent    replyCache = iota // executed again when retransmitted
	nonIdempotent                   // replies kept in the duplicate request cache, in memory
	// nonIdempotentSaved: replies also saved in the state directory before
	// they are sent, and replayed to a retransmission after a restart: the
	// namespace changes and SETATTR, whose second execution answers
	// differently (EEXIST, ENOENT, a guard's NOT_SYNC) or undoes later
	// changes (a size set again after writes). WRITE is not saved: writing
	// the same bytes again at the same offset is harmless, and saving each
	// would cost a flush per write.
	nonIdempotentSaved
)

// nfsProgram is the NFSv3 procedure table (RFC 1813 section 3.3). Inline: calls
// that never wait on a flush or on another call run on the connection's reader;
// namespace changes and SETATTR only on async exports (elsewhere they flush), WRITE
// only when UNSTABLE (inline.go).
func (s *Server) nfsProgram() *sunrpc.Program {
	always := sunrpc.Always
	procs := []sunrpc.Proc{
		nfs3.ProcNull: {Name: "NULL", Handler: nullProc, Inline: always},
		nfs3.ProcGetattr: nfsProc(s, op[nfs3.FHArgs, nfs3.GetattrRes]{Name: "GETATTR", Cache: idempotent, Inline: always,
			FH: func(a *nfs3.FHArgs) nfs3.FH { return a.FH }, Handler: s.getattr, Access: getattrAccess, Dirs: readDirs(func(a *nfs3.FHArgs) nfs3.FH { return a.FH })}),
		nfs3.ProcSetattr: nfsProc(s, op[nfs3.SetattrArgs, nfs3.WccRes]{Name: "SETATTR", Cache: nonIdempotentSaved, Inline: s.inlineIfAsync,
			FH: func(a *nfs3.SetattrArgs) nfs3.FH { return a.Object }, Write: true, Handler: s.setattr, Access: setattrAccess, Changes: setattrChanges, Dirs: func(a *nfs3.SetattrArgs) []nfs3.FH { return []nfs3.FH{a.Object} }}),
		nfs3.ProcLookup: nfsProc(s, op[nfs3.DirOpArgs, nfs3.LookupRes]{Name: "LOOKUP", Cache: idempotent, Inline: always,
			FH: func(a *nfs3.DirOpArgs) nfs3.FH { return a.Dir }, Handler: s.lookup, Dirs: readDirs(func(a *nfs3.DirOpArgs) nfs3.FH { return a.Dir })}),
		nfs3.ProcAccess: nfsProc(s, op[nfs3.AccessArgs, nfs3.AccessRes]{Name: "ACCESS", Cache: idempotent, Inline: always,
			FH: func(a *nfs3.AccessArgs) nfs3.FH { return a.Object }, Handler: s.access, Access: accessAccess, Dirs: readDirs(func(a *nfs3.AccessArgs) nfs3.FH { return a.Object })}),
		nfs3.ProcReadlink: nfsProc(s, op[nfs3.FHArgs, nfs3.ReadlinkRes]{Name: "READLINK", Cache: idempotent, Inline: always,
			FH: func(a *nfs3.FHArgs) nfs3.FH { return a.FH }, Handler: s.readlink}),
		nfs3.ProcRead: nfsProc(s, op[nfs3.ReadArgs, nfs3.ReadRes]{Name: "READ", Cache: idempotent, Inline: always,
			FH: func(a *nfs3.ReadArgs) nfs3.FH { return a.File }, Reply: s.read, MaxReply: maxIO + 4096, Access: readAccess}),
		nfs3.ProcWrite: nfsProc(s, op[nfs3.WriteArgs, nfs3.WriteRes]{Name: "WRITE", Cache: nonIdempotent, Inline: inlineWrite,
			FH: func(a *nfs3.WriteArgs) nfs3.FH { return a.File }, Write: true, Handler: s.write, Access: writeAccess, Changes: writeChanges}),
		nfs3.ProcCreate: nfsProc(s, op[nfs3.CreateArgs, nfs3.CreateRes]{Name: "CREATE", Cache: nonIdempotentSaved, Inline: s.inlineIfAsync,
			FH: func(a *nfs3.CreateArgs) nfs3.FH { return a.Where.Dir }, Write: true, Handler: s.create, Access: createAccess, Changes: createRowChanges, Dirs: func(a *nfs3.CreateArgs) []nfs3.FH { return []nfs3.FH{a.Where.Dir} }}),
		nfs3.ProcMkdir: nfsProc(s, op[nfs3.MkdirArgs, nfs3.CreateRes]{Name: "MKDIR", Cache: nonIdempotentSaved, Inline: s.inlineIfAsync,
			FH: func(a *nfs3.MkdirArgs) nfs3.FH { return a.Where.Dir }, Write: true, Handler: s.mkdir, Changes: mkdirChanges, Dirs: func(a *nfs3.MkdirArgs) []nfs3.FH { return []nfs3.FH{a.Where.Dir} }}),
		nfs3.ProcSymlink: nfsProc(s, op[nfs3.SymlinkArgs, nfs3.CreateRes]{Name: "SYMLINK", Cache: nonIdempotentSaved, Inline: s.inlineIfAsync,
			FH: func(a *nfs3.SymlinkArgs) nfs3.FH { return a.Where.Dir }, Write: true, Handler: s.symlink, Changes: symlinkChanges, Dirs: func(a *nfs3.SymlinkArgs) []nfs3.FH { return []nfs3.FH{a.Where.Dir} }}),
		nfs3.ProcMknod: nfsProc(s, op[nfs3.MknodArgs, nfs3.CreateRes]{Name: "MKNOD", Cache: nonIdempotentSaved, Inline: s.inlineIfAsync,
			Check: checkMknodType, FH: func(a *nfs3.MknodArgs) nfs3.FH { return a.Where.Dir }, Write: true, Handler: s.mknod, Changes: mknodChanges, Dirs: func(a *nfs3.MknodArgs) []nfs3.FH { return []nfs3.FH{a.Where.Dir} }}),
		nfs3.ProcRemove: nfsProc(s, op[nfs3.DirOpArgs, nfs3.WccRes]{Name: "REMOVE", Cache: nonIdempotentSaved, Inline: s.inlineIfAsync,
			FH: func(a *nfs3.DirOpArgs) nfs3.FH { return a.Dir }, Write: true, Handler: s.remove, Access: removeAccess, Changes: removeChanges, Dirs: func(a *nfs3.DirOpArgs) []nfs3.FH { return []nfs3.FH{a.Dir} }}),
		nfs3.ProcRmdir: nfsProc(s, op[nfs3.DirOpArgs, nfs3.WccRes]{Name: "RMDIR", Cache: nonIdempotentSaved, Inline: s.inlineIfAsync,
			Check: checkRmdirName, FH: func(a *nfs3.DirOpArgs) nfs3.FH { return a.Dir }, Write: true, Handler: s.rmdir, Changes: rmdirChanges, Dirs: func(a *nfs3.DirOpArgs) []nfs3.FH { return []nfs3.FH{a.Dir} }, Removed: rmdirRemoved}),
		// RENAME's and LINK's second handle is resolved by the handler.
		nfs3.ProcRename: nfsProc(s, op[nfs3.RenameArgs, nfs3.RenameRes]{Name: "RENAME", Cache: nonIdempotentSaved, Inline: s.inlineIfAsync,
			FH: func(a *nfs3.RenameArgs) nfs3.FH { return a.From.Dir }, Write: true, Handler: s.rename, Access: renameAccess, Changes: renameChanges, Dirs: func(a *nfs3.RenameArgs) []nfs3.FH { return []nfs3.FH{a.From.Dir, a.To.Dir} }, Removed: renameRemoved}),
		nfs3.ProcLink: nfsProc(s, op[nfs3.LinkArgs, nfs3.LinkRes]{Name: "LINK", Cache: nonIdempotentSaved, Inline: s.inlineIfAsync,
			FH: func(a *nfs3.LinkArgs) nfs3.FH { return a.File }, Handler: s.link, Changes: linkChanges, Dirs: func(a *nfs3.LinkArgs) []nfs3.FH { return []nfs3.FH{a.Link.Dir} }}),
		nfs3.ProcReaddir: nfsProc(s, op[nfs3.ReaddirArgs, nfs3.ReaddirRes]{Name: "READDIR", Cache: idempotent, Inline: always,
			FH: func(a *nfs3.ReaddirArgs) nfs3.FH { return a.Dir }, Handler: s.readdir, Dirs: readDirs(func(a *nfs3.ReaddirArgs) nfs3.FH { return a.Dir })}),
		nfs3.ProcReaddirplus: nfsProc(s, op[nfs3.ReaddirplusArgs, nfs3.ReaddirRes]{Name: "READDIRPLUS", Cache: idempotent, Inline: always,
			FH: func(a *nfs3.ReaddirplusArgs) nfs3.FH { return a.Dir }, Handler: s.readdirplus, Dirs: readDirs(func(a *nfs3.ReaddirplusArgs) nfs3.FH { return a.Dir })}),
		nfs3.ProcFsstat: nfsProc(s, op[nfs3.FHArgs, nfs3.FsstatRes]{Name: "FSSTAT", Cache: idempotent, Inline: always,
			FH: func(a *nfs3.FHArgs) nfs3.FH { return a.FH }, Handler: s.fsstat}),
		nfs3.ProcFsinfo: nfsProc(s, op[nfs3.FHArgs, nfs3.FsinfoRes]{Name: "FSINFO", Cache: idempotent, Inline: always,
			FH: func(a *nfs3.FHArgs) nfs3.FH { return a.FH }, Handler: s.fsinfo}),
		nfs3.ProcPathconf: nfsProc(s, op[nfs3.FHArgs, nfs3.PathconfRes]{Name: "PATHCONF", Cache: idempotent, Inline: always,
			FH: func(a *nfs3.FHArgs) nfs3.FH { return a.FH }, Handler: s.pathconf}),
		nfs3.ProcCommit: nfsProc(s, op[nfs3.CommitArgs, nfs3.CommitRes]{Name: "COMMIT", Cache: idempotent,
			FH: func(a *nfs3.CommitArgs) nfs3.FH { return a.File }, Handler: s.commit}),
	}
	return &sunrpc.Program{Name: "nfs", Number: nfs3.Program, Versions: map[uint32][]sunrpc.Proc{nfs3.Version: procs}}
}

// nullProc is NULL (RFC 1813 section 3.3.0): do nothing.
func nullProc(ctx context.Context, c *sunrpc.Call, args *xdr.Reader, w *xdr.Writer) error { return nil }
