package server

import (
	"snfs/consist"
	"snfs/nfs3"
	"snfs/state"
)

// The permits a batch's MKDIR records obtain (docs/protocol.md section
// 21.4, "A batch in progress holds the permit's end").

// holdNew holds the end of the permit id on the directory fh that a
// record of the batch gave, as the permits the batch names are held
// (PermitBatch): another client's change in the new directory recalls it
// at once, and without this its deadline could pass while the rest of the
// batch waits for a third client's callbacks, revoking a permit whose
// holder has not even learnt of it (state/cml_model_mkdir_test.go,
// holdNewEnds).
func (b *batch) holdNew(fh nfs3.FH, id uint64) {
	if id == 0 || b.permits[state.FileIDOf(fh)] == id {
		return // none, or named by the batch: held already
	}
	b.newEnds = append(b.newEnds, b.s.consist.PermitBatch(b.mid, []consist.PermitRef{{Dir: copyFH(fh), ID: id}}))
}

// dropEnded answers no permit for an MKDIR whose permit ended while the
// batch was applied (its recall, out before the holder could know of it,
// passed its deadline: revoked at the batch's end): a holder told of it
// would log changes under a permit nobody waits for, to have them refused.
func (b *batch) dropEnded() {
	for i := range b.results {
		r := &b.results[i]
		if r.Permit != 0 && !b.s.consist.HoldsPermit(b.mid, r.Obj, r.Permit) {
			r.Permit = 0
		}
	}
}

// endNew ends holdNew's holds, once the batch is applied.
func (b *batch) endNew() {
	for _, end := range b.newEnds {
		end()
	}
	b.newEnds = nil
}
