package server

import (
	"snfs/consist"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
)

// removedPermits is what a record removes that another client's permit
// covers: the directory of an RMDIR record, or the one a RENAME record
// replaces, when a client other than the batch's holds its permit (nil:
// none). It is recalled before the record is applied, as NFSv3's RMDIR
// and RENAME recall it (rmdirRemoved, renameRemoved; docs/protocol.md
// section 21.6): the holder's logged entries are in the directory when
// the record runs, which then fails NOTEMPTY instead of removing a
// directory the holder's applications were told holds them.
func (b *batch) removedPermits(rec *snfs1.CMLRecord) [][]byte {
	if (rec.Op != snfs1.CMLRmdir && rec.Op != snfs1.CMLRename) || !b.s.consist.PermitsActive() {
		return nil
	}
	fh, r := b.dirReq(rec.Dir)
	if r == nil {
		return nil
	}
	defer r.release()
	var gone []nfs3.FH
	if rec.Op == snfs1.CMLRmdir {
		gone = rmdirRemoved(b.s, b.c, r, &nfs3.DirOpArgs{Dir: fh, Name: rec.Name})
	} else {
		to, err := b.dir(rec.ToDir)
		if err != nil {
			return nil
		}
		gone = renameRemoved(b.s, b.c, r, &nfs3.RenameArgs{From: nfs3.DirOpArgs{Dir: fh, Name: rec.Name},
			To: nfs3.DirOpArgs{Dir: to, Name: rec.ToName}})
	}
	var held [][]byte
	for _, d := range gone {
		if b.s.consist.PermitHeldByOther(b.mid, d) {
			held = append(held, d)
		}
	}
	return held
}

// gate recalls the permits pdirs (removedPermits), then admits accs (the
// record's plain accesses); done is called once both are through, at once
// or from the goroutine that delivers the last answer.
//
// A recall that would close a cycle of batches waiting for each other's
// recalls is not waited for: the record is answered NFS3ERR_JUKEBOX at
// once, not applied (gateWait; docs/protocol.md section 11).
func (b *batch) gate(pdirs [][]byte, accs []fileAccess, done func(error)) {
	if len(pdirs) == 0 {
		b.s.admitBy(b.s.consist.BatchAccess, b.mid, accs, done)
		return
	}
	var holders []state.ClientID
	for _, d := range pdirs {
		if h, ok := b.s.consist.PermitHolder(d); ok && h != b.mid {
			holders = append(holders, h)
		}
	}
	if !b.s.reint.gateWait(b.mid, holders) {
		b.s.log.Info("reintegration: a record's recall would wait for a batch waiting for this one: answered NFS3ERR_JUKEBOX",
			"client", b.mid)
		done(consist.ErrJukebox)
		return
	}
	b.s.consist.PermitGate(b.mid, pdirs, func(_ bool, err error) {
		b.s.reint.gateDone(b.mid)
		if err != nil {
			done(err)
			return
		}
		b.s.admitBy(b.s.consist.BatchAccess, b.mid, accs, done)
	})
}

// dirReq resolves the directory o names, for a record's gate (nil when it
// does not resolve, or the batch may not change it: apply then fails, and no
// other client is called back for a change that is refused).
func (b *batch) dirReq(o snfs1.ObjRef) (nfs3.FH, *req) {
	fh, err := b.dir(o)
	if err != nil {
		return nil, nil
	}
	r, err := b.s.resolveWrite(b.c, fh)
	if err != nil {
		return nil, nil
	}
	return fh, r
}

// gateWait records that client c's batch is about to wait, in a record's
// gate, for the recalls of permits that holders hold, and reports true;
// unless that wait would close a cycle: a holder's batch already waiting,
// in its own record's gate, for a permit of c's (or of a client whose
// batch so waits, and so on). It then records nothing and reports false.
//
// Why such a cycle never ends by itself: the permit a gate recalls ends
// when its recall is answered or passes its deadline, but not while its
// holder's batch is being applied (docs/protocol.md section 21.4, "A batch
// in progress holds the permit's end"), and a holder's answer comes once
// its log is in, which waits for its batch: each batch of the cycle waits
// for another's end. The record that would close it is answered
// NFS3ERR_JUKEBOX instead: its batch ends, the ends it held are carried
// out, and the others go on; its client sends it again later.
func (r *reintQueues) gateWait(c state.ClientID, holders []state.ClientID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[state.ClientID]bool{}
	var reaches func(x state.ClientID) bool
	reaches = func(x state.ClientID) bool {
		if x == c {
			return true
		}
		if seen[x] {
			return false
		}
		seen[x] = true
		for _, y := range r.gates[x] {
			if reaches(y) {
				return true
			}
		}
		return false
	}
	for _, h := range holders {
		if reaches(h) {
			return false
		}
	}
	if r.gates == nil {
		r.gates = map[state.ClientID][]state.ClientID{}
	}
	r.gates[c] = holders
	return true
}

// gateDone: client c's batch no longer waits in a record's gate.
func (r *reintQueues) gateDone(c state.ClientID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.gates, c)
}
