package state

import "time"

// Reclaim gives client c again the permit on the directory dir (handle)
// that c reports having held before the server restarted (RECLAIM_PERMIT,
// in the grace period: docs/protocol.md section 21.9). The report is
// trusted, as RECLAIM's are: nothing is broken (no promise survived the
// restart, and nobody else may read or change the directory before the
// client's reclaim: the driver's grace gate), no bound is checked (the
// client held the permit within them). It returns the permit's id, a new
// one (ids of different starts differ: PermitConfig.IDBase), or c's own if
// it holds the permit already (a reclaim sent again after a broken
// connection); 0 when another client holds it or c's own is pending.
func (p *Permits) Reclaim(now time.Time, c ClientID, dir FileID, handle []byte) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.dirs[dir]; e != nil {
		if e.holder == c && !e.pending {
			return e.id
		}
		return 0
	}
	p.n.grants.Add(1)
	return p.addLocked(c, dir, handle).id
}
