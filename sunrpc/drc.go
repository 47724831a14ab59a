package sunrpc

import (
	"container/list"
	"sync"
	"time"
)

// DRC is a duplicate request cache for non-idempotent procedures (after Juszczak,
// "Improving the Performance and Correctness of an NFS Server", and Linux nfsd).
// Entries are keyed by client address (without port, so a client that reconnects
// from a new port still hits), xid, program, version, procedure and a checksum and
// length of the arguments. A retransmission of a call still executing is dropped;
// a retransmission of a completed call gets the saved reply. Completed entries are
// evicted least recently used first, bounded by count and by reply bytes; entries
// in progress are bounded by the server's MaxInFlight.
//
// With a ReplyStore (Persist), the replies of procedures marked Proc.Persist
// also survive a restart of the server: each is saved before it is sent, and
// the saved replies are loaded back when the next server starts, so that a
// client retransmitting across the restart gets the original answer rather
// than the effect of executing its call twice (EEXIST for a create that
// happened, ENOENT for a remove or rename that happened).
type DRC struct {
	maxEntries int
	maxBytes   int

	mu      sync.Mutex
	entries map[DRCKey]*drcEntry // guarded by mu
	lru     *list.List           // completed entries, front = newest; guarded by mu
	bytes   int                  // reply bytes held; guarded by mu
	maxAge  time.Duration        // entries older are not replayed (0: no bound); set by Persist
	now     func() time.Time     // the clock, replaced by tests

	hits, drops uint64 // guarded by mu; read through Stats

	persist *persister // nil: replies live in memory only
}

// DRCKey identifies a call in the duplicate request cache.
type DRCKey struct {
	Addr                  string // the client's IP address, without port
	XID, Prog, Vers, Proc uint32
	Sum, Len              uint32 // checksum of the first drcSumBytes of the arguments, and their length
}

type drcEntry struct {
	key   DRCKey
	done  bool
	at    time.Time // when the reply (or intent) was made
	reply []byte
	// intent: done is true, reply is nil and this is the intent a call saved
	// before it changed anything, loaded after a restart with no reply after
	// it (DRC.Persist, Call.SaveIntent): the retransmission is executed with
	// it (Call.Intent).
	intent []byte
	elem   *list.Element
}

type drcState int

const (
	drcNew drcState = iota
	drcInProgress
	drcDone
	drcIntent // executed again, with the intent of the first attempt
)

// NewDRC returns a cache holding at most maxEntries completed replies and maxBytes
// of reply data.
func NewDRC(maxEntries, maxBytes int) *DRC {
	return &DRC{maxEntries: maxEntries, maxBytes: maxBytes, entries: map[DRCKey]*drcEntry{}, lru: list.New(),
		now: time.Now}
}

// Stats returns hits (replayed replies) and drops (retransmissions of calls in progress).
func (d *DRC) Stats() (hits, drops uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.hits, d.drops
}

// start returns what to do with the call k: execute it (drcNew; drcIntent,
// with the intent its first attempt saved), drop it (in progress), or answer
// it with the reply returned (drcDone).
func (d *DRC) start(k DRCKey) (drcState, []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e, ok := d.entries[k]; ok {
		if !e.done {
			d.drops++
			return drcInProgress, nil
		}
		if d.maxAge <= 0 || d.now().Sub(e.at) <= d.maxAge {
			if e.intent != nil {
				intent := e.intent
				d.remove(e)
				d.entries[k] = &drcEntry{key: k}
				return drcIntent, intent
			}
			d.hits++
			d.lru.MoveToFront(e.elem)
			return drcDone, e.reply
		}
		// Too old to be a retransmission: a new call that happens to match.
		d.remove(e)
	}
	d.entries[k] = &drcEntry{key: k}
	return drcNew, nil
}

// finish records the reply of the call k and returns its time and the cache's
// copy of it (nil if the call was not in progress); the copy is never changed.
func (d *DRC) finish(k DRCKey, reply []byte) (time.Time, []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	e, ok := d.entries[k]
	if !ok || e.done {
		return now, nil
	}
	e.done, e.at = true, now
	e.reply = append([]byte(nil), reply...)
	d.add(e)
	return now, e.reply
}

// add puts a completed entry at the front of the LRU list and evicts beyond the
// bounds.
func (d *DRC) add(e *drcEntry) {
	e.elem = d.lru.PushFront(e)
	d.bytes += len(e.reply) + len(e.intent)
	for d.lru.Len() > d.maxEntries || d.bytes > d.maxBytes {
		d.remove(d.lru.Back().Value.(*drcEntry))
	}
}

// remove drops a completed entry.
func (d *DRC) remove(e *drcEntry) {
	d.lru.Remove(e.elem)
	d.bytes -= len(e.reply) + len(e.intent)
	delete(d.entries, e.key)
}

// forget drops an in-progress entry whose reply must not be cached.
func (d *DRC) forget(k DRCKey) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e, ok := d.entries[k]; ok && !e.done {
		delete(d.entries, k)
	}
}
