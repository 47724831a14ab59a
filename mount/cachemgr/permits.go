package cachemgr

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"snfs/mount/cml"
	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
)

// Write-back permits and the client modification log, the mount's side
// (docs/protocol.md section 21; docs/mount.md "The client modification
// log"), with `--permits=on`: the log lives in CACHEDIR/cml (package cml);
// the permits the mount holds are kept here, with the directories whose
// GET_PERMIT was refused lately (not asked again for a while: a busy shared
// directory would otherwise cost a refused call per change). The log is
// reintegrated when it is old or long enough (the loop), at a directory's
// fsync and at unmount (flush), and at once when a permit is recalled,
// before CB_OK (recall). A mount restarted with records left in its log
// (killed) asks the permits of the log's directories and reintegrates
// before it serves (start). A record the server refuses is kept as a
// conflict (the conflicts file) and skipped.

// Reintegration policy (docs/mount.md): the log goes to the server once its
// oldest record is this old, or it is this long.
const (
	permitLogAge   = 5 * time.Second
	permitLogLen   = 1000
	permitRefusal  = 10 * time.Second // a refused GET_PERMIT is not asked again before
	permitLoopTick = time.Second
)

// heldPermit is one permit the mount holds.
type heldPermit struct {
	ref   snfs1.PermitRef
	since time.Time
	used  time.Time // the last local change asked for it (get); zero: since
}

// permits is the mount's permit table and log; nil without --permits=on.
type permits struct {
	sn  *snfsFS
	log *cml.Log
	// basesDirty: the bases file (offlinebase.go) was written since it was
	// last flushed (syncLog flushes it with the log).
	basesDirty atomic.Bool

	mu      sync.Mutex
	held    map[string]heldPermit // by directory handle
	refused map[string]time.Time  // by directory handle: when refused
	// asking counts the GET_PERMITs out, by directory handle; asked is
	// closed and made again (under mu) each time one's answer is taken in:
	// a recall of a directory waits for them (recall), since the permit it
	// names may be in an answer not taken in yet.
	asking map[string]int
	asked  chan struct{}
	// lost: by handle, the directories whose permits the log's records
	// were made under were lost (to a restart: this mount's, the log left
	// by a killed one, or the server's; or revoked: a record refused
	// SNFS_ERR_NOPERMIT): their permits are asked again and the names the
	// log changes in them checked before anything more is sent
	// (permitlost.go). lostRefused: when that asking was last refused.
	lost        map[string]nfs3.FH
	lostRefused time.Time
	// goneDirs: directories found removed on the server while their
	// permits were asked again: their records are refused, conflicts.
	goneDirs map[string]bool
	// pushFailed: when a retry of the pushes left failed (retryPushes).
	pushFailed time.Time
	// starts counts the server restarts seen (serverRestarted): a
	// reintegration takes in the permits its replies granted only if none
	// came since it began (they would be an earlier start's, gone).
	starts uint64
	// reclaimedVerf: the server verifier of the start whose permits
	// reclaimPermits installed in held (reclaimedSet): serverRestarted,
	// which follows that reclaim, keeps them (permitreclaim.go).
	reclaimedVerf snfs1.Verifier
	reclaimedSet  bool
	// cut: by handle, the permits whose recall's connection went before
	// the log was in (noteCut): reclaimed too if the server restarted
	// soon after (permitreclaim.go).
	cut map[string]time.Time

	// gate holds recalls off while a local change is made (permitlocal.go).
	gate changeGate
	// made: the objects made locally (permitmake.go).
	made provTable
	// opens: the provisional opens whose CREATE is sent as
	// CML_CREATE_OPEN (permitopen.go).
	opens reintOpens
	// links: the objects whose link count changed locally (permittimes.go).
	links localLinks
	// gone: the directories removed locally whose permits are held
	// (permitrelease.go); guarded by mu.
	gone map[string]struct{}

	// reint: one reintegration of the whole log at a time (cml.Reintegrate
	// serialises too; this also orders the conflict handling after it).
	reint sync.Mutex
	// rbs: the stored files whose opens the reintegration in progress
	// asked (permitreadback.go). Guarded by reint.
	rbs map[*offData]*readback

	// age and length: the log is reintegrated once its oldest record is
	// age old or it holds length records (permitLogAge, permitLogLen).
	age    time.Duration
	length int

	// online: changes are made locally under permits while connected
	// (--permits=on); without it the log holds only what was made while
	// disconnected (offline.go).
	online bool
	// off: what was made offline (offline.go, offlinereint.go).
	off offLog

	stop chan struct{}
	done chan struct{}
}

// openPermits opens the log in dir/cml and, with records left in it by an
// earlier instance, gets their directories' permits and reintegrates them
// before the mount serves anything (docs/mount.md "What the mount does with
// it": register with the same name, ask for Dirs(), reintegrate).
func (sn *snfsFS) openPermits(ctx context.Context) (*permits, error) {
	if sn.cfg.CacheDir == "" {
		return nil, errors.New("cachemgr: write-back permits need a cache directory")
	}
	l, err := cml.Open(filepath.Join(sn.cfg.CacheDir, "cml"), cml.Options{Logger: sn.FS.Logger()})
	if err != nil {
		return nil, fmt.Errorf("the modification log: %w", err)
	}
	p := &permits{sn: sn, log: l, held: map[string]heldPermit{}, refused: map[string]time.Time{},
		age: permitLogAge, length: permitLogLen, stop: make(chan struct{}), done: make(chan struct{}), online: sn.cfg.Permits}
	p.loadOffData()
	if l.Len() > 0 {
		p.loadBases()
	} else {
		// Left by a mount killed after its whole log was on the server
		// and before offDone: what the check found is of records all in
		// now, and would refuse a later log's records over the same names.
		p.off.mu.Lock()
		p.dropBases()
		p.off.mu.Unlock()
	}
	return p, nil
}

// permitsNow is sn.permits for the callback goroutines, which may run
// while Start publishes it.
func (sn *snfsFS) permitsNow() *permits {
	sn.permitsMu.Lock()
	defer sn.permitsMu.Unlock()
	return sn.permits
}

// begin publishes p as its mount's, then sends the log an earlier mount
// left (a recall during that send finds p) and starts the log's loop.
func (p *permits) begin(ctx context.Context) {
	sn, l := p.sn, p.log
	sn.permitsMu.Lock()
	sn.permits = p
	sn.permitsMu.Unlock()
	if n := l.Len(); n > 0 {
		// Left by a mount killed, maybe offline: sent only under the
		// permits of its directories, its names' data pushed after it
		// (offlinereint.go).
		p.off.pending = sn.cfg.disc != nil
		sn.FS.Logger().Info("reintegrating the modification log an earlier mount left", "records", n)
		// Its permits are gone (a new registration holds none), maybe
		// revoked first: asked again, and the names checked (permitlost.go).
		p.markLost(l.Dirs()...)
		if err := p.reintegrate(ctx, "restart"); err != nil {
			// What could not be sent stays in the log: the loop tries again.
			sn.FS.Logger().Error("reintegration of an earlier mount's modification log", "err", err)
		}
	} else {
		p.pushLeft(ctx) // permitdurable.go
	}
	SetStatusSources(sn.FS, StatusSources{Permits: p.list, ModLog: l.Stats})
	go p.loop()
}

// get returns the permit of dir, asking GET_PERMIT unless held, or refused
// less than permitRefusal ago (force: ask anyway).
func (p *permits) get(ctx context.Context, dir nfs3.FH, force bool) (snfs1.PermitRef, bool) {
	if isProvFH(dir) {
		return snfs1.PermitRef{}, false // a provisional handle is never sent
	}
	k := string(dir)
	p.mu.Lock()
	if h, ok := p.held[k]; ok {
		h.used = time.Now() // not idle: not given back (permitrelease.go)
		p.held[k] = h
		p.mu.Unlock()
		return h.ref, true
	}
	if at, ok := p.refused[k]; ok && !force && time.Since(at) < permitRefusal {
		p.mu.Unlock()
		return snfs1.PermitRef{}, false
	}
	starts := p.starts
	p.askingLocked(k, 1)
	p.mu.Unlock()
	id, granted, err := p.sn.sess.GetPermit(ctx, dir)
	p.mu.Lock()
	if err == nil && granted && p.starts != starts {
		// Granted by the server before a restart this mount has seen
		// since (serverRestarted forgot every permit): gone there.
		p.askingLocked(k, -1) // the answer taken in (held or not)
		p.mu.Unlock()
		return snfs1.PermitRef{}, false
	}
	if err != nil || !granted {
		if err != nil {
			p.sn.FS.Logger().Debug("GET_PERMIT", "dir", dir, "err", err)
		}
		p.refused[k] = time.Now()
		p.askingLocked(k, -1) // the answer taken in (held or not)
		p.mu.Unlock()
		return snfs1.PermitRef{}, false
	}
	delete(p.refused, k)
	ref := snfs1.PermitRef{Dir: append(nfs3.FH(nil), dir...), Permit: id}
	p.held[k] = heldPermit{ref: ref, since: time.Now()}
	p.sn.names.keep(ref.Dir) // permitnames.go: with held, so that no drop comes between
	p.askingLocked(k, -1)    // the answer taken in (held or not)
	p.mu.Unlock()
	return ref, true
}

// refs are the permits held, for a REINTEGRATE.
func (p *permits) refs() []snfs1.PermitRef {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]snfs1.PermitRef, 0, len(p.held))
	for _, h := range p.held {
		out = append(out, h.ref)
	}
	return out
}

// refsChecked are refs but those of directories still marked lost: their
// names are not checked yet (lostPrepare left them, another's permit
// refused), though a local change may have asked the permit again since;
// their records are refused SNFS_ERR_NOPERMIT, applied by nothing.
func (p *permits) refsChecked() []snfs1.PermitRef {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]snfs1.PermitRef, 0, len(p.held))
	for k, h := range p.held {
		if _, lost := p.lost[k]; !lost {
			out = append(out, h.ref)
		}
	}
	return out
}

// list is what `snfs status` shows of the permits held.
func (p *permits) list() []PermitHeld {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]PermitHeld, 0, len(p.held))
	for _, h := range p.held {
		out = append(out, PermitHeld{Dir: p.sn.FS.PathOfFH(h.ref.Dir, nil), DirFH: hex.EncodeToString(h.ref.Dir), Permit: h.ref.Permit, Since: h.since})
	}
	return out
}

// reintegrateMaxRounds bounds how many refused records one reintegration
// keeps as conflicts and skips before it gives up for now.
const reintegrateMaxRounds = 4096

// reintegrateJukeboxTries bounds how often one reintegration sends its log
// again after a record answered NFS3ERR_JUKEBOX, pausing
// reintegrateJukeboxPause, doubled each time up to a second, before each;
// past it the records stay in the log for the next reintegration.
const (
	reintegrateJukeboxTries = 6
	reintegrateJukeboxPause = 100 * time.Millisecond
)

// reintegrate sends the whole log (cml.Log.Reintegrate) under the permits
// held, then takes in what it returned: the permits of directories made in
// it, the real handles of the objects made (forgotten once taken: no
// provisional inode waits for them). A refused record becomes a conflict
// (kept in the conflicts file) and is skipped, except SNFS_ERR_NOPERMIT:
// its directories' permits were lost, and are asked again, the names the
// log changes in them checked (permitlost.go); only the records of names
// someone else changed meanwhile become conflicts.
func (p *permits) reintegrate(ctx context.Context, why string) error {
	return p.reintegrateKeep(ctx, why, false)
}

// reintegrateKeep is reintegrate; keep: the small files whose data it
// stores are opened by it and their data kept cached (permitreadback.go).
func (p *permits) reintegrateKeep(ctx context.Context, why string, keep bool) error {
	if p.sn.disc.offline() {
		return ErrDisconnected
	}
	p.reint.Lock()
	var rbs []*readback
	err := p.reintegrateLocked(ctx, why, keep, &rbs)
	p.reint.Unlock()
	p.readbackInstall(ctx, rbs) // permitreadback.go
	return err
}

// reintegrateLocked is reintegrateKeep's work (p.reint held); the opens
// asked for stored files are left in rbs.
func (p *permits) reintegrateLocked(ctx context.Context, why string, keep bool, rbs *[]*readback) error {
	if err := p.offPrepare(ctx); err != nil { // offlinereint.go
		return err
	}
	p.storeSmall() // permitstore.go
	*rbs = p.readbackBegin(keep)
	defer p.readbackEnd(*rbs)
	lostRounds := 0
	jukeboxes := 0
	probed := false
	for range reintegrateMaxRounds {
		probing := p.probeFirst(probed) // permitlost.go
		if probing {
			// Under no permit: the records the server applied before are
			// answered by LSN (their bases move), the first one it did
			// not is refused SNFS_ERR_NOPERMIT; nothing else is applied.
			probed = true
		} else if err := p.lostPrepare(ctx); err != nil { // permitlost.go
			return err
		}
		var refs []snfs1.PermitRef
		if !probing {
			refs = p.refsChecked() // after lostPrepare: the permits asked again
		}
		starts := p.startsSeen()
		recs := p.log.Records()
		made := provsOf(recs)
		start := p.sn.FS.AttrStart()
		res, err := p.log.Reintegrate(ctx, offSender{p: p, s: p.sender()}, refs)
		// offlinereint.go: before the attributes are taken in. A push that
		// failed is logged there and left to push again (permitdurable.go).
		_ = p.pushOffData(ctx, res.Made)
		p.readbackMade(*rbs, res.Made)
		if res.Batches > 0 {
			p.changedDirs(recs, err == nil, res.Dirs, start)
			p.attrsApplied(recs, res.Applied) // offlineattr.go
		}
		// The permits res.Permits names were taken in as each batch's reply
		// came (openSender, grantedPermits).
		p.settleMade(made, res.Made, start)
		p.forgetMade(made)
		if res.Batches > 0 {
			p.sn.FS.Logger().Debug("reintegrated", "why", why, "records", res.Sent, "batches", res.Batches,
				"cancelled", res.Cancelled, "merged", res.Merged)
		}
		var ce *cml.ConflictError
		if !errors.As(err, &ce) {
			if err == nil && p.log.Len() == 0 {
				p.mu.Lock()
				clear(p.lost)
				p.mu.Unlock()
				p.offDone(ctx)
			}
			return err
		}
		if ce.Status == nfs3.ErrJukebox {
			// Not applied and in conflict with nothing (the grace period
			// after a server restart, a full table: docs/protocol.md
			// section 21.3): left in the log and sent again, after a
			// pause, or by a later reintegration.
			if jukeboxes++; jukeboxes > reintegrateJukeboxTries {
				return fmt.Errorf("cachemgr: record LSN %d answered NFS3ERR_JUKEBOX %d times, left in the log: %w", ce.Record.LSN, jukeboxes-1, ce)
			}
			t := time.NewTimer(min(reintegrateJukeboxPause<<(jukeboxes-1), time.Second))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
			continue
		}
		if ce.Status == snfs1.ErrNoPermit && p.startsSeen() != starts {
			// Sent under the permits of a start the server restarted
			// from meanwhile: those reclaimed are held now with new ids
			// (permitreclaim.go), the others are marked lost. Sent again
			// under what is held.
			continue
		}
		if ce.Status == snfs1.ErrNoPermit && probing {
			continue // the permits held are kept; asked again next round
		}
		if ce.Status == snfs1.ErrNoPermit {
			// The permit is gone on the server (revoked: a recall not
			// heard of in time; or a restart's): held here, later changes
			// would be logged under it and refused too, and the kernel
			// would keep the directory's names (permitnames.go). Its
			// records are no conflict for that: the permit is asked again
			// and the names checked (permitlost.go), unless the directory
			// itself is gone.
			dirs := p.lostDirs(&ce.Record)
			for _, d := range dirs {
				p.drop(d)
			}
			// A record that changes no directory (a STORE, a file's
			// SETATTR) names no permit of its own: taken as before (a
			// STORE's data pushed instead, permitstore.go).
			if len(dirs) > 0 && !p.anyGone(dirs) {
				if lostRounds++; lostRounds > lostMaxRounds {
					return fmt.Errorf("cachemgr: record LSN %d refused SNFS_ERR_NOPERMIT %d times: %w", ce.Record.LSN, lostRounds, errPermitsWait)
				}
				p.markLost(dirs...)
				continue
			}
		}
		if ce.Record.Op == snfs1.CMLStore {
			// Its file's data is pushed after the reintegration instead,
			// as without the record (permitstore.go): not a conflict.
			p.storeRefused(&ce.Record, ce.Status)
			if err := p.log.Skip(ce.Record.LSN); err != nil {
				return err
			}
			continue
		}
		if !p.offRefused(ctx, &ce.Record, ce.Status, why) {
			p.keepConflict(&ce.Record, ce.Status, why)
		}
		if err := p.log.Skip(ce.Record.LSN); err != nil {
			return err
		}
	}
	return errors.New("cachemgr: too many refused records in one reintegration")
}

// startsSeen returns the count of server restarts seen, for takePermits.
func (p *permits) startsSeen() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starts
}

// takePermits holds the permits a reintegration's replies granted (MKDIR's),
// unless the server restarted since the batch that granted them was sent
// (starts, from startsSeen): serverRestarted forgot every permit, and these
// are gone too. It runs as each batch's reply arrives (openSender): a
// restart while a later batch of the same reintegration is out then finds
// them held, and reclaims them (permitreclaim.go).
func (p *permits) takePermits(starts uint64, refs []snfs1.PermitRef) {
	if len(refs) == 0 {
		return
	}
	p.mu.Lock()
	if p.starts != starts {
		p.mu.Unlock()
		return
	}
	for _, r := range refs {
		p.held[string(r.Dir)] = heldPermit{ref: r, since: time.Now()}
		p.sn.names.keep(r.Dir) // permitnames.go: with held, so that no drop comes between
	}
	p.mu.Unlock()
}

// grantedPermits are the permits a REINTEGRATE's reply rep granted on the
// directories the MKDIRs of records made: those of the records it answered
// OK (a prefix), as cml.Log.Reintegrate reads them (Result.Permits).
func grantedPermits(records []snfs1.CMLRecord, rep *snfs1.ReintegrateRes) []snfs1.PermitRef {
	var out []snfs1.PermitRef
	for i := range rep.Results {
		r := &rep.Results[i]
		if i >= len(records) || r.Status != nfs3.OK || r.LSN != records[i].LSN {
			break
		}
		if records[i].Op == snfs1.CMLMkdir && r.Permit != 0 && len(r.Obj) > 0 {
			out = append(out, snfs1.PermitRef{Dir: append(nfs3.FH(nil), r.Obj...), Permit: r.Permit})
		}
	}
	return out
}

// provsOf are the provisional ids of the objects records make.
func provsOf(recs []snfs1.CMLRecord) []uint64 {
	var out []uint64
	for i := range recs {
		if recs[i].New != 0 {
			out = append(out, recs[i].New)
		}
	}
	return out
}

// forgetMade forgets the real handles of the objects made that the log
// learned: the mount holds no provisional inode for them.
func (p *permits) forgetMade(made []uint64) {
	var done []uint64
	for _, id := range made {
		if p.offDataOf(id) != nil {
			continue // its data is still to be written to it
		}
		if _, ok := p.log.Handle(id); ok {
			done = append(done, id)
		}
	}
	if len(done) > 0 {
		p.log.Forget(done...)
	}
}

// changedDirs takes in that recs changed their directories on the server:
// their times and sizes changed there. When every record was applied
// (applied), their cached listings stay valid (they hold this mount's
// changes already, which are now the server's), and so do their attributes
// if the reply gave them (attrs, from a call that began at attribute
// generation start) and nothing of this mount changed them since; else the
// attributes are dropped (asked again at their next use), and when a record
// was refused the listings too (listed again at their next use).
func (p *permits) changedDirs(recs []snfs1.CMLRecord, applied bool, attrs map[string]nfs3.Fattr, start uint64) {
	seen := map[string]bool{}
	for i := range recs {
		for _, d := range recordDirs(&recs[i]) {
			if seen[string(d)] {
				continue
			}
			seen[string(d)] = true
			in := p.sn.FS.LookupInode(d)
			if in == nil {
				continue
			}
			in.Mu.Lock()
			old := in.ModGen
			if a, ok := attrs[string(d)]; ok && applied && old <= start {
				// The listing's generation is unchanged: it stays.
				in.PostOpLocked(&a, start, time.Now())
				in.Mu.Unlock()
				continue
			}
			in.InvalidateLocked()
			gen := in.ModGen
			in.Mu.Unlock()
			if applied {
				p.sn.names.keepListing(in, old, gen)
			}
		}
	}
}

// recordDirs are the directories (by handle) whose entries rec changes.
func recordDirs(rec *snfs1.CMLRecord) []nfs3.FH {
	var out []nfs3.FH
	if rec.Dir.FH != nil {
		out = append(out, rec.Dir.FH)
	}
	if rec.Op == snfs1.CMLRename && rec.ToDir.FH != nil {
		out = append(out, rec.ToDir.FH)
	}
	return out
}

// keepConflict records a refused record in the conflicts file: what the
// mount did there is not on the server (docs/mount.md "Conflicts").
func (p *permits) keepConflict(rec *snfs1.CMLRecord, st snfs1.Status, why string) {
	sn := p.sn
	sn.stats.Conflicts.Add(1)
	c := Conflict{Time: time.Now().UTC(), Name: rec.Name, DirFH: hex.EncodeToString(rec.Dir.FH),
		Reason: fmt.Sprintf("%s refused (status %d, LSN %d, %s)", rec.Op, st, rec.LSN, why), FileFH: hex.EncodeToString(rec.Obj.FH)}
	sn.FS.Logger().Warn("a logged change was refused by the server: kept as a conflict", "op", rec.Op, "name", rec.Name, "status", st)
	if err := appendConflict(sn.cfg.CacheDir, c); err != nil {
		sn.FS.Logger().Error("recording a conflict", "err", err)
	}
}

// drop forgets the permit of dir (recalled, refused, given back): it ended,
// and so did any permit of dir whose recall was cut before (noteCut), which
// a reclaim must not name then (docs/protocol.md section 21.9).
func (p *permits) drop(dir nfs3.FH) {
	p.sn.names.takeBack(dir) // permitnames.go
	p.mu.Lock()
	delete(p.held, string(dir))
	delete(p.cut, string(dir))
	p.mu.Unlock()
}

// recall serves CB_RECALL_PERMIT on dir: the log goes to the server first
// (all of it: it is applied in order), then the permit is given back by the
// answer (docs/protocol.md section 21.4). It runs on the callback's own
// goroutine, as a CB_WRITEBACK's WRITEs do (client.CallbackHandler).
//
// A permit not held with nothing logged is not this mount's (STALE): decided
// once a reintegration in progress is over, since its reply may be granting
// that very permit (an MKDIR's), and the server may recall it before the
// reply is taken in (another client changing the new directory); answered
// STALE, the server would end it, and the mount hold it after the reply.
func (p *permits) recall(ctx context.Context, dir nfs3.FH) state.Outcome {
	// A GET_PERMIT of dir out: the permit recalled may be in its answer
	// (another client's read or change came between the grant and the
	// answer's taking in). Answered STALE now, the server would end it while
	// this mount goes on to hold it and log changes nobody waits for.
	if !p.awaitAsked(ctx, string(dir)) {
		return state.Stale // the callback's context ended: nothing was taken in
	}
	p.reint.Lock()
	p.mu.Lock()
	_, held := p.held[string(dir)]
	p.mu.Unlock()
	empty := p.log.Len() == 0
	p.reint.Unlock()
	if !held && empty {
		return state.Stale
	}
	end := p.beginRecall(dir)
	defer end()
	// The kernel's names of dir go before the answer; local changes of
	// it go through the server from now on (permitnames.go).
	p.sn.names.takeBack(dir)
	err := p.reintegrate(ctx, "recall")
	cut := err != nil && ctx.Err() != nil && p.logHolds(dir)
	p.drop(dir) // forgets an earlier cut of dir: this recall ends that permit
	if cut {
		p.noteCut(dir) // permitreclaim.go
	}
	if err != nil && p.logHolds(dir) {
		return p.recallFailed(dir, err) // permitrelease.go
	}
	if err != nil {
		p.sn.FS.Logger().Warn("reintegration on a permit's recall", "err", err)
	}
	return state.OK
}

// askingLocked counts a GET_PERMIT of directory k out (d 1) or its answer
// taken in (d -1) (p.mu held).
func (p *permits) askingLocked(k string, d int) {
	if p.asking == nil {
		p.asking, p.asked = map[string]int{}, make(chan struct{})
	}
	if p.asking[k] += d; p.asking[k] <= 0 {
		delete(p.asking, k)
	}
	if d < 0 {
		close(p.asked)
		p.asked = make(chan struct{})
	}
}

// awaitAsked waits until no GET_PERMIT of directory k is out; false if ctx
// ended first.
func (p *permits) awaitAsked(ctx context.Context, k string) bool {
	for {
		p.mu.Lock()
		if p.asking[k] == 0 {
			p.mu.Unlock()
			return true
		}
		ch := p.asked
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

// flush reintegrates the log now (a directory's fsync, Sync, unmount).
func (p *permits) flush(ctx context.Context, why string) error {
	if err := p.syncLog(); err != nil {
		return err
	}
	if p.log.Len() == 0 {
		return nil
	}
	// Not at unmount: the opens kept would only be CLOSEd.
	return p.reintegrateKeep(ctx, why, why != "unmount")
}

// loop reintegrates the log when it is old or long enough, until close.
func (p *permits) loop() {
	defer close(p.done)
	t := time.NewTicker(permitLoopTick)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		p.releaseIdle(time.Now())
		p.retryPushes() // permitdurable.go
		st := p.log.Stats()
		p.mu.Lock()
		age, length := p.age, p.length
		p.mu.Unlock()
		if st.Records == 0 || st.Oldest < age && st.Records < length || p.sn.disc.offline() {
			continue
		}
		ctx, cancel := p.sn.stopCtx(time.Minute)
		if err := p.reintegrateKeep(ctx, "age", true); errors.Is(err, errPermitsWait) {
			p.sn.FS.Logger().Debug("reintegration of the modification log", "err", err)
		} else if err != nil {
			p.sn.FS.Logger().Warn("reintegration of the modification log", "err", err)
		}
		cancel()
	}
}

// close reintegrates what is left, gives the permits back and closes the
// log (unmount). What could not be sent stays in the log for the next
// mount.
func (p *permits) close(ctx context.Context) error {
	close(p.stop)
	<-p.done
	err := p.syncData(ctx, "unmount") // permitdurable.go
	p.releaseAll(ctx)
	return errors.Join(err, p.log.Close())
}

// releaseAll gives back the permits held (PERMIT_RELEASE).
func (p *permits) releaseAll(ctx context.Context) {
	refs := p.refs()
	p.sn.names.takeBackAll() // permitnames.go
	for len(refs) > 0 {
		n := min(len(refs), snfs1.PermitReleaseMax)
		if rerr := p.sn.sess.PermitRelease(ctx, refs[:n]); rerr != nil {
			p.sn.FS.Logger().Debug("PERMIT_RELEASE", "err", rerr)
			return
		}
		for _, r := range refs[:n] {
			p.drop(r.Dir)
		}
		refs = refs[n:]
	}
}

// SyncDir is an fsync of dir (SNFSMode): the modification log, which holds
// dir's changes made here, is flushed and reintegrated, as a local file
// system makes a directory's entries durable at its fsync (the whole log:
// it is applied in order), and the data of the files it made is written to
// them (syncData: an error, EIO, if it could not be). Without permits there
// is nothing to do: every change was a call, durable at its reply.
func (sn *snfsFS) SyncDir(ctx context.Context, dir *vfs.Inode) error {
	if sn.permits == nil {
		return nil
	}
	return sn.permits.syncData(ctx, "fsync of a directory")
}

// serverRestarted: permits do not survive a server's restart (docs/protocol.md
// section 21.6): those held are forgotten, so that no change is made locally
// under them, but those the reclaim granted again for this start
// (reclaimPermits, permitreclaim.go); the records logged under them are
// sent under permits reclaimed or asked again, once the names they change
// are checked (permitlost.go): others may have changed them since the
// restart (those asked again), or while the server was down.
//
// It does not wait for a local change in progress (the session may call it
// while that change's lease renewal waits for the reconnection): such a
// change's record is sent the same way.
func (p *permits) serverRestarted() {
	verf := p.sn.sess.ServerVerifier()
	p.mu.Lock()
	if !p.reclaimedSet || p.reclaimedVerf != verf {
		// Not reclaimed (refused), or reclaimed from an earlier start:
		// gone.
		clear(p.held)
		p.starts++
	}
	p.mu.Unlock()
	p.markLost(p.log.Dirs()...)
	p.sn.names.takeBackAll() // permitnames.go
}

// SetLogPolicy sets when fs's modification log is reintegrated by age or
// length (permitLogAge, permitLogLen; fs in snfs mode with permits: false
// otherwise). A test whose burst of changes must stay local until it sends
// the log itself sets an age longer than the burst may take on a loaded
// machine.
func SetLogPolicy(fs *vfs.FS, age time.Duration, length int) bool {
	p := mgrOf(fs).permits
	if p == nil {
		return false
	}
	p.mu.Lock()
	p.age, p.length = age, length
	p.mu.Unlock()
	return true
}
