package consist

import (
	"time"

	"snfs/state"
)

// Directory promises (docs/protocol.md section 20): the driver of
// state.Dirs. A LISTDIR records its client's promise before the directory
// is read (BeginList) and says what it covers after (EndList); a change made
// through the server breaks every other client's promise it touches and its
// reply waits for the breaks (DirChanged); a local process's change, seen by
// the change notifier (Changed), breaks them at once. Breaks are CALLBACK
// INVALIDATEs with the directory's handle, sent like the file table's
// callbacks (bounded senders, deadline from sending, applied by the
// connection's reader) and timed out by the sweeper.

// BeginList records table client c's promise on the directory fh before
// the directory is read. ok false: no promise (bounds, or a break still out);
// the listing is answered without one; also while c's callback path has not
// answered a probe. EndList must follow with tok.
func (d *Driver) BeginList(c state.ClientID, fh []byte) (tok uint64, ok bool) {
	if d.ctx.Err() != nil || !d.m.PathVerified(c) {
		return 0, false // a break would wait for a path not known to work
	}
	dir := state.FileIDOf(fh)
	tok, ok = d.dirs.BeginList(d.now(), c, dir, fh)
	// Checked after the promise is recorded: a permit granted since broke
	// it (GetPermit's breaks), one granted before is seen here.
	if ok && d.permits.HeldByOther(c, dir) {
		d.doDirs(d.dirs.FailList(d.now(), tok))
		return 0, false // another client's permit: its changes are not the server's yet
	}
	return tok, ok
}

// EndList ends the listing tok: listed are the handles it returned, whose
// attributes the promise covers. It reports whether the client holds the
// promise.
func (d *Driver) EndList(tok uint64, listed [][]byte) bool {
	if tok == 0 {
		return false
	}
	ids := make([]state.FileID, len(listed))
	for i, fh := range listed {
		ids[i] = state.FileIDOf(fh)
	}
	ok, acts := d.dirs.EndList(d.now(), tok, ids)
	d.doDirs(acts)
	return ok
}

// FailList ends the listing tok whose read failed: a promise it made is
// taken back (the client, answered an error, never learns of it).
func (d *Driver) FailList(tok uint64) {
	if tok == 0 {
		return
	}
	d.doDirs(d.dirs.FailList(d.now(), tok))
}

// DirsActive reports whether any directory promise or listing exists: a
// change needs no more work than this check otherwise.
func (d *Driver) DirsActive() bool { return d.dirs.Active() }

// DirChanged applies a change that table client c made through the server
// to the objects changed names (directories whose entries changed, objects
// whose attributes changed): every other client's promise on them is broken.
// done is called exactly once, when the breaks have ended (answered, failed
// or past their deadline): at once when there are none, else later from
// another goroutine (the caller defers its reply meanwhile).
func (d *Driver) DirChanged(c state.ClientID, changed [][]byte, done func()) {
	if d.ctx.Err() != nil || len(changed) == 0 {
		done()
		return
	}
	ids := make([]state.FileID, 0, len(changed))
	for _, fh := range changed {
		if fh != nil {
			ids = append(ids, state.FileIDOf(fh))
		}
	}
	req := state.ReqID(d.reqs.Add(1))
	v, acts := d.dirs.Changed(d.now(), req, c, true, ids)
	if v == state.Wait {
		d.park(req, func(state.OpenReply, error) { done() })
		d.doDirs(acts)
		return
	}
	d.doDirs(acts)
	done()
}

// DirRelease gives back table client c's promises on the directories fhs.
func (d *Driver) DirRelease(c state.ClientID, fhs [][]byte) {
	for _, fh := range fhs {
		d.dirs.Release(d.now(), c, state.FileIDOf(fh))
	}
}

// HoldsDir reports whether table client c holds an unbroken promise on the
// directory fh (for tests).
func (d *Driver) HoldsDir(c state.ClientID, fh []byte) bool {
	return d.dirs.Holds(c, state.FileIDOf(fh))
}

// DirStats returns the directory table's counters.
func (d *Driver) DirStats() state.DirStats { return d.dirs.Stats() }

// localDirChange applies a local process's change to the object fh names
// (nil: anything may have changed): the promises it touches are broken at
// once; nothing waits (the change was not made through the server).
func (d *Driver) localDirChange(fh []byte) {
	if fh == nil {
		d.doDirs(d.dirs.ChangedAll(d.now()))
		return
	}
	_, acts := d.dirs.Changed(d.now(), 0, 0, false, []state.FileID{state.FileIDOf(fh)})
	if len(acts) > 0 && d.tracing() {
		d.trace("dirs: changed by a local process", fh, "breaks", len(acts))
	}
	d.doDirs(acts)
}

// doDirs carries out the directory table's actions: breaks and answers to
// parked changes.
func (d *Driver) doDirs(acts []state.Action) {
	for _, a := range acts {
		switch a.Kind {
		case state.ActCallback:
			cb := a.Callback
			d.sendCallbackTo(cb, func(now time.Time) { d.dirs.CallbackSent(now, cb) },
				func(now time.Time, o state.Outcome) {
					if o == state.Failed {
						d.do(d.m.PathFailed(now, cb.Client))
					}
					d.doDirs(d.dirs.CallbackDone(now, cb, o))
				})
		case state.ActFence:
			// No file is fenced; the client's lease has lapsed, and its
			// callback path is probed again before anything more is granted.
			d.log.Info("directory promise break not answered in time", "client", d.clientName(a.Client))
			d.do(d.m.PathFailed(d.now(), a.Client))
		case state.ActProceed:
			d.answer(a.Req, state.OpenReply{}, nil)
		}
	}
}

// Done is closed when the driver stops: whoever waits for a change's breaks
// on a goroutine of the driver's stops waiting then.
func (d *Driver) Done() <-chan struct{} { return d.ctx.Done() }
