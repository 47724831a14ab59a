package server

import (
	"maps"
	"slices"

	"snfs/consist"
	"snfs/nfs3"
	"snfs/snfs1"
)

// The handles a REINTEGRATE batch's records made, recorded durably with
// the last applied LSN (consist/made.go, docs/protocol.md section 21.3
// "Idempotence"): a batch sent again after its reply was lost answers each
// provisional id with the object its record made, never with whatever its
// name holds now (another party's object, if the name was removed and made
// again meanwhile).

// madeRecord is the made handles to record with the batch's last applied
// LSN: those recorded before for records from the batch's first LSN up to
// the last applied before it (a resend may still ask for them), and those
// the batch answered. The client sends its log from its first
// unacknowledged record on, so no later batch goes below this one's first
// LSN: the entries below it are dropped, which keeps the record to two
// batches' (consist/made.go); a client that breaks that rule loses the
// lowest LSNs' handles past madeMax (a resend of those is answered by
// name, as before they were recorded: only that client is misled).
func (b *batch) madeRecord() map[uint64]consist.Made {
	out := map[uint64]consist.Made{}
	if len(b.recs) > 0 {
		for lsn, fh := range b.recorded {
			if lsn >= b.recs[0].LSN && lsn <= b.last {
				out[lsn] = fh
			}
		}
	}
	for lsn, fh := range b.madeNow {
		out[lsn] = fh
	}
	if len(out) > madeMax {
		lsns := slices.Sorted(maps.Keys(out))
		for _, lsn := range lsns[:len(lsns)-madeMax] {
			delete(out, lsn)
		}
	}
	return out
}

// madeMax bounds the made handles recorded for a client name: two batches'.
const madeMax = 2 * snfs1.ReintegrateMax

// recordedMade returns the handle recorded for the making record rec,
// applied before and committed with the last applied LSN (nil: its object
// is gone, removed since by the batch or by someone else, or rec is not the
// record applied at its LSN: it gives another provisional id); ok false: no
// handle is recorded for it (applied before a crash and found by the check,
// or by a server that did not record them), and rec is answered by its
// name. A record answered with no handle keeps its entry (the object's
// stale handle), so that it is never answered by name later.
func (b *batch) recordedMade(rec *snfs1.CMLRecord) (fh nfs3.FH, ok bool) {
	if !b.known || rec.LSN > b.last {
		return nil, false
	}
	m, found := b.recorded[rec.LSN]
	if !found {
		// Found applied by the check after a crash, and the server
		// crashed again before recording what it answered.
		return nil, false
	}
	if m.Prov != rec.New {
		return nil, true
	}
	r, err := b.s.resolve(b.c, m.FH)
	if err != nil {
		return nil, true
	}
	defer r.release()
	if r.node.Stat.Nlink == 0 {
		return nil, true // removed, still open somewhere
	}
	return copyFH(m.FH), true
}
