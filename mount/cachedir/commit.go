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
	ops  map[string][]byte // handle -> encoded entry; nil: delete the record
	done bool
	err  error
}

var bucketFiles = []byte("files")

func newGroupCommit(db *bolt.DB) *groupCommit {
	g := &groupCommit{db: db, cur: &batch{ops: map[string][]byte{}}}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// commit makes the records durable: put for a non-nil value, delete for nil.
// Records of one file must not be committed concurrently (the File's lock
// serializes them), so the last one given for a key in a batch is the newest.
func (g *groupCommit) commit(ops map[string][]byte) error {
	g.mu.Lock()
	b := g.cur
	for k, v := range ops {
		b.ops[k] = v
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
			g.cur = &batch{ops: map[string][]byte{}}
			g.mu.Unlock()
			err := g.db.Update(func(tx *bolt.Tx) error {
				bk := tx.Bucket(bucketFiles)
				for k, v := range b.ops {
					var err error
					if v == nil {
						err = bk.Delete([]byte(k))
					} else {
						err = bk.Put([]byte(k), v)
					}
					if err != nil {
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
