package consist

import (
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"snfs/state"
)

// The last applied log sequence number of each client (docs/protocol.md
// section 21.4): REINTEGRATE applies a record only if its LSN is above it,
// so a retransmitted batch, or one sent again after the client or the
// server restarted, applies nothing twice. Kept by client name (a client
// that restarts registers again under its name with a new id, and resends
// its log), in the state database's "cml" bucket, written after the batch's
// changes and committed before the reply; forgotten at UNREGISTER. Before a
// batch's first record is applied, its highest LSN is committed as pending:
// after a crash in the middle of a batch, the records between the last
// applied LSN and the pending one may have been applied, and REINTEGRATE
// checks each for its effect before applying it again.

// cmlRecord is a client name's value in the "cml" bucket: its last applied
// LSN and, while a batch is being applied, the batch's highest LSN
// (pending; 0 once the batch is done). An 8-byte value is a last alone.
func decodeCML(b []byte) (last, pending uint64) {
	switch len(b) {
	case 8:
		return binary.BigEndian.Uint64(b), 0
	case 16:
		return binary.BigEndian.Uint64(b), binary.BigEndian.Uint64(b[8:])
	}
	return 0, 0
}

func encodeCML(last, pending uint64) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, last), pending)
}

// lastLSN returns the last applied LSN of the client named name (0: none)
// and the highest LSN of a batch whose application began and did not end
// (0: none; a server that crashed while applying it).
func (r *records) lastLSN(name string) (last, pending uint64, err error) {
	if r.db == nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		l := r.lsns[name]
		return l[0], l[1], nil
	}
	err = r.db.View(func(tx *bolt.Tx) error {
		last, pending = decodeCML(tx.Bucket(bucketCML).Get([]byte(name)))
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("consist: read the last applied LSN: %w", err)
	}
	return last, pending, nil
}

// updateLSN sets name's record: last (never lowered) and pending (set: a
// batch up to pending begins; 0: the batch is done), committed (fsync'd)
// with whatever else is being written.
func (r *records) updateLSN(name string, last, pending uint64) error {
	if r.db == nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.lsns == nil {
			r.lsns = map[string][2]uint64{}
		}
		r.lsns[name] = [2]uint64{max(r.lsns[name][0], last), pending}
		return nil
	}
	err := r.db.Batch(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketCML)
		old, _ := decodeCML(b.Get([]byte(name)))
		return b.Put([]byte(name), encodeCML(max(old, last), pending))
	})
	if err != nil {
		return fmt.Errorf("consist: record the last applied LSN: %w", err)
	}
	return nil
}

// LastLSN returns table client c's registration name's last applied LSN
// and the highest LSN of a batch whose application did not end (0: none).
func (d *Driver) LastLSN(c state.ClientID) (last, pending uint64, err error) {
	name, ok := d.regName(c)
	if !ok {
		return 0, 0, ErrStaleClientID
	}
	return d.rec.lastLSN(name)
}

// BeginLSN records durably, before a batch's records are applied, that a
// batch up to LSN hi is being applied (after last).
func (d *Driver) BeginLSN(c state.ClientID, last, hi uint64) error {
	name, ok := d.regName(c)
	if !ok {
		return ErrStaleClientID
	}
	return d.rec.updateLSN(name, last, hi)
}

// SetLastLSN records durably lsn as table client c's last applied LSN, and
// the batch done.
func (d *Driver) SetLastLSN(c state.ClientID, lsn uint64) error {
	name, ok := d.regName(c)
	if !ok {
		return ErrStaleClientID
	}
	return d.rec.updateLSN(name, lsn, 0)
}

// regName returns the registration name of table client c.
func (d *Driver) regName(c state.ClientID) (string, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if cl := d.byMid[c]; cl != nil {
		return cl.name, true
	}
	return "", false
}
