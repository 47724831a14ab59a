package server

import "snfs/nfs3"

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
// LSN: the entries below it are dropped, which keeps the record to about
// a batch's (consist/made.go).
func (b *batch) madeRecord() map[uint64][]byte {
	out := map[uint64][]byte{}
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
	return out
}

// recordedMade returns the handle recorded for the making record of LSN
// lsn, applied before and committed with the last applied LSN (nil: none
// recorded for it, or its object is gone: removed since, by the batch or
// by someone else); ok false: nothing is recorded for the record's batch
// (applied before a crash and found by the check, or by a server that did
// not record them), and the record is answered by its name.
func (b *batch) recordedMade(lsn uint64) (fh nfs3.FH, ok bool) {
	if !b.known || lsn > b.last {
		return nil, false
	}
	rec := b.recorded[lsn]
	if rec == nil {
		return nil, true
	}
	r, err := b.s.resolve(b.c, rec)
	if err != nil {
		return nil, true
	}
	defer r.release()
	if r.node.Stat.Nlink == 0 {
		return nil, true // removed, still open somewhere
	}
	return copyFH(rec), true
}
