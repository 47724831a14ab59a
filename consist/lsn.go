package consist

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"

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

// A client name's value in the "cml" bucket: its last applied LSN and,
// while a batch is being applied, the batch's highest LSN (pending; 0 once
// the batch is done), then the batch's pre-image: for each name its
// records change, the object that name held before the batch (a zero
// FileID: none), by the name's key (PreKey). An 8-byte value is a last alone.
func decodeCML(b []byte) (last, pending uint64, pre map[uint64]state.FileID) {
	switch {
	case len(b) == 8:
		return binary.BigEndian.Uint64(b), 0, nil
	case len(b) >= 16:
		last, pending = binary.BigEndian.Uint64(b), binary.BigEndian.Uint64(b[8:])
	default:
		return 0, 0, nil
	}
	const item = 8 + len(state.FileID{})
	if rest := b[16:]; len(rest) >= item {
		pre = make(map[uint64]state.FileID, len(rest)/item)
		for ; len(rest) >= item; rest = rest[item:] {
			pre[binary.BigEndian.Uint64(rest)] = state.FileID(rest[8:item])
		}
	}
	return last, pending, pre
}

func encodeCML(last, pending uint64, pre map[uint64]state.FileID) []byte {
	b := make([]byte, 0, 16+len(pre)*(8+len(state.FileID{})))
	b = binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(b, last), pending)
	if pending == 0 {
		return b
	}
	for k, id := range pre {
		b = binary.BigEndian.AppendUint64(b, k)
		b = append(b, id[:]...)
	}
	return b
}

// PreKey is the key of the name name in the directory dir (a directory's
// FileID, or one a batch's provisional id stands for) in a batch's
// pre-image: 64 bits of FNV-1a.
func PreKey(dir state.FileID, name string) uint64 {
	h := fnv.New64a()
	h.Write(dir[:])
	h.Write([]byte{0})
	h.Write([]byte(name))
	return h.Sum64()
}

// lastLSN returns the last applied LSN of the client named name (0: none),
// the highest LSN of a batch whose application began and did not end (0:
// none; a server that crashed while applying it) and that batch's
// pre-image.
func (r *records) lastLSN(name string) (last, pending uint64, pre map[uint64]state.FileID, err error) {
	if r.db == nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		last, pending, pre = decodeCML(r.lsns[name])
		return last, pending, pre, nil
	}
	err = r.db.View(func(tx *bolt.Tx) error {
		last, pending, pre = decodeCML(tx.Bucket(bucketCML).Get([]byte(name)))
		return nil
	})
	if err != nil {
		return 0, 0, nil, fmt.Errorf("consist: read the last applied LSN: %w", err)
	}
	return last, pending, pre, nil
}

// updateLSN sets name's record: last (never lowered) and pending with its
// pre-image (a batch up to pending begins; 0: the batch is done), committed
// (fsync'd) with whatever else is being written. keep: pending and the
// pre-image stay as recorded. made, if not nil, replaces the handles the
// client's last batches made (made.go), in the same commit as last.
func (r *records) updateLSN(name string, last, pending uint64, pre map[uint64]state.FileID, keep bool, made map[uint64]Made) error {
	put := func(old []byte) []byte {
		oldLast, oldPending, oldPre := decodeCML(old)
		if keep {
			pending, pre = oldPending, oldPre
		}
		return encodeCML(max(oldLast, last), pending, pre)
	}
	if r.db == nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.lsns == nil {
			r.lsns = map[string][]byte{}
		}
		r.lsns[name] = put(r.lsns[name])
		if made != nil {
			if r.made == nil {
				r.made = map[string][]byte{}
			}
			r.made[name] = encodeMade(made)
		}
		return nil
	}
	err := r.db.Batch(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketCML)
		if err := b.Put([]byte(name), put(b.Get([]byte(name)))); err != nil {
			return err
		}
		if made == nil {
			return nil
		}
		return tx.Bucket(bucketMade).Put([]byte(name), encodeMade(made))
	})
	if err != nil {
		return fmt.Errorf("consist: record the last applied LSN: %w", err)
	}
	return nil
}

// LastLSN returns table client c's registration name's last applied LSN,
// the highest LSN of a batch whose application did not end (0: none) and
// that batch's pre-image.
func (d *Driver) LastLSN(c state.ClientID) (last, pending uint64, pre map[uint64]state.FileID, err error) {
	name, ok := d.regName(c)
	if !ok {
		return 0, 0, nil, ErrStaleClientID
	}
	return d.rec.lastLSN(name)
}

// BeginLSN records durably, before a batch's records are applied, that a
// batch up to LSN hi is being applied after last, with the objects its
// names held before (pre, by PreKey).
func (d *Driver) BeginLSN(c state.ClientID, last, hi uint64, pre map[uint64]state.FileID) error {
	name, ok := d.regName(c)
	if !ok {
		return ErrStaleClientID
	}
	return d.rec.updateLSN(name, last, hi, pre, false, nil)
}

// SetLastLSN records durably lsn as table client c's last applied LSN, and
// the batch done; keep: a batch interrupted by a crash goes on past this
// one, its pending LSN and pre-image stay. made (by LSN: the handle each
// record applied up to lsn made) replaces the recorded made handles in the
// same commit (nil: they stay as recorded).
func (d *Driver) SetLastLSN(c state.ClientID, lsn uint64, keep bool, made map[uint64]Made) error {
	name, ok := d.regName(c)
	if !ok {
		return ErrStaleClientID
	}
	return d.rec.updateLSN(name, lsn, 0, nil, keep, made)
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
