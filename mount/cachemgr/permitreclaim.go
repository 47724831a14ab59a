package cachemgr

import (
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
