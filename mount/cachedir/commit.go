package cachedir

import (
	"sync"

	bolt "go.etcd.io/bbolt"
)

// groupCommit writes index records in bbolt transactions, one commit (one
// fsync of the database) for all the records that arrive while the previous
// commit runs. Closes of many files at once then cost one database fsync
// between them rather than one each, without a timer (bbolt's Batch waits up
// to MaxBatchDelay even when alone) and without a goroutine: the first caller
// that finds no commit running runs the one its record is in.
type groupCommit struct {
	db *bolt.DB

	mu      sync.Mutex // guards the fields below
	cond    *sync.Cond // on mu: a commit finished
	running bool       // a caller is committing a batch (not cur)
	cur     *batch     // collecting records for the next commit
}

type batch struct {
	ops  map[string]op // by handle
	done bool
	err  error
}

// op is one file's change to the index.
type op struct {
	rec []byte // the encoded entry; nil: delete the record and its inline data
	// inline, with rec: the file's bytes [0, size) to keep in the index
	// (bucketInline) in the same commit; nil: delete them, unless keepInline.
	inline     []byte
	keepInline bool // with rec: leave the inline data as it is (a retraction)
}

var (
	bucketFiles  = []byte("files")
	bucketInline = []byte("inline") // handle -> data of a record committed inline (File.inline)
)

func newGroupCommit(db *bolt.DB) *groupCommit {
	g := &groupCommit{db: db, cur: &batch{ops: map[string]op{}}}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// commit makes the records durable. Records of one file must not be
// committed concurrently (the File's lock serializes them), so the last one
// given for a key in a batch is the newest.
func (g *groupCommit) commit(ops map[string]op) error {
	g.mu.Lock()
	b := g.cur
	for k, o := range ops {
		if prev, ok := b.ops[k]; ok && o.rec != nil && o.keepInline {
			o.inline, o.keepInline = prev.inline, prev.keepInline
		}
		b.ops[k] = o
	}
	for {
		if b.done {
			err := b.err
			g.mu.Unlock()
			return err
		}
		if !g.running {
			// b is g.cur: batches older than it have finished.
			g.running = true
			g.cur = &batch{ops: map[string]op{}}
			g.mu.Unlock()
			err := g.db.Update(func(tx *bolt.Tx) error {
				for k, o := range b.ops {
					if err := applyOp(tx, []byte(k), o); err != nil {
						return err
					}
				}
				return nil
			})
			g.mu.Lock()
			b.done, b.err = true, err
			g.running = false
			g.cond.Broadcast()
			continue
		}
		g.cond.Wait()
	}
}

func applyOp(tx *bolt.Tx, k []byte, o op) error {
	files, inline := tx.Bucket(bucketFiles), tx.Bucket(bucketInline)
	if o.rec == nil {
		if err := files.Delete(k); err != nil {
			return err
		}
		return inline.Delete(k)
	}
	if err := files.Put(k, o.rec); err != nil {
		return err
	}
	switch {
	case o.keepInline:
		return nil
	case o.inline != nil:
		return inline.Put(k, o.inline)
	default:
		return inline.Delete(k)
	}
}
