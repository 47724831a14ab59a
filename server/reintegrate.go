package server

import (
	"context"
	"sync"

	"snfs/consist"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
	"snfs/sunrpc"
	"snfs/xdr"
)

// reintegrate is REINTEGRATE (docs/protocol.md section 21.3; Coda's
// reintegration of the client modification log): a batch of log records
// applied in order, each as the NFSv3 procedure it stands for (CREATE
// GUARDED, MKDIR, SYMLINK, LINK, REMOVE, RMDIR, RENAME, SETATTR), with the
// caller's credentials and the export's rights, by the handlers those
// procedures use. A record is applied only if its LSN is above the client's
// last applied one (consist's durable record): one at or below it was
// applied before, by this batch sent earlier, and is answered again (with
// the handle of the object it made, recorded with the last applied LSN:
// reintegratemade.go) without being applied twice. Every directory a
// record changes must be under a permit the batch names and the client
// holds (a recalled one included: the holder reintegrates during its
// recall), or made earlier in the batch; else the record fails
// SNFS_ERR_NOPERMIT. The batch stops at the first record that fails; the
// reply lists every record up to it.
//
// A record that removes or truncates a regular file another client caches
// waits for that client's callbacks first, as the NFSv3 procedure would
// (plain access, section 14): the reply is deferred meanwhile and the batch
// goes on from the callbacks' answer. The batch's highest LSN is committed
// as pending before its first record, the last applied LSN after the
// records' changes (each made durable as its procedure makes it) and before
// the reply; a resent batch's records between the two (the server crashed
// while applying it) are checked for their effect before being applied
// (present). The reply waits for the directory promises the changes broke
// (section 20.3).
func (s *Server) reintegrate(ctx context.Context, c *sunrpc.Call, args *xdr.Reader, w *xdr.Writer) error {
	var a snfs1.ReintegrateArgs
	if a.Decode(args) != nil {
		return sunrpc.ErrGarbageArgs
	}
	fail := func(err error) error { return failReintegrate(w, err) }
	mid, err := s.consist.Client(a.Client)
	if err != nil {
		return fail(err)
	}
	// The records outlive the request buffer when the batch waits (for
	// callbacks, or for the client's batch before it): their handles are
	// copied (names are strings already).
	recs := a.Records
	for i := range recs {
		r := &recs[i]
		r.Dir.FH, r.Obj.FH, r.ToDir.FH = copyFH(r.Dir.FH), copyFH(r.Obj.FH), copyFH(r.ToDir.FH)
	}
	permits := map[state.FileID]uint64{}
	refs := make([]consist.PermitRef, 0, len(a.Permits))
	for _, p := range a.Permits {
		permits[state.FileIDOf(p.Dir)] = p.Permit
		refs = append(refs, consist.PermitRef{Dir: copyFH(p.Dir), ID: p.Permit})
	}
	var b *batch
	var callErr error // the whole call failed
	_, err = later(c, w, nil, func(done func(error)) {
		// One batch of a client at a time: a batch sent again while the
		// first is still being applied (waiting for callbacks) reads the
		// last applied LSN once the first has recorded it, and applies
		// nothing twice.
		s.reint.enter(mid, func() {
			// The permits the batch names do not end while it is
			// applied (a recall's deadline passing while a record waits
			// for a third client's callback, say): the changes held
			// back by their recalls are made after the whole batch.
			endPermits := s.consist.PermitBatch(mid, refs)
			end := func(err error) {
				callErr = err
				endPermits()
				if b != nil {
					b.endNew()
				}
				done(nil)
				s.reint.leave(mid)
			}
			nb, err := s.beginBatch(ctx, c, mid, recs, permits)
			if err != nil {
				end(err)
				return
			}
			b = nb
			flush := s.groupCommit(c)
			b.run(0, func() {
				if err := flush(); err != nil {
					// Applied but not durable: the LSN is not recorded,
					// the pending LSN stays (a resend checks the records).
					s.log.Error("reintegration: the batch's flush failed", "err", err)
					end(err)
					return
				}
				end(b.record())
			})
		})
	}, func(w *xdr.Writer, _ error, deferred bool) error {
		if w == nil {
			return nil
		}
		if callErr != nil {
			return failReintegrate(w, callErr)
		}
		b.dropEnded()
		res := snfs1.ReintegrateRes{Applied: b.applied, Results: b.results, Dirs: s.dirAttrs(c, b.dirs), Opens: b.opens}
		encode := func(w *xdr.Writer) error { res.Encode(w); return nil }
		if len(b.changed) > 0 && s.consist.DirsActive() {
			return s.afterBreaks(c, w, deferred, b.changed, encode)
		}
		return encode(w)
	})
	return err
}

// beginBatch reads the client's last applied LSN, finds what of a batch a
// crash interrupted was applied, records the batch's highest LSN as pending
// with its pre-image, and returns the batch to apply.
func (s *Server) beginBatch(ctx context.Context, c *sunrpc.Call, mid state.ClientID, recs []snfs1.CMLRecord, permits map[state.FileID]uint64) (*batch, error) {
	last, pending, pre, err := s.consist.LastLSN(mid)
	if err != nil {
		return nil, err
	}
	recorded, known, err := s.consist.MadeHandles(mid)
	if err != nil {
		return nil, err
	}
	b := &batch{s: s, ctx: ctx, c: c, mid: mid, recs: recs, last: last, maybe: last, applied: last,
		permits: permits, made: map[state.FileID]bool{}, prov: map[uint64]nfs3.FH{},
		recorded: recorded, known: known, madeNow: map[uint64]consist.Made{}}
	if pending > last {
		// A batch whose application began and did not end (the server
		// crashed): its records after last may have been applied.
		b.maybe = pending
		b.maybe = b.crashPrefix(pre)
	}
	n := len(recs)
	if n == 0 {
		return b, nil
	}
	// The client sends its log from its first unacknowledged record on:
	// the opens granted below it were answered (reintegrateopen.go).
	s.reintOpens.below(mid, recs[0].LSN)
	switch hi := recs[n-1].LSN; {
	case hi > b.maybe:
		// Records to apply: what the check found applied is the last
		// applied from now on, and the pre-image is of the names now.
		if err := s.consist.BeginLSN(mid, b.maybe, hi, b.preImage(b.maybe)); err != nil {
			return nil, err
		}
		b.begun = true
	case pending > hi && b.maybe == hi:
		// All of it was applied before a crash that interrupted a longer
		// batch: the rest of that batch stays to be checked, from the
		// names as they are now.
		for k, v := range b.preImage(b.last) {
			if pre == nil {
				break
			}
			pre[k] = v
		}
		if err := s.consist.BeginLSN(mid, hi, pending, pre); err != nil {
			return nil, err
		}
		b.begun, b.keep = true, true
	case pending > last:
		b.begun = true // the check's finding is recorded, the batch done
	}
	return b, nil
}

// record commits the batch's last applied LSN (and the batch done) before
// the reply.
func (b *batch) record() error {
	if !b.begun {
		return nil
	}
	if err := b.s.consist.SetLastLSN(b.mid, b.applied, b.keep, b.madeRecord()); err != nil {
		// Applied but not recorded: the pending LSN stays, a resend
		// checks the records for their effect.
		b.s.log.Error("reintegration: recording the last applied LSN failed", "err", err)
		return err
	}
	return nil
}

// reintQueues runs the REINTEGRATEs of each client one at a time, in the
// order they arrive, without a waiting thread: a batch that finds another
// of its client's being applied is queued, and started by the one before it
// as it ends.
type reintQueues struct {
	mu sync.Mutex
	q  map[state.ClientID][]func() // a client's queued batches; present while one runs
	// gates: the permit holders each client's batch waits for, in a
	// record's gate (reintegrategate.go's gateWait).
	gates map[state.ClientID][]state.ClientID
}

// enter runs start now if no batch of client c is being applied, else once
// those before it have left.
func (r *reintQueues) enter(c state.ClientID, start func()) {
	r.mu.Lock()
	if r.q == nil {
		r.q = map[state.ClientID][]func(){}
	}
	if q, busy := r.q[c]; busy {
		r.q[c] = append(q, start)
		r.mu.Unlock()
		return
	}
	r.q[c] = nil
	r.mu.Unlock()
	start()
}

// leave ends client c's running batch and starts its next one, if any.
func (r *reintQueues) leave(c state.ClientID) {
	r.mu.Lock()
	q := r.q[c]
	if len(q) == 0 {
		delete(r.q, c)
		r.mu.Unlock()
		return
	}
	next := q[0]
	r.q[c] = q[1:]
	r.mu.Unlock()
	next()
}

// failReintegrate encodes the failure of the whole call.
func failReintegrate(w *xdr.Writer, err error) error {
	(&snfs1.ReintegrateRes{Status: statusOf(err)}).Encode(w)
	return nil
}

func copyFH(fh nfs3.FH) nfs3.FH {
	if fh == nil {
		return nil
	}
	return append(nfs3.FH(nil), fh...)
}

// reintegrateResultMax bounds one encoded cmlres1: LSN, status, a handle,
// attributes and a permit id.
const reintegrateResultMax = 8 + 4 + 4 + 4 + nfs3.FHSize + 4 + 84 + 8 + cmlOpenMax

// cmlOpenMax bounds one encoded cmlopen1: LSN, verifier, and OPEN1res.
const cmlOpenMax = 8 + snfs1.VerfSize + 4 + 8 + 8 + 4 + 4 + 84

// batch is one REINTEGRATE being applied.
type batch struct {
	s       *Server
	ctx     context.Context
	c       *sunrpc.Call
	mid     state.ClientID
	recs    []snfs1.CMLRecord
	last    uint64                  // the client's last applied LSN before the batch
	maybe   uint64                  // records after last up to maybe were applied before a crash
	begun   bool                    // the batch's beginning was recorded (BeginLSN)
	keep    bool                    // a crash-interrupted batch goes on past this one: its pending LSN stays
	applied uint64                  // the last LSN applied (or found applied)
	permits map[state.FileID]uint64 // directory -> the permit id the batch names
	made    map[state.FileID]bool   // directories made by the batch
	prov    map[uint64]nfs3.FH      // provisional id -> real handle
	// recorded: the handles the records applied before made, by LSN
	// (consist's MadeHandles, up to last); known: recorded at all (a
	// database from before has none, and is answered by name).
	recorded map[uint64]consist.Made
	known    bool
	madeNow  map[uint64]consist.Made // the handles the batch answered, by LSN: recorded with its last applied LSN
	results  []snfs1.CMLResult       // one per record, up to the first failure
	changed  [][]byte                // what the records changed: promises to break
	dirs     []nfs3.FH               // the directories whose entries the records applied changed, once each
	opens    []snfs1.CMLOpen         // the CML_CREATE_OPEN records' opens (reintegrateopen.go)
	toOpen   *openWanted             // the open the record just applied asks for; taken by run
	// newEnds: the ends of the permits the batch's MKDIR records gave
	// (granted now, or answered again), held like those it names until
	// the whole batch is applied (holdNew); called by endNew.
	newEnds []func()
	mu      sync.Mutex // guards the hand-over in run between admit's answer and run
}

// run applies records from i on, then calls finish. A record that must
// wait for callbacks continues the batch from their answer, on the
// goroutine that delivers it.
func (b *batch) run(i int, finish func()) {
	for ; i < len(b.recs); i++ {
		rec := &b.recs[i]
		var accs []fileAccess
		var pdirs [][]byte
		if rec.LSN > b.last {
			accs = b.accesses(rec)
			pdirs = b.removedPermits(rec) // reintegrategate.go
		}
		if len(accs) == 0 && len(pdirs) == 0 {
			if !b.step(rec, nil) {
				break
			}
			if b.toOpen != nil && !b.openNow(i, finish) {
				return // the open's answer goes on
			}
			continue
		}
		inline, ready := true, false
		var aerr error
		next := i
		b.gate(pdirs, accs, func(err error) {
			b.mu.Lock()
			if inline {
				ready, aerr = true, err
				b.mu.Unlock()
				return
			}
			b.mu.Unlock()
			if !b.step(rec, err) {
				finish()
				return
			}
			if b.toOpen != nil && !b.openNow(next, finish) {
				return
			}
			b.run(next+1, finish)
		})
		b.mu.Lock()
		inline = false
		r := ready
		b.mu.Unlock()
		if !r {
			return // the callbacks' answer goes on
		}
		if !b.step(rec, aerr) {
			break
		}
		if b.toOpen != nil && !b.openNow(i, finish) {
			return
		}
	}
	finish()
}

// step applies one record (admitted: err is the plain-access verdict) and
// records its result; it reports whether the batch goes on.
func (b *batch) step(rec *snfs1.CMLRecord, err error) bool {
	res := snfs1.CMLResult{LSN: rec.LSN}
	if err == nil {
		switch {
		case rec.LSN <= b.last:
			b.again(rec, &res)
		case rec.LSN <= b.maybe && rec.Op != snfs1.CMLStore:
			b.again(rec, &res) // applied before the crash (a STORE is applied again)
		default:
			err = b.apply(rec, &res)
		}
	}
	if err != nil {
		res = snfs1.CMLResult{LSN: rec.LSN, Status: statusOf(err)}
	}
	b.results = append(b.results, res)
	if res.Status != nfs3.OK {
		return false
	}
	b.applied = max(b.applied, rec.LSN)
	return true
}

// dirChanged records that an applied record changed dir's entries.
func (b *batch) dirChanged(dir nfs3.FH) {
	for _, d := range b.dirs {
		if string(d) == string(dir) {
			return
		}
	}
	b.dirs = append(b.dirs, dir)
}

// dirAttrs are the attributes of dirs now (REINTEGRATE1resok's dirs): a
// directory that no longer resolves (removed by a later record of the
// batch) is left out.
func (s *Server) dirAttrs(c *sunrpc.Call, dirs []nfs3.FH) []snfs1.DirAttr {
	var out []snfs1.DirAttr
	for _, d := range dirs {
		r, err := s.resolve(c, d)
		if err != nil {
			continue
		}
		out = append(out, snfs1.DirAttr{Dir: d, Attr: *fattr(&r.node.Stat, r.fsid())})
		r.release()
	}
	return out
}

// ref resolves an object reference to a handle.
func (b *batch) ref(o snfs1.ObjRef) (nfs3.FH, error) {
	if o.Prov == 0 {
		return o.FH, nil
	}
	if fh, ok := b.prov[o.Prov]; ok {
		return fh, nil
	}
	if fh := b.applied1Ref(o.Prov, len(b.recs)); fh != nil {
		b.prov[o.Prov] = fh
		return fh, nil
	}
	return nil, nfs3.ErrBadHandle
}

// applied1Ref resolves a provisional id whose making record was applied
// before (its reply lost, the batch sent again) and whose name a RENAME
// applied before too moved: the name is followed through those RENAMEs
// (nil: no such record, the name is gone, or a record applied before
// removed or replaced it). Only records before index
// before are looked at: a directory named by a provisional id is resolved
// by records before its maker's, so that a record naming its own id as its
// directory ends the search.
func (b *batch) applied1Ref(id uint64, before int) nfs3.FH {
	for j := range before {
		m := &b.recs[j]
		if m.LSN > b.maybe {
			return nil
		}
		switch m.Op {
		case snfs1.CMLCreate, snfs1.CMLMkdir, snfs1.CMLSymlink:
		default:
			continue
		}
		if m.New != id {
			continue
		}
		if fh, ok := b.recordedMade(m); ok {
			return fh
		}
		dir, name := m.Dir, m.Name
		same := func(d snfs1.ObjRef, n string) bool {
			return n == name && d.Prov == dir.Prov && string(d.FH) == string(dir.FH)
		}
		for k := j + 1; k < len(b.recs) && b.recs[k].LSN <= b.maybe; k++ {
			r := &b.recs[k]
			switch {
			case r.Op == snfs1.CMLRename && same(r.Dir, r.Name):
				dir, name = r.ToDir, r.ToName
			case r.Op == snfs1.CMLRename && same(r.ToDir, r.ToName),
				(r.Op == snfs1.CMLUnlink || r.Op == snfs1.CMLRmdir) && same(r.Dir, r.Name):
				// The object lost that name (replaced or removed): what
				// the name holds now is another object, a later record's
				// or someone else's.
				return nil
			}
		}
		dfh := dir.FH
		if dir.Prov != 0 {
			if dfh = b.prov[dir.Prov]; dfh == nil {
				dfh = b.applied1Ref(dir.Prov, j)
			}
		}
		if dfh == nil {
			return nil
		}
		r, err := b.s.resolve(b.c, dfh)
		if err != nil {
			return nil
		}
		defer r.release()
		return copyFH(b.s.handleIn(r, name))
	}
	return nil
}

// dir resolves a record's directory and checks the batch may change it.
func (b *batch) dir(o snfs1.ObjRef) (nfs3.FH, error) {
	fh, err := b.ref(o)
	if err != nil {
		return nil, err
	}
	if !b.permitted(fh) {
		return nil, snfs1.ErrNoPermit
	}
	return fh, nil
}

func (b *batch) permitted(fh nfs3.FH) bool {
	id := state.FileIDOf(fh)
	if b.made[id] {
		// Made by this batch; another client may have got its permit if
		// the maker got none (a bound).
		return !b.s.consist.PermitHeldByOther(b.mid, fh)
	}
	p, ok := b.permits[id]
	return ok && b.s.consist.HoldsPermit(b.mid, fh, p)
}

// accesses returns the regular files a record removes or truncates, for
// the plain-access rule (nil when its references do not resolve or the
// batch may not change them: apply then fails, and no other client is
// called back for a change that is refused).
func (b *batch) accesses(rec *snfs1.CMLRecord) []fileAccess {
	if !b.s.consist.Active() {
		return nil
	}
	switch rec.Op {
	case snfs1.CMLUnlink, snfs1.CMLRename:
		fh, r := b.dirReq(rec.Dir)
		if r == nil {
			return nil
		}
		defer r.release()
		if rec.Op == snfs1.CMLUnlink {
			return removeAccess(b.s, b.c, r, &nfs3.DirOpArgs{Dir: fh, Name: rec.Name})
		}
		to, err := b.dir(rec.ToDir)
		if err != nil {
			return nil
		}
		return renameAccess(b.s, b.c, r, &nfs3.RenameArgs{From: nfs3.DirOpArgs{Dir: fh, Name: rec.Name}, To: nfs3.DirOpArgs{Dir: to, Name: rec.ToName}})
	case snfs1.CMLSetattr:
		if a := rec.Attr; a.Size == nil && a.Mode == nil && a.UID == nil && a.GID == nil {
			return nil // as setattrAccess (coexist.go)
		}
		fh, err := b.ref(rec.Obj)
		if err != nil {
			return nil
		}
		r, err := b.s.resolveWrite(b.c, fh)
		if err != nil {
			return nil
		}
		defer r.release()
		if rec.Attr.Size == nil && !permChange(&rec.Attr, &r.node.Stat) {
			return nil
		}
		if !b.setattrPermitted(rec, fh, r) {
			return nil
		}
		return regularAccess(r, fh, state.AccessSetattr)
	case snfs1.CMLStore:
		return b.storeAccesses(rec) // reintegratestore.go
	}
	return nil
}

// apply applies one record through its NFSv3 procedure's handler.
func (b *batch) apply(rec *snfs1.CMLRecord, res *snfs1.CMLResult) error {
	s, ctx, c := b.s, b.ctx, b.c
	switch rec.Op {
	case snfs1.CMLCreate, snfs1.CMLMkdir, snfs1.CMLSymlink:
		dfh, err := b.dir(rec.Dir)
		if err != nil {
			return err
		}
		r, err := s.resolveWrite(c, dfh)
		if err != nil {
			return err
		}
		defer r.release()
		where := nfs3.DirOpArgs{Dir: dfh, Name: rec.Name}
		var cr nfs3.CreateRes
		switch rec.Op {
		case snfs1.CMLCreate:
			s.create(ctx, c, r, &nfs3.CreateArgs{Where: where, Mode: nfs3.Guarded, Attr: rec.Attr}, &cr)
		case snfs1.CMLMkdir:
			s.mkdir(ctx, c, r, &nfs3.MkdirArgs{Where: where, Attr: rec.Attr}, &cr)
		default:
			s.symlink(ctx, c, r, &nfs3.SymlinkArgs{Where: where, Attr: rec.Attr, Path: rec.Target}, &cr)
		}
		if cr.Status != nfs3.OK {
			return cr.Status
		}
		b.made1(rec, cr.Object, cr.Attr, res, true)
		if rec.Op == snfs1.CMLCreate && rec.Open {
			// Opened for the caller instead (run, once the record is
			// recorded: reintegrateopen.go).
			b.toOpen = &openWanted{lsn: rec.LSN, fh: copyFH(cr.Object)}
		} else if rec.Op == snfs1.CMLCreate {
			// The file's data is in the holder's cache until it learns
			// the real handle from this reply: the holder is on record
			// as a closed dirty cacher, so another client's OPEN calls
			// it back for its write-back first (section 21.3).
			s.consist.Created(b.mid, cr.Object, s.changeAttr(nil, cr.Object))
		}
		b.changed = append(b.changed, dfh, cr.Object)
		b.dirChanged(dfh)
		return nil
	case snfs1.CMLLink:
		ffh, err := b.ref(rec.Obj)
		if err != nil {
			return err
		}
		dfh, err := b.dir(rec.Dir)
		if err != nil {
			return err
		}
		r, err := s.resolveWrite(c, ffh)
		if err != nil {
			return err
		}
		defer r.release()
		var lr nfs3.LinkRes
		s.link(ctx, c, r, &nfs3.LinkArgs{File: ffh, Link: nfs3.DirOpArgs{Dir: dfh, Name: rec.Name}}, &lr)
		if lr.Status != nfs3.OK {
			return lr.Status
		}
		res.Attr = lr.Attr
		b.changed = append(b.changed, dfh, ffh)
		b.dirChanged(dfh)
		return nil
	case snfs1.CMLUnlink, snfs1.CMLRmdir:
		dfh, err := b.dir(rec.Dir)
		if err != nil {
			return err
		}
		r, err := s.resolveWrite(c, dfh)
		if err != nil {
			return err
		}
		defer r.release()
		a := &nfs3.DirOpArgs{Dir: dfh, Name: rec.Name}
		obj := s.handleIn(r, rec.Name) // promises listing it (a hard link's), or on it (a directory's)
		var wr nfs3.WccRes
		if rec.Op == snfs1.CMLUnlink {
			s.remove(ctx, c, r, a, &wr)
		} else {
			if err := checkRmdirName(a); err != nil {
				return err
			}
			s.rmdir(ctx, c, r, a, &wr)
		}
		if wr.Status != nfs3.OK {
			return wr.Status
		}
		b.changed = append(b.changed, dfh, obj)
		b.dirChanged(dfh)
		return nil
	case snfs1.CMLRename:
		from, err := b.dir(rec.Dir)
		if err != nil {
			return err
		}
		to, err := b.dir(rec.ToDir)
		if err != nil {
			return err
		}
		r, err := s.resolveWrite(c, from)
		if err != nil {
			return err
		}
		defer r.release()
		moved := s.handleIn(r, rec.Name)
		var replaced []byte
		if tr, err := s.resolve(c, to); err == nil {
			replaced = s.handleIn(tr, rec.ToName)
			tr.release()
		}
		var rr nfs3.RenameRes
		s.rename(ctx, c, r, &nfs3.RenameArgs{From: nfs3.DirOpArgs{Dir: from, Name: rec.Name}, To: nfs3.DirOpArgs{Dir: to, Name: rec.ToName}}, &rr)
		if rr.Status != nfs3.OK {
			return rr.Status
		}
		b.changed = append(b.changed, from, to, moved, replaced)
		b.dirChanged(from)
		b.dirChanged(to)
		return nil
	case snfs1.CMLSetattr:
		fh, err := b.ref(rec.Obj)
		if err != nil {
			return err
		}
		r, err := s.resolveWrite(c, fh)
		if err != nil {
			return err
		}
		defer r.release()
		// A directory's own attributes are part of its listing: its permit
		// is needed. Another object's change touches no directory's entries,
		// but the batch must hold some permit (or have made the object).
		if !b.setattrPermitted(rec, fh, r) {
			return snfs1.ErrNoPermit
		}
		var wr nfs3.WccRes
		s.setattr(ctx, c, r, &nfs3.SetattrArgs{Object: fh, New: rec.Attr}, &wr)
		if wr.Status != nfs3.OK {
			return wr.Status
		}
		res.Attr = wr.Wcc.After
		b.changed = append(b.changed, fh)
		return nil
	case snfs1.CMLStore:
		return b.applyStore(rec, res) // reintegratestore.go
	}
	return nfs3.ErrNotSupp
}

// made1 records what a CREATE, MKDIR or SYMLINK made: its provisional id's
// handle, the result, and for a directory the permit its maker now holds.
// fresh: the record was applied now, and the new directory gets a permit
// (nobody else can have a promise or a change of it yet); else (applied
// before) it is answered with the permit its client still holds, if any: a
// directory made before may be listed, promised and changed by others since,
// and granting it a permit here would skip the grant's promise breaks.
func (b *batch) made1(rec *snfs1.CMLRecord, obj nfs3.FH, attr *nfs3.Fattr, res *snfs1.CMLResult, fresh bool) {
	obj = copyFH(obj)
	res.Obj, res.Attr = obj, attr
	if obj != nil {
		b.madeNow[rec.LSN] = consist.Made{Prov: rec.New, FH: obj}
	}
	if rec.New != 0 && obj != nil {
		b.prov[rec.New] = obj
	}
	if rec.Op == snfs1.CMLMkdir && obj != nil {
		b.made[state.FileIDOf(obj)] = true
		if fresh {
			res.Permit = b.s.consist.GrantNewPermit(b.mid, obj)
		} else {
			res.Permit = b.s.consist.HeldPermit(b.mid, obj)
		}
		b.holdNew(obj, res.Permit)
	}
}

// again answers a record applied before (its LSN at or below the last
// applied): a record that made an object is answered with the object it
// made, so that the client learns the real handles of a batch whose first
// reply it never got: the handle recorded with the last applied LSN (none
// if that object is gone); only for records whose handles were not
// recorded (applied before a crash, found by the check), the object its
// name now names.
func (b *batch) again(rec *snfs1.CMLRecord, res *snfs1.CMLResult) {
	b.againMade(rec, res)
	if rec.Op == snfs1.CMLCreate {
		b.openAgain(rec, res) // reintegrateopen.go
	}
}

// againMade is again's answer of the object rec made.
func (b *batch) againMade(rec *snfs1.CMLRecord, res *snfs1.CMLResult) {
	switch rec.Op {
	case snfs1.CMLCreate, snfs1.CMLMkdir, snfs1.CMLSymlink:
	default:
		return
	}
	var obj nfs3.FH
	if fh, ok := b.recordedMade(rec); ok {
		if obj = fh; obj == nil {
			return
		}
	} else if rec.New != 0 {
		// Its object is followed through the batch's RENAMEs applied
		// before: its name may hold another object since (a CREATE a,
		// RENAME a->b, CREATE a batch), which the client would take
		// for this record's.
		if obj = b.applied1Ref(rec.New, len(b.recs)); obj == nil {
			return
		}
	} else {
		dfh, err := b.ref(rec.Dir)
		if err != nil {
			return
		}
		r, err := b.s.resolve(b.c, dfh)
		if err != nil {
			return
		}
		obj = b.s.handleIn(r, rec.Name)
		r.release()
		if obj == nil {
			return
		}
	}
	var attr *nfs3.Fattr
	if or, err := b.s.resolve(b.c, obj); err == nil {
		attr = or.attr()
		or.release()
	}
	b.made1(rec, obj, attr, res, false)
}
