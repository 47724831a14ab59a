package consist

import (
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"snfs/state"
)

// The handles REINTEGRATE's records made (docs/protocol.md section 21.3,
// "Idempotence"): for each client name, the handle of the object each
// CREATE, MKDIR or SYMLINK applied (or answered) made, by the record's
// LSN, committed with the last applied LSN. A batch sent again after its
// reply was lost answers each provisional id with the handle recorded for
// its record, not with what its name holds now: between the first
// application and the resend, a local process (or another client, once the
// holder's permit ended) may have removed the name and made it again, and
// the name then holds another party's object.
//
// Bounded by the batch: a client sends its log from its first
// unacknowledged record on, one batch at a time (mount/cml's sendPlan: the
// next batch only once the reply of the one before is recorded), so no
// record below a batch's first LSN is sent again. A batch recorded keeps
// the entries from its first LSN up to the last applied LSN before it (the
// records of an earlier batch whose reply may have been lost, all in that
// batch) and its own: at most two batches' records, 2 *
// snfs1.ReintegrateMax, which server.batch.madeRecord enforces against a
// client that breaks the rule (the lowest LSNs dropped).
//
// Kept in a bucket of its own ("cmlmade"), so that a state database written
// before it is read as it was: no entry for a name means none recorded
// (a server of an earlier version applied its last batch).

// Made is what a making record made: the provisional id it gave (0: none)
// and the object's handle.
type Made struct {
	Prov uint64
	FH   []byte
}

// madeVersion is the first byte of a "cmlmade" value: its layout, then
// items of LSN (8), provisional id (8), handle length (1) and handle.
const madeVersion = 1

func encodeMade(made map[uint64]Made) []byte {
	b := []byte{madeVersion}
	for lsn, m := range made {
		if len(m.FH) > 255 {
			continue // no handle is that long (nfs3.FHSize)
		}
		b = binary.BigEndian.AppendUint64(b, lsn)
		b = binary.BigEndian.AppendUint64(b, m.Prov)
		b = append(b, byte(len(m.FH)))
		b = append(b, m.FH...)
	}
	return b
}

// decodeMade returns the handles of a "cmlmade" value; ok false: none
// recorded (no value, or a layout this version does not know).
func decodeMade(b []byte) (made map[uint64]Made, ok bool) {
	if len(b) == 0 || b[0] != madeVersion {
		return nil, false
	}
	made = map[uint64]Made{}
	for rest := b[1:]; len(rest) >= 17; {
		lsn, prov, n := binary.BigEndian.Uint64(rest), binary.BigEndian.Uint64(rest[8:]), int(rest[16])
		rest = rest[17:]
		if len(rest) < n {
			break
		}
		made[lsn] = Made{Prov: prov, FH: append([]byte(nil), rest[:n]...)}
		rest = rest[n:]
	}
	return made, true
}

// madeHandles returns the handles recorded for the client named name (ok
// false: none recorded).
func (r *records) madeHandles(name string) (made map[uint64]Made, ok bool, err error) {
	if r.db == nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		made, ok = decodeMade(r.made[name])
		return made, ok, nil
	}
	err = r.db.View(func(tx *bolt.Tx) error {
		made, ok = decodeMade(tx.Bucket(bucketMade).Get([]byte(name)))
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("consist: read the made handles: %w", err)
	}
	return made, ok, nil
}

// MadeHandles returns the handles table client c's last batches made, by
// their records' LSNs, as SetLastLSN recorded them; ok false: none recorded
// (a database from before they were).
func (d *Driver) MadeHandles(c state.ClientID) (made map[uint64]Made, ok bool, err error) {
	name, found := d.regName(c)
	if !found {
		return nil, false, ErrStaleClientID
	}
	return d.rec.madeHandles(name)
}
