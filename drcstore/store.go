package drcstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

	"snfs/sunrpc"
)

// Defaults for Open's bounds.
const (
	// DefaultMaxCount covers the replies made in the window in which a client
	// can still be waiting for one when the server dies, with room to spare.
	DefaultMaxCount = 8192
	// DefaultMaxAge covers a restart of the server's machine: the clients
	// retransmit when it is back.
	DefaultMaxAge = 10 * time.Minute
)

// FileName is the database's name in the state directory.
const FileName = "replies.db"

var bucketReplies = []byte("replies") // sequence (8) -> record (see encode)

// Store is a sunrpc.ReplyStore over bbolt.
type Store struct {
	db       *bolt.DB
	maxCount int
	maxAge   time.Duration
	now      func() time.Time
	// count is the number of records in the database. Load and Save are
	// called from one goroutine at a time (sunrpc.ReplyStore), so it needs
	// no lock.
	count int
}

// Open opens (creating it if needed) dir/replies.db, keeping at most maxCount
// replies (0: DefaultMaxCount) for at most maxAge (0: DefaultMaxAge).
func Open(dir string, maxCount int, maxAge time.Duration) (*Store, error) {
	if maxCount <= 0 {
		maxCount = DefaultMaxCount
	}
	if maxAge <= 0 {
		maxAge = DefaultMaxAge
	}
	path := filepath.Join(dir, FileName)
	// The freelist is not written at each commit (one page less to write);
	// bbolt rebuilds it when it opens the file.
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, NoFreelistSync: true,
		FreelistType: bolt.FreelistMapType})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("drcstore: %s is locked: another snfs server uses this state directory", path)
	}
	if err != nil {
		return nil, fmt.Errorf("drcstore: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucketReplies)
		return err
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("drcstore: %s: %w", path, err)
	}
	return &Store{db: db, maxCount: maxCount, maxAge: maxAge, now: time.Now}, nil
}

// MaxAge returns the age bound.
func (s *Store) MaxAge() time.Duration { return s.maxAge }

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Load calls f with every saved reply not older than the age bound, oldest
// first.
func (s *Store) Load(f func(sunrpc.SavedReply)) error {
	cutoff := s.now().Add(-s.maxAge)
	s.count = 0
	return s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketReplies).ForEach(func(k, v []byte) error {
			s.count++
			r, ok := decode(v)
			if ok && !r.At.Before(cutoff) {
				f(r)
			}
			return nil
		})
	})
}

// Save commits rs, and deletes the oldest replies beyond the count bound and
// those older than the age bound, in one transaction: durable when it returns.
func (s *Store) Save(rs []sunrpc.SavedReply) error {
	n := s.count
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketReplies)
		n = s.count
		for i := range rs {
			seq, err := b.NextSequence()
			if err != nil {
				return err
			}
			if err := b.Put(binary.BigEndian.AppendUint64(nil, seq), encode(&rs[i])); err != nil {
				return err
			}
			n++
		}
		cutoff := s.now().Add(-s.maxAge)
		var old [][]byte
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if n-len(old) <= s.maxCount {
				if r, ok := decode(v); ok && !r.At.Before(cutoff) {
					break
				}
			}
			old = append(old, k) // valid until the transaction ends
		}
		for _, k := range old {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		n -= len(old)
		return nil
	})
	if err != nil {
		return fmt.Errorf("drcstore: save %d replies: %w", len(rs), err)
	}
	s.count = n
	return nil
}

// A record is the time the reply was made (Unix nanoseconds, 8 bytes), the
// key's xid, program, version, procedure, argument checksum and argument
// length (4 bytes each), the client's address (2 bytes of length, then the
// bytes), then the reply.
const fixedLen = 8 + 6*4 + 2

func encode(r *sunrpc.SavedReply) []byte {
	k := &r.Key
	b := make([]byte, 0, fixedLen+len(k.Addr)+len(r.Reply))
	b = binary.BigEndian.AppendUint64(b, uint64(r.At.UnixNano()))
	for _, v := range []uint32{k.XID, k.Prog, k.Vers, k.Proc, k.Sum, k.Len} {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(k.Addr)))
	b = append(b, k.Addr...)
	return append(b, r.Reply...)
}

// decode parses a record, copying out of v (which bbolt owns).
func decode(v []byte) (sunrpc.SavedReply, bool) {
	if len(v) < fixedLen {
		return sunrpc.SavedReply{}, false
	}
	var r sunrpc.SavedReply
	r.At = time.Unix(0, int64(binary.BigEndian.Uint64(v)))
	u := func(i int) uint32 { return binary.BigEndian.Uint32(v[8+4*i:]) }
	r.Key = sunrpc.DRCKey{XID: u(0), Prog: u(1), Vers: u(2), Proc: u(3), Sum: u(4), Len: u(5)}
	n := int(binary.BigEndian.Uint16(v[fixedLen-2:]))
	if len(v) < fixedLen+n {
		return sunrpc.SavedReply{}, false
	}
	r.Key.Addr = string(v[fixedLen : fixedLen+n])
	r.Reply = append([]byte(nil), v[fixedLen+n:]...)
	return r, true
}
