package consist

import (
	"fmt"

	bolt "go.etcd.io/bbolt"

	"snfs/snfs1"
	"snfs/state"
)

// Write-back permits across a server restart (docs/protocol.md section
// 21.9). Permits live in memory; a client holding one may have logged
// changes its applications were told are made, not yet reintegrated. After
// a restart, the client reclaims those permits (RECLAIM_PERMIT, in its
// reclaim) and the grace period keeps everyone else from the directories
// until then: while an expected client whose registration was ever
// granted a permit (a flag in its durable record, written once, before the
// first grant's answer) is not back, every directory read or change by a
// client that does not hold the directory's permit waits (ErrGrace:
// NFS3ERR_JUKEBOX); until the grace period ends, those of a directory whose
// permit another client holds wait too, rather than recall it: the
// holder's reintegration of a removal would itself wait for the grace
// period (a file's REMOVE is a plain access: section 7.1), and its recall's
// deadline would pass first. After the grace period, a read recalls the
// permit as always, and the holder's log goes in first.

// markPermits sets the permits flag of name's record if it is still
// registration id's (a newer registration under the name is left alone).
func (r *records) markPermits(name string, id snfs1.ClientID) error {
	if r.db == nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		if rec, ok := r.mem[name]; ok && rec.id == id {
			rec.permits = true
			r.mem[name] = rec
		}
		return nil
	}
	err := r.db.Batch(func(tx *bolt.Tx) error {
		cb := tx.Bucket(bucketClients)
		rec, ok := decodeRecord(cb.Get([]byte(name)))
		if !ok || rec.id != id || rec.permits {
			return nil
		}
		rec.permits = true
		return cb.Put([]byte(name), rec.encode())
	})
	if err != nil {
		return fmt.Errorf("consist: record that a client holds permits: %w", err)
	}
	return nil
}

// notePermit makes durable, before table client c learns of a permit, that
// its registration was granted one (once per registration): after a
// restart the grace period then waits for its reclaim.
func (d *Driver) notePermit(c state.ClientID) error {
	d.mu.RLock()
	cl := d.byMid[c]
	done := cl == nil || cl.permits
	d.mu.RUnlock()
	if done {
		return nil // a client gone holds nothing after this either
	}
	if err := d.rec.markPermits(cl.name, cl.id); err != nil {
		return err
	}
	d.mu.Lock()
	cl.permits = true
	d.mu.Unlock()
	return nil
}

// ReclaimPermits applies a RECLAIM_PERMIT of registration id: the permits
// it held on dirs before the restart are granted again, without recalls,
// with new ids (0 for a directory whose permit is not: another client's,
// or a client whose record says it never held one). After the client's
// RECLAIM_DONE others may have been let through, so only the permits it
// reclaimed before are answered again (a reclaim sent again after a broken
// connection).
func (d *Driver) ReclaimPermits(id snfs1.ClientID, dirs [][]byte) ([]uint64, error) {
	mid, err := d.Client(id)
	if err != nil {
		return nil, err
	}
	g := &d.grace
	g.mu.Lock()
	defer g.mu.Unlock()
	ex := g.expected[id]
	if !g.active.Load() || ex == nil {
		return nil, ErrNoGrace
	}
	now := d.now()
	out := make([]uint64, len(dirs))
	for i, fh := range dirs {
		f := state.FileIDOf(fh)
		switch {
		case fh == nil || !ex.permits:
		case ex.back:
			out[i] = d.permits.HeldID(mid, f)
		default:
			had := d.permits.HeldID(mid, f)
			out[i] = d.permits.Reclaim(now, mid, f, fh)
			if out[i] != 0 && had == 0 {
				g.report.Permits++
			}
		}
		if d.tracing() {
			d.trace("permits: RECLAIM_PERMIT", fh, "client", d.clientName(mid), "permit", out[i])
		}
	}
	return out, nil
}

// InPermitGrace reports whether an expected client that may reclaim
// permits is not back yet (every directory call waits but the holders').
func (d *Driver) InPermitGrace() bool { return d.grace.permitGrace.Load() }

// PermitGraceAdmit decides, during the grace period, a directory call of
// table client c on dirs (a read or a change): ErrGrace while a permit may
// still be reclaimed on a directory c does not hold the permit of, or
// while another client holds one of dirs' permits; nil otherwise (and
// always outside the grace period).
func (d *Driver) PermitGraceAdmit(c state.ClientID, dirs [][]byte) error {
	if !d.grace.active.Load() {
		return nil
	}
	for _, fh := range dirs {
		f := state.FileIDOf(fh)
		if d.permits.HeldID(c, f) != 0 {
			continue
		}
		if d.grace.permitGrace.Load() || d.permits.HeldByOther(c, f) {
			d.met.graceJukebox.Inc()
			return ErrGrace
		}
	}
	return nil
}
