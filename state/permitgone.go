package state

import "time"

// Removed applies the removal of the directory dir by client by (an RMDIR
// that succeeded: an NFSv3 call or a REINTEGRATE record). The permit on a
// directory that no longer exists is of no use and would otherwise be kept
// until its holder unregistered, counting against MaxPerClient
// (docs/protocol.md section 21.6, "A removed directory's permit"):
//
//   - by's own permit ends, as if released (by removed the directory
//     itself, so it knows); while a batch of by's is applied under it
//     (the REINTEGRATE that carries the RMDIR may carry records under the
//     removed directory's permit too, made before it) the end waits for
//     the batch's end, as any end does;
//   - a pending permit is cancelled (its GET_PERMIT is answered "not
//     granted");
//   - another client's permit is recalled, without waiting (the change is
//     made): its holder learns of the removal by the recall and forgets
//     the permit when it answers, or the permit is revoked at its deadline.
//
// A local process's removal is not reported here: the change notifier
// reports the directory itself (its DELETE_SELF), which Changed recalls
// like any other change by a local process.
func (p *Permits) Removed(now time.Time, by ClientID, dir FileID) []Action {
	if !p.some.Load() {
		return nil
	}
	p.mu.Lock()
	e := p.dirs[dir]
	if e == nil {
		p.mu.Unlock()
		return nil
	}
	var out []Action
	switch {
	case e.pending:
		p.n.cancels.Add(1)
		p.dropLocked(e, &out)
		p.mu.Unlock()
		return out
	case e.holder == by:
		p.endLocked(e, endReleased, &out)
		p.mu.Unlock()
		return out
	}
	p.mu.Unlock()
	_, out = p.Changed(now, 0, by, true, []FileID{dir})
	return out
}
