package cachemgr

import (
	"fmt"
	"sort"
	"time"

	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
)

// Giving permits back before unmount (docs/mount.md "Permits given back"):
// the server bounds the permits of one client (1,024: docs/protocol.md
// section 21.6), and a long-lived mount that kept every permit it was
// given - one per directory it changed, one per directory it made - would
// reach the bound, after which its changes of new directories all go
// through the server. So the loop gives back (PERMIT_RELEASE):
//
//   - a permit no local change asked for in permitIdle, with nothing of its
//     directory in the log: a directory in use keeps its permit (each local
//     change marks it used, get), so a create loop never pays a
//     GET_PERMIT/PERMIT_RELEASE pair; idle for minutes, the permit costs one
//     GET_PERMIT to ask again, against the minutes of changes it saved;
//   - above permitHighWater permits held, the least recently used of those
//     unused for permitBusy and with nothing logged, down to permitLowWater:
//     a mount changing many directories at once keeps room under the bound;
//   - the permit of a directory removed locally once the log is empty (its
//     RMDIR is on the server, which ended the permit then: the release is
//     answered as for a permit not held, and the mount forgets it).
//
// A permit with records of its directory in the log is never given back:
// they are sent under it. The gate's write hold (as a recall's) keeps local
// changes out while the release is chosen and sent: none is logged under a
// permit being given back, and none takes it as held after.
const (
	permitIdle      = 2 * time.Minute
	permitBusy      = 10 * time.Second
	permitHighWater = 512
	permitLowWater  = 384
	// permitReleaseWait bounds a PERMIT_RELEASE of idle permits.
	permitReleaseWait = 5 * time.Second
)

// removedDir notes that the directory fh was removed locally (its RMDIR
// logged): its permit is given back once the log is empty.
func (p *permits) removedDir(fh nfs3.FH) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.held[string(fh)]; !ok {
		return
	}
	if p.gone == nil {
		p.gone = map[string]struct{}{}
	}
	p.gone[string(fh)] = struct{}{}
}

// releaseIdle gives back the permits the policy above names, as of now
// (the loop's tick; tests pass a later time instead of waiting). It
// returns how many it gave back.
func (p *permits) releaseIdle(now time.Time) int {
	if !p.mayRelease(now) {
		return 0
	}
	p.gate.mu.Lock()
	defer p.gate.mu.Unlock()
	logged, setattr := p.loggedDirs()
	if setattr {
		// A logged SETATTR of a file is sent under any permit the batch
		// names: none is given back until it is sent.
		return 0
	}
	empty := p.log.Len() == 0
	p.mu.Lock()
	var out []snfs1.PermitRef
	var lru []heldPermit
	for k, h := range p.held {
		if logged[k] || p.gate.recallingLocked(h.ref.Dir) {
			continue
		}
		used := h.used
		if used.IsZero() {
			used = h.since
		}
		_, gone := p.gone[k]
		switch {
		case gone && empty, now.Sub(used) >= permitIdle:
			out = append(out, h.ref)
		case now.Sub(used) >= permitBusy:
			h.used = used
			lru = append(lru, h)
		}
	}
	if over := len(p.held) - len(out) - permitLowWater; len(p.held)-len(out) > permitHighWater && over > 0 {
		sort.Slice(lru, func(i, j int) bool { return lru[i].used.Before(lru[j].used) })
		for _, h := range lru[:min(over, len(lru))] {
			out = append(out, h.ref)
		}
	}
	for k := range p.gone {
		if _, ok := p.held[k]; !ok {
			delete(p.gone, k) // recalled or lost to a restart meanwhile
		}
	}
	p.mu.Unlock()
	if len(out) == 0 {
		return 0
	}
	// Local changes wait for the release (the gate): it is bounded well
	// below the loop's minute; a server that does not answer in it has
	// local changes refused anyway (their lease lapses).
	dirs := make([]nfs3.FH, len(out))
	for i, r := range out {
		dirs[i] = r.Dir
	}
	p.sn.names.takeBack(dirs...) // before the server lets others change them (permitnames.go)
	ctx, cancel := p.sn.stopCtx(permitReleaseWait)
	defer cancel()
	for rest := out; len(rest) > 0; {
		n := min(len(rest), snfs1.PermitReleaseMax)
		if err := p.sn.sess.PermitRelease(ctx, rest[:n]); err != nil {
			// Forgotten anyway: kept, a permit the server may have ended
			// would have changes made locally under it refused; forgotten, a
			// permit the server still holds is only held there until
			// recalled, asked again (the same id) or this mount goes.
			p.sn.FS.Logger().Debug("PERMIT_RELEASE of idle permits", "err", err)
		}
		rest = rest[n:]
	}
	p.mu.Lock()
	for _, r := range out {
		if h, ok := p.held[string(r.Dir)]; ok && h.ref.Permit == r.Permit {
			delete(p.held, string(r.Dir))
		}
		delete(p.gone, string(r.Dir))
	}
	p.mu.Unlock()
	p.sn.FS.Logger().Debug("permits given back", "count", len(out))
	return len(out)
}

// mayRelease is releaseIdle's quick test, without the gate and the log's
// scan (the loop asks every tick): a permit idle, one of a removed
// directory, or more than permitHighWater held.
func (p *permits) mayRelease(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.gone) > 0 || len(p.held) > permitHighWater {
		return true
	}
	for _, h := range p.held {
		used := h.used
		if used.IsZero() {
			used = h.since
		}
		if now.Sub(used) >= permitIdle {
			return true
		}
	}
	return false
}

// loggedDirs returns the handles the log's records are sent under a
// permit of: the directories whose entries they change and the objects of
// their SETATTRs (a directory's own needs its permit; a file's handle names
// no permit); setattr reports whether any SETATTR is logged.
func (p *permits) loggedDirs() (dirs map[string]bool, setattr bool) {
	dirs = map[string]bool{}
	for _, r := range p.log.Records() {
		if r.Op == snfs1.CMLSetattr {
			setattr = true
			dirs[string(r.Obj.FH)] = true
			continue
		}
		for _, fh := range recordDirs(&r) {
			dirs[string(fh)] = true
		}
	}
	return dirs, setattr
}

// logHolds reports whether the log holds a record sent under dir's permit.
func (p *permits) logHolds(dir nfs3.FH) bool {
	dirs, _ := p.loggedDirs()
	return dirs[string(dir)]
}

// recallFailed answers the recall of dir's permit whose reintegration
// failed (err) with records of dir still in the log: FAILED, not OK - the
// server then revokes the permit (docs/protocol.md section 21.4) instead of
// taking the holder's changes as in, and the changes it held back go on.
// The records stay in the log; sent later under no permit they are refused
// SNFS_ERR_NOPERMIT and kept as conflicts (docs/mount.md "Conflicts"),
// as those of any permit revoked.
func (p *permits) recallFailed(dir nfs3.FH, err error) state.Outcome {
	p.sn.FS.Logger().Warn("a permit's recall answered FAILED: its directory's changes could not be sent",
		"dir", p.sn.FS.PathOfFH(dir, nil), "err", fmt.Errorf("reintegration: %w", err))
	return state.Failed
}
