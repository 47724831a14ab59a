package consist

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"snfs/snfs1"
)

// records is the durable part of the consistency state: client registrations
// and the version high-water mark (issue 15's design: what the server cannot
// rebuild from its clients). Registrations are written at REGISTER and deleted
// at UNREGISTER, group-committed (bolt's DB.Batch: concurrent REGISTERs after a
// restart share one flush); the version mark once per block of versions. Every
// write is committed (fsync'd) before it is acted on. OPEN and CLOSE write
// nothing.
//
// With no state directory the records are kept in memory only (mem): nothing
// survives a restart, so there is no grace period either.
type records struct {
	db *bolt.DB // nil: in memory

	mu   sync.Mutex        // guards the in-memory records
	mem  map[string]record // name -> record; guarded by mu
	next uint64            // next client id; guarded by mu
	mark uint64            // version mark; guarded by mu
	lsns map[string][]byte // name -> its "cml" value (lsn.go), in memory; guarded by mu
	made map[string][]byte // name -> its "cmlmade" value (made.go), in memory; guarded by mu
}

var (
	bucketClients = []byte("clients") // name -> id (8) | verifier (8) [| permits (1): permitreclaim.go]
	bucketMeta    = []byte("meta")
	keyNextClient = []byte("next-client")
	keyVersions   = []byte("versions")
	bucketCML     = []byte("cml")     // name -> last applied LSN (8): REINTEGRATE's (lsn.go)
	bucketMade    = []byte("cmlmade") // name -> the handles the last batches made (made.go)
)

// batchDelay bounds how long a REGISTER waits for others to share its commit.
const batchDelay = 2 * time.Millisecond

// record is one client registration.
type record struct {
	id   snfs1.ClientID
	verf snfs1.Verifier
	// permits: the registration was granted a write-back permit (a 17th
	// byte, 1; written once, before the first grant's answer:
	// permitreclaim.go). After a restart, the grace period holds other
	// clients' directory calls until every such client has reclaimed.
	permits bool
}

func decodeRecord(b []byte) (record, bool) {
	if len(b) != 16 && (len(b) != 17 || b[16] > 1) {
		return record{}, false
	}
	r := record{id: snfs1.ClientID(binary.BigEndian.Uint64(b)), permits: len(b) == 17 && b[16] == 1}
	copy(r.verf[:8], b[8:16])
	return r, true
}

func (r record) encode() []byte {
	b := append(binary.BigEndian.AppendUint64(nil, uint64(r.id)), r.verf[:]...)
	if r.permits {
		b = append(b, 1)
	}
	return b
}

// openRecords opens dir/consist.db; dir "" keeps the records in memory.
func openRecords(dir string) (*records, error) {
	if dir == "" {
		return &records{mem: map[string]record{}, next: 1}, nil
	}
	path := filepath.Join(dir, "consist.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("consist: %s is locked: another snfs server uses this state directory", path)
	}
	if err != nil {
		return nil, fmt.Errorf("consist: open state database %s: %w", path, err)
	}
	db.MaxBatchDelay = batchDelay
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketClients, bucketMeta, bucketCML, bucketMade} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("consist: state database: %w", err)
	}
	return &records{db: db}, nil
}

func (r *records) durable() bool { return r.db != nil }

func (r *records) close() error {
	if r.db == nil {
		return nil
	}
	return r.db.Close()
}

// writes is the number of page writes to the database so far (tests check
// that OPEN and CLOSE write nothing).
func (r *records) writes() int64 {
	if r.db == nil {
		return 0
	}
	st := r.db.Stats()
	return st.TxStats.GetWrite()
}

// versionMark returns the durable version mark (0 on a new database).
func (r *records) versionMark() (uint64, error) {
	if r.db == nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.mark, nil
	}
	var v uint64
	err := r.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketMeta).Get(keyVersions); len(b) == 8 {
			v = binary.BigEndian.Uint64(b)
		}
		return nil
	})
	return v, err
}

// setVersionMark makes "versions up to v are used" durable.
func (r *records) setVersionMark(v uint64) error {
	if r.db == nil {
		r.mu.Lock()
		r.mark = v
		r.mu.Unlock()
		return nil
	}
	return r.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keyVersions, binary.BigEndian.AppendUint64(nil, v))
	})
}

// all returns every recorded registration by name (the clients known before
// a restart).
func (r *records) all() (map[string]record, error) {
	out := map[string]record{}
	if r.db == nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		for n, rec := range r.mem {
			out[n] = rec
		}
		return out, nil
	}
	err := r.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketClients).ForEach(func(k, v []byte) error {
			if rec, ok := decodeRecord(v); ok {
				out[string(k)] = rec
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("consist: read client records: %w", err)
	}
	return out, nil
}

// register records name with verf: the same id if name is known with the same
// verifier (nothing is written), a new one otherwise (a new client, or the old
// one restarted), committed with whatever other registrations are being made.
func (r *records) register(name string, verf snfs1.Verifier) (rec record, restarted bool, err error) {
	if r.db == nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		old, ok := r.mem[name]
		if ok && old.verf == verf {
			return old, false, nil
		}
		rec = record{id: snfs1.ClientID(r.next), verf: verf}
		r.next++
		r.mem[name] = rec
		return rec, ok, nil
	}
	found := false
	err = r.db.View(func(tx *bolt.Tx) error {
		if old, ok := decodeRecord(tx.Bucket(bucketClients).Get([]byte(name))); ok && old.verf == verf {
			rec, found = old, true
		}
		return nil
	})
	if err == nil && found {
		return rec, false, nil
	}
	// Batch may run the function more than once: it sets its results afresh.
	err = r.db.Batch(func(tx *bolt.Tx) error {
		cb, mb := tx.Bucket(bucketClients), tx.Bucket(bucketMeta)
		restarted = false
		if old, ok := decodeRecord(cb.Get([]byte(name))); ok {
			if old.verf == verf {
				rec = old
				return nil
			}
			restarted = true
		}
		var next uint64 = 1
		if b := mb.Get(keyNextClient); len(b) == 8 {
			next = binary.BigEndian.Uint64(b)
		}
		rec = record{id: snfs1.ClientID(next), verf: verf}
		if err := mb.Put(keyNextClient, binary.BigEndian.AppendUint64(nil, next+1)); err != nil {
			return err
		}
		return cb.Put([]byte(name), rec.encode())
	})
	if err != nil {
		return record{}, false, fmt.Errorf("consist: record registration: %w", err)
	}
	return rec, restarted, nil
}

// unregister deletes the registrations of names whose record still has the
// given id (a newer registration under the same name stays), in one commit
// shared with other writers.
func (r *records) unregister(ids map[string]snfs1.ClientID) error {
	if len(ids) == 0 {
		return nil
	}
	if r.db == nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		for name, id := range ids {
			if rec, ok := r.mem[name]; ok && rec.id == id {
				delete(r.mem, name)
				delete(r.lsns, name)
				delete(r.made, name)
			}
		}
		return nil
	}
	err := r.db.Batch(func(tx *bolt.Tx) error {
		cb := tx.Bucket(bucketClients)
		for name, id := range ids {
			if rec, ok := decodeRecord(cb.Get([]byte(name))); ok && rec.id == id {
				if err := cb.Delete([]byte(name)); err != nil {
					return err
				}
				// Unregistered, the client has nothing left to reintegrate:
				// its LSNs may start again.
				if err := tx.Bucket(bucketCML).Delete([]byte(name)); err != nil {
					return err
				}
				if err := tx.Bucket(bucketMade).Delete([]byte(name)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("consist: delete client records: %w", err)
	}
	return nil
}
