package cachemgr

import (
	"time"

	"snfs/nfs3"
	"snfs/snfs1"
)

// The files made locally whose CREATE the server applied and whose data
// is not written to them yet (permitdata.go's push pending: it failed, or
// the server restarted before it) are this client's dirty data of those
// files as much as a cached file's unsent bytes are. The CREATE recorded
// this client as the file's closed dirty holder (docs/protocol.md 21.3,
// "The created file's holder"), so that another client's OPEN called it
// back for the push first; a server restart forgets that record, and only
// a reclaim brings it back (section 7). Without it, another client opened
// and rewrote the file after the restart, and the push retried later wrote
// the older local data over that acknowledged rewrite (the crash cycles'
// stale reads with the permits on).

// reclaimPushes returns a reclaim item, dirty and closed, for each file
// made locally whose real handle the log knows and whose data is still
// local, and that have (the inodes' items) does not name already. It runs
// in the session's connect hook: it takes p.off.mu and the log's lock,
// never od.mu (a push holds it across its calls to the server).
func (p *permits) reclaimPushes(have []snfs1.ReclaimItem) []snfs1.ReclaimItem {
	if p.log == nil {
		return nil
	}
	p.off.mu.Lock()
	ids := make([]uint64, 0, len(p.off.data))
	for id := range p.off.data {
		ids = append(ids, id)
	}
	p.off.mu.Unlock()
	named := make(map[string]bool, len(have))
	for _, it := range have {
		named[string(it.File)] = true
	}
	var out []snfs1.ReclaimItem
	for _, id := range ids {
		fh, ok := p.log.Handle(id)
		if !ok || named[string(fh)] {
			continue
		}
		named[string(fh)] = true
		p.sn.FS.Logger().Debug("reclaim item: a file made locally, its data not written yet", "prov", id)
		out = append(out, snfs1.ReclaimItem{File: fh, Dirty: true})
	}
	return out
}

// Write-back permits across a server restart (docs/protocol.md section
// 21.9; docs/mount.md "A server restart"). The permits die with the
// server, and the records logged under them may not be in yet: names this
// mount's applications were told exist (or are gone) that nobody else
// sees on the server. In the reclaim (the session's connect hook, after
// the RECLAIMs, before RECLAIM_DONE) the permits held of the directories
// the log changes are reclaimed (RECLAIM_PERMIT): granted again, with new
// ids, and nobody else read or changed those directories since the
// restart (the server's grace period held them). They are held at once,
// so that a recall that comes as soon as the grace period ends finds them
// and sends the log first. The names the log changes in them are still
// compared with their bases before the log goes (permitlost.go, as for
// any permit lost): a process on the server machine may have changed the
// directory while the server was down (docs/protocol.md section 7.3), or a
// recall may have revoked the permit just before the crash without this
// mount hearing of it; under the reclaimed permit the comparison cannot be
// overtaken by another client. A directory whose permit is not granted
// again is asked later like any permit lost.

// reclaimPermits reclaims, through reclaim, the permits held of the
// directories the log changes, and holds those granted again in place of
// every permit of the earlier start (verf: the new server's verifier,
// which serverRestarted checks). Its work is p.mu's and the log's only: it
// runs in the connect hook, where no call of the session may be made.
func (p *permits) reclaimPermits(verf snfs1.Verifier, reclaim func(dirs []nfs3.FH) ([]uint64, error)) error {
	logDirs := p.log.Dirs()
	logged := make(map[string]bool, len(logDirs))
	for _, d := range logDirs {
		logged[string(d)] = true
	}
	cutFor := p.sn.sess.CallbackTimeout()
	p.mu.Lock()
	var dirs []nfs3.FH
	for k, h := range p.held {
		if logged[k] && !isProvFH(h.ref.Dir) {
			dirs = append(dirs, h.ref.Dir)
		}
	}
	for k, at := range p.cut {
		if _, held := p.held[k]; !held && logged[k] && time.Since(at) < cutFor {
			dirs = append(dirs, nfs3.FH(k))
		}
	}
	p.mu.Unlock()
	got := map[string]uint64{}
	for i := 0; i < len(dirs); i += snfs1.ReclaimPermitMax {
		part := dirs[i:min(i+snfs1.ReclaimPermitMax, len(dirs))]
		ids, err := reclaim(part)
		if err != nil {
			return err // the reclaim is due again: p.held is as it was
		}
		for j, id := range ids {
			if id != 0 {
				got[string(part[j])] = id
			}
		}
	}
	now := time.Now()
	p.mu.Lock()
	clear(p.held) // the earlier start's
	p.starts++    // a reintegration or GET_PERMIT across the restart takes in no permit of it
	for k, id := range got {
		p.held[k] = heldPermit{ref: snfs1.PermitRef{Dir: nfs3.FH(k), Permit: id}, since: now}
	}
	p.reclaimedVerf, p.reclaimedSet = verf, true
	clear(p.cut)
	p.mu.Unlock()
	// The names are compared before anything is sent, a recall's
	// reintegration included, which may come before serverRestarted runs.
	p.markLost(logDirs...)
	p.sn.FS.Logger().Info("write-back permits reclaimed after a server restart", "asked", len(dirs), "granted", len(got))
	return nil
}

// noteCut: the recall of dir could not be answered, its log not in, because
// its connection went (the callback's context ended: the server was killed,
// or the connection broke). If the server died, nobody saw the directory
// without this mount's changes, and the restarted server may grant the
// permit again: reclaimPermits asks for it, if the restart comes within
// the callback timeout of the cut. A server that lived revoked the permit
// (its recall failed, or at the recall's deadline), so a later restart
// would find it ended on the server, and maybe granted to another client
// since: not reclaimed then; nor once the permit is known to have ended
// (drop, markLost forget the cut). The window between (the connection broke, the
// server revoked, then died within the callback timeout) is a known limit:
// the names are compared before the log goes all the same
// (permitlost.go), so the mount's own records never act on another
// client's objects.
func (p *permits) noteCut(dir nfs3.FH) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut == nil {
		p.cut = map[string]time.Time{}
	}
	p.cut[string(dir)] = time.Now()
}
