package cachemgr

import (
	"context"
	"sync"

	"snfs/mount/cml"
	"snfs/nfs3"
	"snfs/snfs1"
)

// The open of a file made locally, given by its reintegration
// (docs/protocol.md section 21.3, "Opens"): the first operation on a
// provisional open that needs the real file (a write) sends the log, and
// the file's CREATE goes as CML_CREATE_OPEN, so that the server opens the
// file it makes for this client and the OPEN that would follow costs
// nothing. The open's answer is taken as a CREATE_OPEN's (createopen.go:
// the callbacks that came while it was out, the server's boot verifier),
// through the same createOpened. Only what is sent carries the request: the
// log keeps a plain CREATE, and a later mount that resends it asks no open
// (the server withdraws one a lost reply granted).

// reintOpens is the provisional opens waiting for their file's
// reintegration, by provisional id.
type reintOpens struct {
	mu   sync.Mutex
	want map[uint64]*createOpened
	// stored: the ids whose open is asked only while the plan being sent
	// holds their CML_STORE record, in this call or a later batch
	// (permitreadback.go).
	stored map[uint64]bool
}

// wait registers co for the CREATE of provisional id (its open asked of the
// server when that record is sent) and returns the function that ends it.
func (r *reintOpens) wait(id uint64, co *createOpened) (end func()) {
	r.mu.Lock()
	if r.want == nil {
		r.want = map[uint64]*createOpened{}
	}
	r.want[id] = co
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		if r.want[id] == co {
			delete(r.want, id)
			delete(r.stored, id)
		}
		r.mu.Unlock()
	}
}

// waitStored is wait for a file whose open is asked only while the plan
// being sent holds its CML_STORE record (permitreadback.go).
func (r *reintOpens) waitStored(id uint64, co *createOpened) (end func()) {
	end = r.wait(id, co)
	r.mu.Lock()
	if r.stored == nil {
		r.stored = map[uint64]bool{}
	}
	r.stored[id] = true
	r.mu.Unlock()
	return end
}

// openSender is the cml.Sender of the mount's reintegrations: the session,
// with the CREATEs of files waited for sent as CML_CREATE_OPEN and their
// opens' answers handed to the waiting createOpened.
type openSender struct{ p *permits }

func (p *permits) sender() cml.Sender { return openSender{p} }

// Reintegrate implements cml.Sender.
func (o openSender) Reintegrate(ctx context.Context, permits []snfs1.PermitRef, records []snfs1.CMLRecord) (*snfs1.ReintegrateRes, error) {
	r := &o.p.opens
	r.mu.Lock()
	var asked map[uint64]*createOpened // by LSN
	if len(r.want) > 0 {
		for i := range records {
			rec := &records[i]
			co := r.want[rec.New]
			if rec.Op != snfs1.CMLCreate || rec.New == 0 || co == nil {
				continue
			}
			if r.stored[rec.New] && !storesProv(records, rec.New) && !o.p.log.PlanStores(rec.New) {
				continue // its STORE was cancelled (the optimiser)
			}
			if asked == nil {
				asked = map[uint64]*createOpened{}
				records = append([]snfs1.CMLRecord(nil), records...) // the caller's stay plain
				rec = &records[i]
			}
			rec.Open = true
			asked[rec.LSN] = co
		}
	}
	r.mu.Unlock()
	starts := o.p.startsSeen()
	rep, err := o.p.sn.sess.Reintegrate(ctx, permits, records)
	if err == nil && rep != nil {
		// The permits this batch's MKDIRs were granted are held from now
		// on, not once the whole reintegration is over: a server restart
		// while a later batch is out reclaims them (permitreclaim.go).
		o.p.takePermits(starts, grantedPermits(records, rep))
	}
	if err != nil || rep == nil || len(asked) == 0 {
		return rep, err
	}
	made := map[uint64]int{}
	for i := range rep.Results {
		made[rep.Results[i].LSN] = i
	}
	for _, op := range rep.Opens {
		co := asked[op.LSN]
		k, ok := made[op.LSN]
		if co == nil || !ok || rep.Results[k].Status != nfs3.OK || len(rep.Results[k].Obj) == 0 {
			continue
		}
		co.open, co.verf = op.Open, op.ServerVerf
		co.made = append(co.made[:0:0], rep.Results[k].Obj...)
	}
	return rep, nil
}

// storesProv reports whether records hold a CML_STORE of provisional id.
func storesProv(records []snfs1.CMLRecord, id uint64) bool {
	for i := range records {
		if records[i].Op == snfs1.CMLStore && records[i].Obj.Prov == id {
			return true
		}
	}
	return false
}
