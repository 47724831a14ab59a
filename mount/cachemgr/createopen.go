package cachemgr

import (
	"context"
	"errors"
	"sync"

	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
	"snfs/sunrpc"
)

// CREATE_OPEN (docs/protocol.md 4.21): Create's CREATE and the new file's
// OPEN_WRITE in one call. Its open is applied by snfsOpenProto as an OPEN's
// answer (snfsOpenProtoWith), except when it cannot be trusted: the server
// restarted while it was out (its boot verifier differs: a saved reply
// replayed, an open the new server does not count), or a callback about the
// file came before the file's machine recorded the open (the handle is
// learnt from the reply), whose answer may have handed the open back.

// createOpened is what a CREATE_OPEN's reply said of its open, and the
// callbacks that came while it was out.
type createOpened struct {
	set   *createOpens
	start uint64 // the attributes' start, taken before the call was sent
	// epoch: the registration the call was sent under (keptlease.go),
	// taken before it was sent.
	epoch openEpoch
	open  snfs1.OpenRes
	verf  snfs1.Verifier
	made  nfs3.FH // the file the reply names (nil: no reply yet, or a failed create)
	// called: the callbacks that began while the call was out and before
	// the file's machine recorded the open. Guarded by set.mu.
	called []*cbNote
	ended  bool // guarded by set.mu
}

// cbNote is one callback that began while CREATE_OPENs were out: its
// answer, once given (done closed).
type cbNote struct {
	fh   nfs3.FH
	mode state.CallbackMode
	out  state.Outcome
	done chan struct{}
}

// createOpens are the CREATE_OPENs in flight.
type createOpens struct {
	mu   sync.Mutex
	live map[*createOpened]struct{}
}

// begin records a CREATE_OPEN about to be sent.
func (s *createOpens) begin(start uint64) *createOpened {
	co := &createOpened{set: s, start: start}
	s.mu.Lock()
	if s.live == nil {
		s.live = make(map[*createOpened]struct{})
	}
	s.live[co] = struct{}{}
	s.mu.Unlock()
	return co
}

// callback notes a callback that begins, if CREATE_OPENs are out; its
// answer is given to the returned function (nil: none are out).
func (s *createOpens) callback(fh nfs3.FH, mode state.CallbackMode) func(state.Outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.live) == 0 {
		return nil
	}
	n := &cbNote{fh: append(nfs3.FH(nil), fh...), mode: mode, done: make(chan struct{})}
	for co := range s.live {
		co.called = append(co.called, n)
	}
	return func(out state.Outcome) {
		n.out = out
		close(n.done)
	}
}

// end takes the CREATE_OPEN out of the set (the file's machine records its
// open from now on, or it failed) and returns the callbacks about fh (nil:
// any file) that began while it was out.
func (co *createOpened) end(fh nfs3.FH) []*cbNote {
	s := co.set
	s.mu.Lock()
	defer s.mu.Unlock()
	if co.ended {
		return nil
	}
	co.ended = true
	delete(s.live, co)
	var about []*cbNote
	for _, n := range co.called {
		if string(n.fh) == string(fh) {
			about = append(about, n)
		}
	}
	co.called = nil
	return about
}

// trusted returns the reply's open answer if it is one this client holds
// (docs/protocol.md 4.21), or nil, and ends co: after the machine recorded
// the open in flight (OpenBegin), callbacks about the file answer as for any
// OPEN in flight. A callback about the file that began before is waited for
// (it takes no lock the caller holds: a callback takes no openMu); if it
// handed the open back (CB_STALE, CB_TREAT_AS_CLOSED) or failed (the client
// is fenced for the file), the open is not held: nil, and the caller OPENs.
// If it invalidated, the answer is taken without caching.
func (co *createOpened) trusted(ctx context.Context, sn *snfsFS, fh nfs3.FH) *snfs1.OpenOK {
	res := co.held(ctx, sn, fh)
	if res != nil {
		sn.stats.CreateOpened.Add(1)
	}
	return res
}

// held is trusted without counting the open as applied.
func (co *createOpened) held(ctx context.Context, sn *snfsFS, fh nfs3.FH) *snfs1.OpenOK {
	notes := co.end(fh)
	if co.open.Status != nfs3.OK || co.verf != sn.sess.ServerVerifier() {
		return nil
	}
	res := co.open.OpenOK
	for _, n := range notes {
		select {
		case <-n.done:
		case <-ctx.Done():
			return nil
		}
		switch n.out {
		case state.OK, state.Pinned:
		default:
			return nil
		}
		if n.mode.Invalidates() || n.out == state.Pinned {
			res.CacheEnabled = false // a client may always do less than the server allows
		}
	}
	return &res
}

// createVia is the CreateSender of snfs mode's Create: CREATE_OPEN as c,
// with CREATE's result for the core and the open's kept in co; NFSv3
// CREATE (co.open left failed) once the server answered PROC_UNAVAIL.
func (sn *snfsFS) createVia(ctx context.Context, c vfs.Cred, co *createOpened) vfs.CreateSender {
	return func(args *nfs3.CreateArgs) (*nfs3.CreateRes, error) {
		co.open.Status = nfs3.ErrNotSupp // not opened, unless the reply says so
		if !sn.noCreateOpen.Load() {
			res, err := sn.sess.CreateOpenAs(ctx, c.UID, c.GID, c.Groups, args)
			var rerr *sunrpc.RPCError
			switch {
			case errors.As(err, &rerr) && (rerr.Accept == sunrpc.ProcUnavail || rerr.Accept == sunrpc.ProgUnavail):
				if sn.noCreateOpen.CompareAndSwap(false, true) {
					sn.Logger().Info("the server has no CREATE_OPEN: files are created with CREATE, then opened")
				}
			case res == nil:
				return nil, err
			default:
				if res.Status == nfs3.OK {
					co.open, co.verf, co.made = res.Open, res.ServerVerf, res.File
				}
				if sn.createOpenAnswered != nil {
					sn.createOpenAnswered(res)
				}
				cres := &nfs3.CreateRes{Status: res.Status, Object: res.File, Attr: res.Attr, DirWcc: res.DirWcc}
				if res.Status != nfs3.OK {
					return cres, res.Status.Err()
				}
				return cres, nil
			}
		}
		return vfs.RPC(ctx, sn.FS, func() (*nfs3.CreateRes, error) { return sn.Client(c).Create(ctx, args) })
	}
}

// createOpen is Create in snfs mode with CREATE_OPEN (createVia; its open
// applied by snfsCreated).
func (sn *snfsFS) createOpen(ctx context.Context, dir *vfs.Inode, c vfs.Cred, name string, mode uint32, excl bool, flags int) (vfs.Entry, *vfs.File, error) {
	co := sn.createOpens.begin(sn.AttrStart())
	co.epoch = sn.openEpochNow()
	e, err := sn.FS.CreateCoreVia(ctx, dir, c, name, mode, excl, flags, sn.createVia(ctx, c, co))
	if err != nil {
		sn.giveBackCreateOpened(ctx, co)
		return vfs.Entry{}, nil, err
	}
	return sn.snfsCreated(ctx, e, c, flags, co)
}

// giveBackCreateOpened ends co, a CREATE_OPEN after which the create failed
// here after all (the GETATTR or LOOKUP that followed its reply, the file's
// attributes or handle missing from it): an open the reply granted and the
// server still counts (trusted) is CLOSEd, or it stayed counted at the
// server with no application holding it - for good, the file looking
// write-shared to every other client - as nothing here records it. The
// CLOSE is sent whatever becomes of the create's context.
func (sn *snfsFS) giveBackCreateOpened(ctx context.Context, co *createOpened) {
	if co.made == nil {
		co.end(nil)
		return
	}
	ctx = context.WithoutCancel(ctx)
	if co.held(ctx, sn, co.made) == nil {
		return
	}
	dirty := false
	if i := sn.LookupInode(co.made); i != nil {
		// Other opens' dirty data of the file, which the server must go
		// on asking for.
		i.Mu.Lock()
		dirtyLocked(i)
		dirty = stOf(i).Dirty() || i.WState.Pending()
		i.Mu.Unlock()
	}
	_, err := sn.sess.Close(ctx, co.made, state.Write, dirty)
	sn.Logger().Debug("CLOSE of a failed create's CREATE_OPEN open", "dirty", dirty, "err", err)
	if sn.disc.owe(co.made, state.Write, dirty, err) {
		return // offline: sent on reconnection (disconnected.go)
	}
	if err != nil && !errors.Is(err, nfs3.ErrStale) && !errors.Is(err, snfs1.ErrFenced) {
		sn.Logger().Warn("CLOSE of a failed create's CREATE_OPEN open", "err", err)
	}
}
