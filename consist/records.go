package consist

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

	"snfs/snfs1"
)

// records is the durable part of the consistency state: client registrations
// and the version high-water mark. Writes are rare (a registration, one
// version block per many thousand opens) and each is committed (fsync'd)
// before it is acted on.
type records struct {
	db *bolt.DB
}

var (
	bucketClients = []byte("clients") // name -> id (8) | verifier (8)
	bucketMeta    = []byte("meta")
	keyNextClient = []byte("next-client")
	keyVersions   = []byte("versions")
)

// record is one client registration.
type record struct {
	id   snfs1.ClientID
	verf snfs1.Verifier
}

func openRecords(dir string) (*records, error) {
	path := filepath.Join(dir, "consist.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("consist: %s is locked: another snfs server uses this state directory", path)
	}
	if err != nil {
		return nil, fmt.Errorf("consist: open state database %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketClients, bucketMeta} {
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

func (r *records) close() error { return r.db.Close() }

// versionMark returns the durable version mark (0 on a new database).
func (r *records) versionMark() (uint64, error) {
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
	return r.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keyVersions, binary.BigEndian.AppendUint64(nil, v))
	})
}

// register records name with verf: the same id if name is known with the same
// verifier, a new one otherwise (a new client, or the old one restarted).
func (r *records) register(name string, verf snfs1.Verifier) (rec record, restarted bool, err error) {
	err = r.db.Update(func(tx *bolt.Tx) error {
		cb, mb := tx.Bucket(bucketClients), tx.Bucket(bucketMeta)
		if b := cb.Get([]byte(name)); len(b) == 16 {
			old := record{id: snfs1.ClientID(binary.BigEndian.Uint64(b))}
			copy(old.verf[:], b[8:])
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
		v := binary.BigEndian.AppendUint64(nil, uint64(rec.id))
		return cb.Put([]byte(name), append(v, verf[:]...))
	})
	if err != nil {
		return record{}, false, fmt.Errorf("consist: record registration: %w", err)
	}
	return rec, restarted, nil
}
