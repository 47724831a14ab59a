package sunrpc

import (
	"container/list"
	"sync"
)

// DRC is a duplicate request cache for non-idempotent procedures (after Juszczak,
// "Improving the Performance and Correctness of an NFS Server", and Linux nfsd).
// Entries are keyed by client address (without port, so a client that reconnects
// from a new port still hits), xid, program, version, procedure and a checksum and
// length of the arguments. A retransmission of a call still executing is dropped;
// a retransmission of a completed call gets the saved reply. Completed entries are
// evicted least recently used first, bounded by count and by reply bytes; entries
// in progress are bounded by the server's MaxInFlight.
type DRC struct {
	maxEntries int
	maxBytes   int

	mu      sync.Mutex
	entries map[drcKey]*drcEntry // guarded by mu
	lru     *list.List           // completed entries, front = newest; guarded by mu
	bytes   int                  // reply bytes held; guarded by mu

	hits, drops uint64 // guarded by mu; read through Stats
}

type drcKey struct {
	addr            string
	xid, prog, vers uint32
	proc, sum, n    uint32
}

type drcEntry struct {
	key   drcKey
	done  bool
	reply []byte
	elem  *list.Element
}

type drcState int

const (
	drcNew drcState = iota
	drcInProgress
	drcDone
)

// NewDRC returns a cache holding at most maxEntries completed replies and maxBytes
// of reply data.
func NewDRC(maxEntries, maxBytes int) *DRC {
	return &DRC{maxEntries: maxEntries, maxBytes: maxBytes, entries: map[drcKey]*drcEntry{}, lru: list.New()}
}

// Stats returns hits (replayed replies) and drops (retransmissions of calls in progress).
func (d *DRC) Stats() (hits, drops uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.hits, d.drops
}

func (d *DRC) start(k drcKey) (drcState, []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e, ok := d.entries[k]; ok {
		if !e.done {
			d.drops++
			return drcInProgress, nil
		}
		d.hits++
		d.lru.MoveToFront(e.elem)
		return drcDone, e.reply
	}
	d.entries[k] = &drcEntry{key: k}
	return drcNew, nil
}

func (d *DRC) finish(k drcKey, reply []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.entries[k]
	if !ok || e.done {
		return
	}
	e.done = true
	e.reply = append([]byte(nil), reply...)
	e.elem = d.lru.PushFront(e)
	d.bytes += len(e.reply)
	for d.lru.Len() > d.maxEntries || d.bytes > d.maxBytes {
		old := d.lru.Remove(d.lru.Back()).(*drcEntry)
		d.bytes -= len(old.reply)
		delete(d.entries, old.key)
	}
}

// forget drops an in-progress entry whose reply must not be cached.
func (d *DRC) forget(k drcKey) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e, ok := d.entries[k]; ok && !e.done {
		delete(d.entries, k)
	}
}
