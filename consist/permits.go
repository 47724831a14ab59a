package consist

import (
	"time"

	"snfs/state"
)

// Write-back permits (docs/protocol.md section 21): the driver of
// state.Permits. GET_PERMIT records a pending permit, breaks every other
// client's directory promise on the directory (Dirs.Changed, waiting for the
// breaks to end) and then grants it; a change of the directory by anyone but
// the holder is held back (PermitGate) until the recall it sends has ended;
// a local process's change (Changed) recalls at once, without waiting.
// Recalls are CALLBACKs with CB_RECALL_PERMIT, sent like every callback
// (bounded senders, deadline from sending) and timed out by the sweeper.

// GetPermit asks for table client c's permit on the directory fh. done is
// called exactly once, at once or later from another goroutine: with the
// permit's id and granted true, or granted false (held by another client,
// a bound, c's callback path not verified, or a change of the directory
// while the grant broke promises); err is ErrGone when the driver stops.
func (d *Driver) GetPermit(c state.ClientID, fh []byte, done func(id uint64, granted bool, err error)) {
	if d.ctx.Err() != nil {
		done(0, false, ErrGone)
		return
	}
	if !d.m.PathVerified(c) {
		done(0, false, nil) // a recall would go to a path not known to work
		return
	}
	dir := state.FileIDOf(fh)
	if d.InPermitGrace() && d.permits.HeldID(c, dir) == 0 {
		done(0, false, nil) // the directory's permit may still be reclaimed (permitreclaim.go)
		return
	}
	now := d.now()
	id, fresh, ok := d.permits.Acquire(now, c, dir, fh)
	if !ok || !fresh {
		done(id, ok, nil)
		return
	}
	req := state.ReqID(d.reqs.Add(1))
	v, acts := d.dirs.Changed(now, req, c, true, []state.FileID{dir})
	finish := func(_ state.OpenReply, err error) {
		if err != nil {
			d.permits.Abort(d.now(), dir, id)
			done(0, false, err)
			return
		}
		if !d.permits.Granted(d.now(), dir, id) {
			done(0, false, nil)
			return
		}
		if err := d.notePermit(c); err != nil {
			// Not durable: after a restart the grace period would not wait
			// for this client's reclaim of it. Not granted.
			d.log.Error("write-back permit not granted", "client", d.clientName(c), "err", err)
			d.doPermits(d.permits.Release(d.now(), c, dir, id))
			done(0, false, nil)
			return
		}
		done(id, true, nil)
	}
	if v == state.Wait {
		d.park(req, finish)
		d.doDirs(acts)
		return
	}
	d.doDirs(acts)
	finish(state.OpenReply{}, nil)
}

// PermitRef names a permit: its directory's handle and its id.
type PermitRef struct {
	Dir []byte
	ID  uint64
}

// PermitRelease gives back table client c's permits refs: the changes
// waiting for their recalls go on.
func (d *Driver) PermitRelease(c state.ClientID, refs []PermitRef) {
	for _, r := range refs {
		if r.ID == 0 {
			continue // no permit is 0 (state.Permits.Release takes 0 as any)
		}
		d.doPermits(d.permits.Release(d.now(), c, state.FileIDOf(r.Dir), r.ID))
	}
}

// PermitsActive reports whether any permit exists: a change needs no more
// work than this check otherwise.
func (d *Driver) PermitsActive() bool { return d.permits.Active() }

// PermitGate holds back a change that table client c is about to make to
// the directories dirs: every other client's permit on them is recalled,
// and proceed is called once every recall has ended (answered, released,
// or revoked at its deadline): at once when there is none, else later from
// another goroutine (waited true). err is ErrGone when the driver stops.
func (d *Driver) PermitGate(c state.ClientID, dirs [][]byte, proceed func(waited bool, err error)) {
	if d.ctx.Err() != nil || !d.permits.Active() {
		proceed(false, nil)
		return
	}
	ids := make([]state.FileID, 0, len(dirs))
	for _, fh := range dirs {
		if fh != nil {
			ids = append(ids, state.FileIDOf(fh))
		}
	}
	req := state.ReqID(d.reqs.Add(1))
	v, acts := d.permits.Changed(d.now(), req, c, true, ids)
	if v == state.Wait {
		d.park(req, func(_ state.OpenReply, err error) { proceed(true, err) })
		d.doPermits(acts)
		return
	}
	d.doPermits(acts)
	proceed(false, nil)
}

// HoldsPermit reports whether table client c holds the permit id on the
// directory fh (a recalled one included: the holder reintegrates during
// its recall).
func (d *Driver) HoldsPermit(c state.ClientID, fh []byte, id uint64) bool {
	return d.permits.Holds(c, state.FileIDOf(fh), id)
}

// PermitHeldByOther reports whether a client other than c holds (or is
// being granted) the permit on the directory fh.
func (d *Driver) PermitHeldByOther(c state.ClientID, fh []byte) bool {
	return d.permits.HeldByOther(c, state.FileIDOf(fh))
}

// PermitHolder returns the client that holds, or is being granted, the
// permit on the directory fh (false: none).
func (d *Driver) PermitHolder(fh []byte) (state.ClientID, bool) {
	return d.permits.Holder(state.FileIDOf(fh))
}

// HoldsPermitID is HoldsPermit by the directory's FileID.
func (d *Driver) HoldsPermitID(c state.ClientID, dir state.FileID, id uint64) bool {
	return d.permits.Holds(c, dir, id)
}

// PermitBatch counts a REINTEGRATE of table client c under each permit of
// refs it holds as being applied: none of them ends (its recall answered,
// failed or past its deadline, or a release) before the returned end is
// called, when the batch has been applied; an end that came meanwhile is
// carried out then (docs/protocol.md section 21.4). end must be called
// exactly once.
func (d *Driver) PermitBatch(c state.ClientID, refs []PermitRef) (end func()) {
	var held []PermitRef
	for _, r := range refs {
		if r.ID != 0 && d.permits.BeginBatch(c, state.FileIDOf(r.Dir), r.ID) {
			held = append(held, r)
		}
	}
	return func() {
		for _, r := range held {
			d.doPermits(d.permits.EndBatch(time.Now(), c, state.FileIDOf(r.Dir), r.ID))
		}
	}
}

// HeldPermit returns the id of the permit table client c holds on the
// directory fh, 0 when it holds none.
func (d *Driver) HeldPermit(c state.ClientID, fh []byte) uint64 {
	return d.permits.HeldID(c, state.FileIDOf(fh))
}

// GrantNewPermit gives table client c a permit on the directory fh it has
// just made under its parent's permit; 0 when a bound is reached.
func (d *Driver) GrantNewPermit(c state.ClientID, fh []byte) uint64 {
	id := d.permits.GrantNew(d.now(), c, state.FileIDOf(fh), fh)
	if id == 0 {
		return 0
	}
	if err := d.notePermit(c); err != nil { // permitreclaim.go; set by c's first GET_PERMIT already
		d.log.Error("write-back permit on a new directory not granted", "client", d.clientName(c), "err", err)
		d.doPermits(d.permits.Release(d.now(), c, state.FileIDOf(fh), id))
		return 0
	}
	return id
}

// PermitStats returns the permit table's counters.
func (d *Driver) PermitStats() state.PermitStats { return d.permits.Stats() }

// localPermitChange recalls the permits on the directory fh (nil: every
// permit) that a local process changed: at once, nothing waits.
func (d *Driver) localPermitChange(fh []byte) {
	if !d.permits.Active() {
		return
	}
	if fh == nil {
		d.doPermits(d.permits.ChangedAll(d.now()))
		return
	}
	_, acts := d.permits.Changed(d.now(), 0, 0, false, []state.FileID{state.FileIDOf(fh)})
	if len(acts) > 0 && d.tracing() {
		d.trace("permits: recalled for a local process's change", fh)
	}
	d.doPermits(acts)
}

// doPermits carries out the permit table's actions: recalls, revocations,
// and answers to parked changes.
func (d *Driver) doPermits(acts []state.Action) {
	for _, a := range acts {
		switch a.Kind {
		case state.ActCallback:
			cb := a.Callback
			d.sendCallbackTo(cb, func(now time.Time) { d.permits.CallbackSent(now, cb) },
				func(now time.Time, o state.Outcome) {
					if o == state.Failed {
						d.log.Info("write-back permit revoked: its recall failed", "client", d.clientName(cb.Client))
						d.do(d.m.PathFailed(now, cb.Client))
					}
					d.doPermits(d.permits.CallbackDone(now, cb, o))
				})
		case state.ActFence:
			d.log.Info("write-back permit revoked: its recall was not answered in time", "client", d.clientName(a.Client))
			d.do(d.m.PathFailed(d.now(), a.Client))
		case state.ActProceed:
			d.answer(a.Req, state.OpenReply{}, nil)
		}
	}
}

// Created records table client c as the caching holder of the file fh that
// its REINTEGRATE just created (a CML_CREATE applied, not answered again:
// docs/protocol.md section 21.3, "The created file's holder"), as if c had
// OPENed it for writing with caching and CLOSEd it dirty: the file's data
// is still in c's cache, to be written back once c learns the real handle,
// so another client's OPEN must call c back for its write-back first
// (Table 1, CLOSED_DIRTY). The same OPEN and CLOSE the procedures apply:
// for a new file nobody else holds, the OPEN is answered at once (parked
// only for a version reservation), and the CLOSE follows its answer. An
// OPEN refused (grace, a full table) records nothing: the holder's later
// write-back is then a plain access, as a non-caching writer's.
func (d *Driver) Created(c state.ClientID, fh []byte, change uint64) {
	fh = append([]byte(nil), fh...)
	d.Open(c, fh, state.Write, change, func(r state.OpenReply, err error) {
		if err != nil {
			return
		}
		if err := d.Close(c, fh, state.Write, r.CacheEnabled); err != nil {
			d.log.Debug("consist: the created file's close", "err", err)
		}
	})
}

// HoldsWriteOpen reports whether the table counts an OPEN_WRITE of fh by
// client c: a resent REINTEGRATE asks it of the open its first application
// granted (server/reintegrateopen.go), which a callback the client answered
// CB_STALE (it did not know the handle yet) has since given back.
func (d *Driver) HoldsWriteOpen(c state.ClientID, fh []byte) bool {
	fi, ok := d.m.Lookup(d.now(), state.FileIDOf(fh))
	if !ok {
		return false
	}
	for _, h := range fi.Holders {
		if h.Client == c && h.Writers > 0 && !h.Fenced {
			return true
		}
	}
	return false
}
