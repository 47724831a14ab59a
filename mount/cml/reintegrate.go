package cml

import (
	"context"
	"errors"
	"fmt"

	"snfs/nfs3"
	"snfs/snfs1"
)

// Sender sends one REINTEGRATE (docs/protocol.md section 21.3):
// *client.Session is one.
type Sender interface {
	Reintegrate(ctx context.Context, permits []snfs1.PermitRef, records []snfs1.CMLRecord) (*snfs1.ReintegrateRes, error)
}

// Result says what a Reintegrate did.
type Result struct {
	Sealed    int    // raw records this call's plan covered
	Cancelled int    // of them, dropped by the optimiser (rule 1)
	Merged    int    // of them, SETATTRs merged into later ones (rule 2)
	Sent      int    // records the server applied or answered
	Batches   int    // REINTEGRATE calls answered
	Applied   uint64 // the last LSN the server acknowledged (0: none)
	// Permits the server granted on directories MKDIR records made: held
	// by the client now. The later batches of this call name them; the
	// caller holds them from now on (and gives them to later calls).
	Permits []snfs1.PermitRef
	// Made: the objects the server made (or answered) for this call's
	// records, by provisional id: the real handle and, when the reply
	// carried them, the attributes (the last applied record's of the call
	// that changed the object: its making record's, or a later SETATTR's
	// or LINK's; not kept in the log: the caller takes them in at once, or
	// asks the server later).
	Made map[uint64]Made
	// Dirs: the attributes of the directories the applied records changed,
	// by handle, as the last reply that gave them says (after its batch).
	Dirs map[string]nfs3.Fattr
}

// madeAttr: a later record of the call (SETATTR, LINK) changed obj, and
// its result gave the attributes after it: an object this call made keeps
// those, not its making record's (a file made, then chmod'ed).
func (res *Result) madeAttr(obj *snfs1.ObjRef, a *nfs3.Fattr) {
	for id, m := range res.Made {
		if obj.Prov != 0 && id == obj.Prov || obj.Prov == 0 && string(m.FH) == string(obj.FH) {
			c := *a
			m.Attr = &c
			res.Made[id] = m
			return
		}
	}
}

// Made is an object a reintegrated record made.
type Made struct {
	FH   nfs3.FH
	Attr *nfs3.Fattr // nil: not in the reply
}

// ConflictError is a record the server refused: the batch stopped there
// (docs/protocol.md section 21.3). Everything before it is acknowledged and
// recorded; it and the records after it stay in the log. The caller keeps
// what the record did as a conflict and calls Skip, or (SNFS_ERR_NOPERMIT)
// obtains the permit and calls Reintegrate again.
type ConflictError struct {
	Record snfs1.CMLRecord
	Status snfs1.Status
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("cml: the server refused %s (LSN %d): status %d", e.Record.Op, e.Record.LSN, e.Status)
}

// ErrLSNBehind: the server's last applied LSN for this client's name is
// above records it was sent: it answered them without applying them. The
// log's LSNs were reused (its directory was wiped while the name stayed
// registered, or another client uses the name).
var ErrLSNBehind = errors.New("cml: the server has applied LSNs beyond this log's records")

// Reintegrate sends the log to the server: first the rest of a plan sealed
// before (by a call a crash or an error interrupted: sent again as it was,
// so the server answers what it applied before without applying it again),
// then the records appended before this call, optimised (Optimize) into a
// plan written durably before any of it is sent. The plan goes in batches of
// at most snfs1.ReintegrateMax records and snfs1.PermitReleaseMax permits,
// in order, under permits (those given and those MKDIR records of its
// earlier batches obtained: Result.Permits);
// after each reply the real handles of the objects the batch made and the
// acknowledged LSN are recorded durably, and only then are the acknowledged
// records dropped. Records appended meanwhile wait for the next call. One
// Reintegrate runs at a time; Append goes on meanwhile.
//
// A call error (the connection, the server) returns with the batch
// unacknowledged: calling again resends it. A refused record returns a
// *ConflictError.
func (l *Log) Reintegrate(ctx context.Context, s Sender, permits []snfs1.PermitRef) (Result, error) {
	l.reint.Lock()
	defer l.reint.Unlock()
	var res Result
	l.mu.Lock()
	hadPlan := len(l.plan) > 0
	l.mu.Unlock()
	for round := 0; round < 2; round++ {
		if round == 1 || !hadPlan {
			if err := l.seal(&res); err != nil {
				return res, err
			}
		}
		if err := l.sendPlan(ctx, s, permits, &res); err != nil {
			return res, err
		}
		if !hadPlan {
			break
		}
	}
	if res.Sealed == 0 && res.Batches == 0 {
		return res, nil
	}
	return res, l.compact()
}

// Skip drops the plan's first record, lsn, durably: the record the server
// refused (a ConflictError), which the caller keeps as a conflict.
func (l *Log) Skip(lsn uint64) error {
	l.reint.Lock()
	defer l.reint.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.plan) == 0 || l.plan[0].LSN != lsn {
		return fmt.Errorf("cml: skip of LSN %d: not the next record to send", lsn)
	}
	pos, err := l.write(appendFrame(nil, &frame{kind: kindSkip, lsn: lsn}))
	if err == nil {
		err = l.waitFlushed(pos)
	}
	if err != nil {
		return err
	}
	l.bytes -= int64(recordSize(&l.plan[0]))
	l.plan = l.plan[1:]
	l.pruneBasesLocked() // a name no record left changes keeps no base: a later record's counts
	return nil
}

// Dirs returns the handles of the directories whose entries the records
// not yet reintegrated change (those named by handle): what a client
// restarted with a log needs permits on before it reintegrates.
func (l *Log) Dirs() []nfs3.FH {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.collectLocked(dirRefs)
}

// ChangesDir reports whether a record not yet reintegrated changes the
// entries or the own attributes of the directory fh (a real handle; a
// record naming it by the provisional id it was made under counts once
// the server has answered that id): what the server answers about fh
// before they are sent lacks them.
func (l *Log) ChangesDir(fh nfs3.FH) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	found := false
	l.eachRefLocked(func(r *snfs1.CMLRecord) []snfs1.ObjRef {
		if r.Op == snfs1.CMLSetattr {
			return []snfs1.ObjRef{r.Obj}
		}
		return dirRefs(r)
	}, func(h nfs3.FH) bool {
		found = string(h) == string(fh)
		return !found
	})
	return found
}

// AttrsChanged returns the objects whose attributes the records not yet
// reintegrated set (by handle, or by a provisional id the server has
// answered), once each: the objects of SETATTRs and of LINKs (a link
// count).
func (l *Log) AttrsChanged() []nfs3.FH {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.collectLocked(func(r *snfs1.CMLRecord) []snfs1.ObjRef {
		if r.Op != snfs1.CMLSetattr && r.Op != snfs1.CMLLink {
			return nil
		}
		return []snfs1.ObjRef{r.Obj}
	})
}

// collectLocked returns, once each, the handles refs names in the records
// not yet reintegrated (eachRefLocked). l.mu is held.
func (l *Log) collectLocked(refs func(*snfs1.CMLRecord) []snfs1.ObjRef) []nfs3.FH {
	seen := map[string]bool{}
	var out []nfs3.FH
	l.eachRefLocked(refs, func(fh nfs3.FH) bool {
		if !seen[string(fh)] {
			seen[string(fh)] = true
			out = append(out, fh)
		}
		return true
	})
	return out
}

// eachRefLocked calls f, in log order, with the handle of each object refs
// names in the records not yet reintegrated (the plan, then those
// pending), until f returns false. An object named by a provisional id is
// passed by the handle the server answered for it, and skipped before that
// (the server cannot know it by any handle yet). l.mu is held.
func (l *Log) eachRefLocked(refs func(*snfs1.CMLRecord) []snfs1.ObjRef, f func(nfs3.FH) bool) {
	visit := func(r *snfs1.CMLRecord) bool {
		for _, o := range refs(r) {
			fh := o.FH
			if o.Prov != 0 {
				h, ok := l.handles[o.Prov] // made by a record already in
				if !ok {
					continue
				}
				fh = h
			}
			if len(fh) != 0 && !f(fh) {
				return false
			}
		}
		return true
	}
	for i := range l.plan {
		if !visit(&l.plan[i]) {
			return
		}
	}
	for i := range l.pending {
		if !visit(&l.pending[i].rec) {
			return
		}
	}
}

// dirRefs returns the directories whose entries rec changes.
func dirRefs(rec *snfs1.CMLRecord) []snfs1.ObjRef {
	switch rec.Op {
	case snfs1.CMLRename:
		return []snfs1.ObjRef{rec.Dir, rec.ToDir}
	case snfs1.CMLSetattr, snfs1.CMLStore:
		return nil
	}
	return []snfs1.ObjRef{rec.Dir}
}

// substitute names by their real handles the objects of provisional ids the
// server has answered.
func substitute(recs []snfs1.CMLRecord, handles map[uint64]nfs3.FH) {
	for i := range recs {
		for _, o := range refs(&recs[i]) {
			if fh, ok := handles[o.Prov]; ok && o.Prov != 0 {
				*o = snfs1.ObjRef{FH: fh}
			}
		}
	}
}

// seal optimises the raw records appended so far into the plan, written
// (and flushed) before anything of it is sent.
func (l *Log) seal(res *Result) error {
	l.mu.Lock()
	if l.err != nil || len(l.pending) == 0 {
		err := l.err
		l.mu.Unlock()
		return err
	}
	raw := make([]snfs1.CMLRecord, len(l.pending))
	for i := range l.pending {
		raw[i] = l.pending[i].rec
	}
	at := l.pending[0].at
	handles := make(map[uint64]nfs3.FH, len(l.handles))
	for p, fh := range l.handles {
		handles[p] = fh
	}
	l.mu.Unlock()
	hi := raw[len(raw)-1].LSN
	substitute(raw, handles)
	plan, cancelled, merged := optimize(raw)
	res.Sealed += len(raw)
	res.Cancelled += cancelled
	res.Merged += merged
	var b []byte
	for start := 0; ; {
		end, size := start, 0
		for end < len(plan) && (end == start || size < planChunkBytes) && end-start < snfs1.ReintegrateMax {
			size += recordSize(&plan[end])
			end++
		}
		b = appendFrame(b, &frame{kind: kindPlan, hi: hi, at: at.UnixNano(), last: end == len(plan), recs: plan[start:end]})
		if end == len(plan) {
			break
		}
		start = end
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	pos, err := l.write(b)
	if err == nil {
		err = l.waitFlushed(pos)
	}
	if err != nil {
		return err
	}
	l.installPlan(plan, hi, at)
	return nil
}

// sendPlan sends the plan, batch after batch, recording each reply.
func (l *Log) sendPlan(ctx context.Context, s Sender, given []snfs1.PermitRef, res *Result) error {
	for {
		l.mu.Lock()
		if l.err != nil {
			err := l.err
			l.mu.Unlock()
			return err
		}
		if len(l.plan) == 0 {
			l.mu.Unlock()
			return nil
		}
		batch := append([]snfs1.CMLRecord(nil), l.plan[:storeCut(l.plan)]...)
		handles := make(map[uint64]nfs3.FH)
		for i := range batch {
			for _, o := range refs(&batch[i]) {
				if fh, ok := l.handles[o.Prov]; ok && o.Prov != 0 {
					handles[o.Prov] = fh
				}
			}
		}
		l.mu.Unlock()
		substitute(batch, handles)
		batch, perms := permitsFor(batch, given, res.Permits)
		rep, err := s.Reintegrate(ctx, perms, batch)
		if err != nil {
			l.mu.Lock()
			if len(l.plan) > 0 {
				l.maySent = max(l.maySent, l.plan[len(l.plan)-1].LSN)
			}
			l.mu.Unlock()
			return fmt.Errorf("cml: REINTEGRATE of LSNs %d to %d: %w", batch[0].LSN, batch[len(batch)-1].LSN, err)
		}
		if err := l.takeReply(batch, rep, res); err != nil {
			return err
		}
	}
}

// PlanStores reports whether the plan being sent (sealed by Reintegrate;
// its batches not yet acknowledged, the one in flight included) holds a
// CML_STORE of the object made as provisional id prov: a Sender asked for
// a batch may look ahead at what the later batches of the call write.
func (l *Log) PlanStores(prov uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.plan {
		if l.plan[i].Op == snfs1.CMLStore && l.plan[i].Obj.Prov == prov {
			return true
		}
	}
	return false
}

// Stores reports whether a record not yet acknowledged, raw or in the plan,
// is a CML_STORE of the object made as provisional id prov (named by that
// id, or by the handle the server gave it: a STORE sealed after the
// object's making record was acknowledged). The mount writes such a file's
// data by WRITE only once none is left (docs/mount.md "--permit-data"): a
// STORE sent after the WRITEs would write its older bytes over theirs. The
// log, not the mount's memory, answers it, so a restarted mount and a
// failed batch keep the order.
func (l *Log) Stores(prov uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	fh, made := l.handles[prov]
	is := func(r *snfs1.CMLRecord) bool {
		if r.Op != snfs1.CMLStore {
			return false
		}
		return r.Obj.Prov == prov || made && r.Obj.Prov == 0 && string(r.Obj.FH) == string(fh)
	}
	for i := range l.plan {
		if is(&l.plan[i]) {
			return true
		}
	}
	for i := range l.pending {
		if is(&l.pending[i].rec) {
			return true
		}
	}
	return false
}

// storeCut is how many of plan's first records one batch carries: at most
// snfs1.ReintegrateMax, and STORE records of at most
// snfs1.ReintegrateStoreMax bytes of data in all (at least one record).
func storeCut(plan []snfs1.CMLRecord) int {
	n, data := min(len(plan), snfs1.ReintegrateMax), 0
	for i := range n {
		if data += len(plan[i].Data); data > snfs1.ReintegrateStoreMax && i > 0 {
			return i
		}
	}
	return n
}

// permitsFor returns the permits batch is sent under: for every directory
// it changes (by handle), the permit given or obtained by an MKDIR, and at
// least one (a SETATTR of a file needs one the batch names). A batch that
// would need more than snfs1.PermitReleaseMax is cut short. Directories
// without a permit are sent without one: the server refuses their records
// SNFS_ERR_NOPERMIT, which tells the caller.
func permitsFor(batch []snfs1.CMLRecord, given, made []snfs1.PermitRef) ([]snfs1.CMLRecord, []snfs1.PermitRef) {
	held := map[string]uint64{}
	for _, p := range made {
		held[string(p.Dir)] = p.Permit
	}
	for _, p := range given {
		held[string(p.Dir)] = p.Permit
	}
	var out []snfs1.PermitRef
	named := map[string]bool{}
	for i := range batch {
		var add []snfs1.PermitRef
		for _, o := range dirRefs(&batch[i]) {
			if id, ok := held[string(o.FH)]; ok && o.Prov == 0 && !named[string(o.FH)] {
				add = append(add, snfs1.PermitRef{Dir: o.FH, Permit: id})
			}
		}
		if batch[i].Op == snfs1.CMLSetattr && batch[i].Obj.Prov == 0 {
			if id, ok := held[string(batch[i].Obj.FH)]; ok && !named[string(batch[i].Obj.FH)] {
				add = append(add, snfs1.PermitRef{Dir: batch[i].Obj.FH, Permit: id})
			}
		}
		if len(out)+len(add) > snfs1.PermitReleaseMax && i > 0 {
			return batch[:i], out
		}
		for _, p := range add {
			if !named[string(p.Dir)] {
				named[string(p.Dir)] = true
				out = append(out, p)
			}
		}
	}
	if len(out) == 0 && len(given) > 0 {
		out = append(out, given[0])
	}
	return batch, out
}

// takeReply checks a batch's reply, records it durably and drops what it
// acknowledged.
func (l *Log) takeReply(batch []snfs1.CMLRecord, rep *snfs1.ReintegrateRes, res *Result) error {
	if len(rep.Results) > len(batch) {
		return fmt.Errorf("cml: REINTEGRATE answered %d records of %d", len(rep.Results), len(batch))
	}
	ok := 0 // the records applied or answered: a prefix
	for ok < len(rep.Results) && rep.Results[ok].Status == nfs3.OK {
		if rep.Results[ok].LSN != batch[ok].LSN {
			return fmt.Errorf("cml: REINTEGRATE answered LSN %d for %d", rep.Results[ok].LSN, batch[ok].LSN)
		}
		ok++
	}
	failed := ok < len(rep.Results)
	if !failed && ok < len(batch) {
		return fmt.Errorf("cml: REINTEGRATE answered %d records of %d, none refused", ok, len(batch))
	}
	l.mu.Lock()
	maySent := l.maySent
	l.mu.Unlock()
	if rep.Applied > max(batch[len(batch)-1].LSN, maySent) || (failed && rep.Applied >= batch[ok].LSN) {
		return fmt.Errorf("%w: last applied %d, batch up to %d", ErrLSNBehind, rep.Applied, batch[len(batch)-1].LSN)
	}
	if ok > 0 && rep.Applied < batch[ok-1].LSN {
		return fmt.Errorf("cml: REINTEGRATE answered LSN %d OK and says its last applied is %d", batch[ok-1].LSN, rep.Applied)
	}
	if ok > 0 {
		f := frame{kind: kindAck, applied: batch[ok-1].LSN}
		for i := range ok {
			r := &rep.Results[i]
			if batch[i].New != 0 && len(r.Obj) > 0 {
				fh := append(nfs3.FH(nil), r.Obj...)
				f.handles = append(f.handles, provHandle{batch[i].New, fh})
				if res.Made == nil {
					res.Made = map[uint64]Made{}
				}
				m := Made{FH: fh}
				if r.Attr != nil {
					a := *r.Attr
					m.Attr = &a
				}
				res.Made[batch[i].New] = m
			}
			if (batch[i].Op == snfs1.CMLSetattr || batch[i].Op == snfs1.CMLLink || batch[i].Op == snfs1.CMLStore) && r.Attr != nil {
				res.madeAttr(&batch[i].Obj, r.Attr)
			}
			if batch[i].Op == snfs1.CMLMkdir && r.Permit != 0 && len(r.Obj) > 0 {
				res.Permits = append(res.Permits, snfs1.PermitRef{Dir: append(nfs3.FH(nil), r.Obj...), Permit: r.Permit})
			}
		}
		l.mu.Lock()
		pos, err := l.write(appendFrame(nil, &f))
		if err == nil {
			err = l.waitFlushed(pos)
		}
		if err != nil {
			l.mu.Unlock()
			return err
		}
		for _, h := range f.handles {
			l.handles[h.prov] = h.fh
		}
		l.ackPlan(f.applied)
		l.mu.Unlock()
		res.Sent += ok
		res.Applied = f.applied
	}
	for _, d := range rep.Dirs {
		if res.Dirs == nil {
			res.Dirs = map[string]nfs3.Fattr{}
		}
		res.Dirs[string(d.Dir)] = d.Attr
	}
	res.Batches++
	if failed {
		return &ConflictError{Record: batch[ok], Status: rep.Results[ok].Status}
	}
	return nil
}

// compact starts a segment that holds the log's live state alone, once no
// plan is left: a checkpoint (the next LSN), the provisional ids' handles
// not forgotten, and the raw records appended since the plan was sealed.
// The older segments are deleted.
//
// Only once the log spans more than one segment or has used half of the
// one it writes (needsCompaction): a compaction writes, flushes and renames
// a whole segment and flushes the directory, and a reintegration per file
// (a created file's open) would pay that per file, where its acknowledged
// frames cost replay nothing but reading them. What a segment holds before
// compaction replays to the same state (Open reads every segment from the
// newest checkpoint), so leaving it does not change what a crash keeps.
func (l *Log) compact() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.syncing {
		l.cond.Wait()
	}
	if l.err != nil || len(l.plan) > 0 || !l.needsCompaction() {
		return l.err
	}
	var rest []byte
	var hs []provHandle
	for p, fh := range l.handles {
		hs = append(hs, provHandle{p, fh})
	}
	for len(hs) > 0 {
		n := min(len(hs), maxAckHandles)
		rest = appendFrame(rest, &frame{kind: kindAck, handles: hs[:n]})
		hs = hs[n:]
	}
	var bs []Base
	for _, b := range l.bases {
		bs = append(bs, b)
	}
	for len(bs) > 0 {
		n := min(len(bs), maxBaseFrame)
		rest = appendFrame(rest, &frame{kind: kindBase, bases: bs[:n]})
		bs = bs[n:]
	}
	for _, e := range l.pending {
		rest = appendFrame(rest, &frame{kind: kindOp, at: e.at.UnixNano(), rec: e.rec})
	}
	if err := l.startSegment(&frame{kind: kindCheckpoint, next: l.next}, rest); err != nil {
		l.err = err
		return err
	}
	return nil
}

// needsCompaction reports whether compact should rewrite the log: it spans
// more than one segment (older ones to delete), or the segment written is
// half used. The caller holds mu.
func (l *Log) needsCompaction() bool {
	return len(l.segs) > 1 || l.off > l.size/2
}
