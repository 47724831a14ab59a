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
// changes and committed before the reply; forgotten at UNREGISTER.

// lastLSN returns the last applied LSN of the client named name (0: none).
func (r *records) lastLSN(name string) (uint64, error) {
	if r.db == nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.lsns[name], nil
	}
	var lsn uint64
	err := r.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketCML).Get([]byte(name)); len(b) == 8 {
			lsn = binary.BigEndian.Uint64(b)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("consist: read the last applied LSN: %w", err)
	}
	return lsn, nil
}

// setLastLSN records lsn as the last applied LSN of name (never lowering
// it), committed (fsync'd) with whatever else is being written.
func (r *records) setLastLSN(name string, lsn uint64) error {
	if r.db == nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.lsns == nil {
			r.lsns = map[string]uint64{}
		}
		r.lsns[name] = max(r.lsns[name], lsn)
		return nil
	}
	err := r.db.Batch(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketCML)
		if old := b.Get([]byte(name)); len(old) == 8 && binary.BigEndian.Uint64(old) >= lsn {
			return nil
		}
		return b.Put([]byte(name), binary.BigEndian.AppendUint64(nil, lsn))
	})
	if err != nil {
		return fmt.Errorf("consist: record the last applied LSN: %w", err)
	}
	return nil
}

// LastLSN returns the last applied LSN of table client c's registration
// name (REINTEGRATE's idempotence).
func (d *Driver) LastLSN(c state.ClientID) (uint64, error) {
	name, ok := d.regName(c)
	if !ok {
		return 0, ErrStaleClientID
	}
	return d.rec.lastLSN(name)
}

// SetLastLSN records lsn durably as table client c's last applied LSN.
func (d *Driver) SetLastLSN(c state.ClientID, lsn uint64) error {
	name, ok := d.regName(c)
	if !ok {
		return ErrStaleClientID
	}
	return d.rec.setLastLSN(name, lsn)
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
