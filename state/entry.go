package state

// entry is one file's record. All fields are guarded by its shard's mu.
type entry struct {
	key        FileID
	handle     string // the NFS file handle, for callbacks
	prev, next *entry // shard recency list
	holders    []holder
	pend       *pending // parked requests and callbacks out; nil when none
	version    uint64   // 0: none issued since the entry was made or a plain change
	touched    int64    // last input on the file (the recency list's order)
	recallAt   int64    // when the last recall (an invalidating callback) was sent; 0: never
	leased     bool     // the last ActLease for the file took the lease
	change     uint64   // the change attribute the last OPEN gave (OpenArgs.Change); 0: none
	// st is the state as of the last input. It is what derive reads to keep
	// WRITE_SHARED until the final close; everything else derive recomputes.
	st State
	// recallMode and recallBy: the OPEN (mode, client) that caused the last
	// recall (mode 0: a plain access did). Its retry is exempt from the
	// back-off, as the OPEN itself is.
	recallMode Mode
	recallBy   ClientID
}

// holder is one client's record in an entry: its opens, its plain hold, and what
// the machine must assume of its cache.
type holder struct {
	client     ClientID
	readers    uint32 // protocol opens for reading
	writers    uint32 // protocol opens for writing
	flags      uint8
	plainUntil int64 // a plain access counts as an open before this time
	// wbSeq is the sequence number of the last callback asking for a
	// write-back that the client answered OK: a GETATTR that arrived before
	// it was sent has seen the client's writes (see getattr).
	wbSeq uint64
}

// Holder flags.
const (
	fCaching    uint8 = 1 << iota // may cache blocks of the file
	fDirty                        // may hold dirty blocks (the last writer)
	fFenced                       // requests refused until it opens again
	fPlainWrite                   // its plain hold includes a change
	fPinned                       // answered Pinned: a dirty writer others' requests wait behind (see pinnedBlock)
	fOwed                         // owes an invalidation: the file changed outside the protocol (Changed)
	fRepinned                     // pinned by a reclaim (repin), not by its own CB_PINNED: its next write-back also invalidates
)

// pending is what is in flight on a file.
type pending struct {
	waiters []waiter  // FIFO: an OPEN or uncovered plain access is applied only at the head
	calls   []outCall // at most one per client
}

// waiter is a parked request.
type waiter struct {
	req    ReqID
	client ClientID
	mode   Mode       // an OPEN's mode; 0 for a plain access
	access AccessKind // a plain access's kind; 0 for an OPEN
	local  bool       // the access is a local process's (AccessArgs.Local): no hold
	// patient: a REINTEGRATE record's access (AccessArgs.Patient): never
	// answered Jukebox.
	patient bool
	since   int64
	// seq is the callback sequence number when the request arrived: a
	// GETATTR, and any request behind a pinned holder, waits for write-backs
	// asked for after that.
	seq uint64
	// recallSeen is the file's last recall when the request arrived: the
	// back-off it starts applies to the request, one its own conflict causes
	// does not (that conflict is the one the recall resolves).
	recallSeen int64
	// recallOwn: that recall was caused by an OPEN of this client in this
	// mode (this request is its retry, or a reopen): it is exempt too.
	recallOwn bool
}

func (w *waiter) write() bool { return w.mode == Write || w.access.changes() }

// outCall is a callback in flight.
type outCall struct {
	seq     uint64
	client  ClientID
	mode    CallbackMode
	sent    bool
	emitted int64
	at      int64 // when sent (valid if sent)
	// dirtyClose: the client CLOSEd with dirty = TRUE while the call was
	// out. Its OK then covers what it held dirty when the callback reached
	// it, not what it may have written since (CallbackDone).
	dirtyClose bool
}

func (h *holder) opens() bool { return h.readers+h.writers > 0 }

func (h *holder) plainActive(t int64) bool { return t < h.plainUntil }

// open reports whether h counts as having the file open at t.
func (h *holder) open(t int64) bool { return h.opens() || h.plainActive(t) }

// writing reports whether h counts as having the file open for writing at t.
func (h *holder) writing(t int64) bool {
	return h.writers > 0 || (h.flags&fPlainWrite != 0 && h.plainActive(t))
}

// changing reports whether a client may be changing e through the server: a
// writer, a holder of dirty blocks, a plain write hold. Its changes explain a
// change attribute that moved.
func (e *entry) changing(t int64) bool {
	for i := range e.holders {
		if h := &e.holders[i]; h.writing(t) || h.flags&fDirty != 0 {
			return true
		}
	}
	return false
}

// empty reports whether h records nothing worth keeping.
func (h *holder) empty(t int64) bool {
	return !h.open(t) && h.flags&(fDirty|fFenced) == 0
}

// covered reports whether h's protocol rights already cover a plain access of
// kind k: a client's own reads of a file it has open, and its writes (write-backs
// included) to a file it has open for writing or may hold dirty blocks of. These
// are never parked: they are how a called-back client answers its callback.
func (h *holder) covered(k AccessKind) bool {
	if h == nil || h.flags&fFenced != 0 {
		return false
	}
	if h.writers > 0 || h.flags&fDirty != 0 {
		return true
	}
	return (k == AccessRead || k == AccessGetattr) && h.readers > 0
}

func (e *entry) holder(c ClientID) *holder {
	for i := range e.holders {
		if e.holders[i].client == c {
			return &e.holders[i]
		}
	}
	return nil
}

func (e *entry) addHolder(c ClientID) *holder {
	if h := e.holder(c); h != nil {
		return h
	}
	if len(e.holders) == cap(e.holders) {
		// Grow by one: most files have one or two clients.
		hs := make([]holder, len(e.holders), len(e.holders)+1)
		copy(hs, e.holders)
		e.holders = hs
	}
	e.holders = append(e.holders, holder{client: c})
	return &e.holders[len(e.holders)-1]
}

// opener is a hypothetical extra open, for computing the state an OPEN or a
// plain access would lead to.
type opener struct {
	client ClientID
	write  bool
}

// derive computes the state from the holders (with x added, if not nil), as
// Table 1 of the paper defines it, including its one piece of history:
// WRITE_SHARED lasts until the final close.
func (e *entry) derive(t int64, x *opener) State {
	n, writer, dirty := 0, false, false
	var oneDirty, seenX bool
	for i := range e.holders {
		h := &e.holders[i]
		o, w := h.open(t), h.writing(t)
		if x != nil && h.client == x.client {
			o, w, seenX = true, w || x.write, true
		}
		d := h.flags&fDirty != 0
		dirty = dirty || d
		if o {
			n++
			oneDirty = d
			writer = writer || w
		}
	}
	if x != nil && !seenX {
		n++
		oneDirty = false
		writer = writer || x.write
	}
	switch {
	case n == 0 && dirty:
		return ClosedDirty
	case n == 0:
		return Closed
	case e.st == WriteShared:
		return WriteShared
	case n >= 2 && writer:
		return WriteShared
	case n >= 2:
		return MultReaders
	case writer:
		return OneWriter
	case oneDirty:
		return OneRdrDirty
	}
	return OneReader
}

// need returns the callback h must have answered before x may hold the file,
// the file's state then being next. A file that will be write-shared must have
// every other cache written back and invalidated; otherwise only the last
// writer's dirty blocks must come back (and be invalidated if x will write).
func need(h *holder, x *opener, next State) CallbackMode {
	if h.client == x.client || h.flags&fPinned != 0 {
		return 0 // a pinned holder is asked for write-backs by pinnedBlock
	}
	dirty, caching := h.flags&fDirty != 0, h.flags&fCaching != 0
	switch {
	case next == WriteShared && dirty:
		return WritebackInvalidate
	case next == WriteShared && caching:
		return Invalidate
	case dirty && x.write:
		return WritebackInvalidate
	case dirty:
		return Writeback
	}
	return 0
}

// settle drops expired plain holds and empty holders and recomputes the state.
func (e *entry) settle(t int64) {
	j := 0
	for i := range e.holders {
		h := e.holders[i]
		if h.plainUntil != 0 && !h.plainActive(t) {
			h.plainUntil = 0
			h.flags &^= fPlainWrite
		}
		if !h.empty(t) {
			e.holders[j] = h
			j++
		}
	}
	clear(e.holders[j:])
	// An entry whose last holder left keeps the room for one: the next OPEN
	// of a file opened and closed over and over allocates nothing.
	e.holders = e.holders[:j]
	if j == 0 && cap(e.holders) > 1 {
		e.holders = nil
	}
	e.st = e.derive(t, nil)
}

// onlyFences reports whether the entry records nothing but fences.
func (e *entry) onlyFences(t int64) bool {
	for i := range e.holders {
		h := &e.holders[i]
		if h.open(t) || h.flags&fDirty != 0 {
			return false
		}
	}
	return true
}

func (e *entry) call(c ClientID) *outCall {
	if e.pend == nil {
		return nil
	}
	for i := range e.pend.calls {
		if e.pend.calls[i].client == c {
			return &e.pend.calls[i]
		}
	}
	return nil
}

// Recency list and busy list, under the shard's mu.

func (s *shard) pushFront(e *entry) {
	e.prev, e.next = &s.lru, s.lru.next
	s.lru.next.prev = e
	s.lru.next = e
}

func (s *shard) unlink(e *entry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

func (s *shard) touch(e *entry, t int64) {
	e.touched = t
	if s.lru.next != e {
		s.unlink(e)
		s.pushFront(e)
	}
}

func (s *shard) remove(e *entry) {
	s.unlink(e)
	delete(s.files, e.key)
}

func (s *shard) markBusy(e *entry) {
	if e.pend == nil {
		e.pend = &pending{}
		s.busy = append(s.busy, e)
	}
}

// unbusy forgets e's pending record once nothing is in flight.
func (s *shard) unbusy(e *entry) {
	if e.pend == nil || len(e.pend.waiters) > 0 || len(e.pend.calls) > 0 {
		return
	}
	e.pend = nil
	for i, b := range s.busy {
		if b == e {
			last := len(s.busy) - 1
			copy(s.busy[i:], s.busy[i+1:])
			s.busy[last] = nil
			s.busy = s.busy[:last]
			return
		}
	}
}
