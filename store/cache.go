package store

import (
	"container/list"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"snfs/rawsys"
)

// fdCache holds open descriptors by kernel handle, least recently used first out.
// Entries in use (refs > 0) are never closed; an entry evicted or invalidated while
// in use is closed by its last release. This is what keeps a descriptor number from
// being reused under an operation that still holds it.
type fdCache struct {
	max int
	// retire, if set, closes the descriptors of removed objects (gone entries)
	// instead of the caller (background.go).
	retire func(*entry)
	// idleWriter, if set, is told (outside mu) when an entry holding a
	// descriptor open for writing loses its last reference (idlewrite.go).
	idleWriter func()
	// evictWriter, if set, closes an evicted entry holding a descriptor
	// open for writing, after flushing it (idlewrite.go), instead of the
	// caller.
	evictWriter func(*entry)

	mu      sync.Mutex
	entries map[string]*entry // guarded by mu
	lru     *list.List        // guarded by mu; front = most recent
}

type entry struct {
	key  string
	fd   int // O_PATH (or, for files this server created, O_RDWR until idle: idlewrite.go) descriptor
	refs int // guarded by fdCache.mu
	// used: when refs last fell to 0; uses counts the references taken
	// (get, add); both guarded by fdCache.mu.
	used time.Time
	uses uint64
	gone bool
	// retire: the object was removed and holds blocks, so its last close, which
	// frees them, goes to fdCache.retire.
	retire bool
	// large: the object was removed with more than largeFree bytes allocated,
	// so its last close frees many blocks and must not be a raw system call.
	large bool
	elem  *list.Element

	ioMu sync.Mutex
	io   int // read-write (or read-only) descriptor for data and fsync; -1 until opened
	ioRW bool
	// ioFallback: io is a regular file's read-only descriptor, opened
	// because O_RDWR was refused (OpenIO); ioOld: such descriptors a
	// write replaced (writeIO), closed with the entry. Guarded by ioMu.
	ioFallback bool
	ioOld      []int
	// appendMu: one Append at a time writes and reads io's file offset back
	// (io.go); it guards the reservations below.
	appendMu sync.Mutex
	// The Appends with a before that reserved an offset and have not written
	// yet (io.go: appendReserve): they write in the order they reserved.
	appendCond    *sync.Cond // on appendMu; made by the first reservation
	appendEnd     int64      // the end of the last reservation; guarded by appendMu
	appendPending int        // reservations not yet written; guarded by appendMu
	appendNext    uint64     // the next reservation's number; guarded by appendMu
	appendTurn    uint64     // the number whose write is next; guarded by appendMu
}

func newFDCache(max int) *fdCache {
	return &fdCache{max: max, entries: map[string]*entry{}, lru: list.New()}
}

// get returns the entry for key with a reference held, or nil.
func (c *fdCache) get(key string) *entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[key]
	if e != nil {
		e.refs++
		e.uses++
		c.lru.MoveToFront(e.elem)
	}
	return e
}

// add inserts fd for key (taking ownership) and returns the entry with a reference
// held. If another goroutine added the key first, fd is closed and theirs returned.
func (c *fdCache) add(key string, fd, io int) *entry {
	c.mu.Lock()
	if e := c.entries[key]; e != nil {
		e.refs++
		e.uses++
		c.lru.MoveToFront(e.elem)
		c.mu.Unlock()
		rawsys.Close(fd)
		if io >= 0 && io != fd {
			rawsys.Close(io)
		}
		return e
	}
	e := &entry{key: key, fd: fd, io: io, ioRW: io >= 0, refs: 1}
	e.elem = c.lru.PushFront(e)
	c.entries[key] = e
	var victims, writers []*entry
	for el := c.lru.Back(); c.lru.Len() > c.max && el != nil; {
		prev := el.Prev()
		v := el.Value.(*entry)
		if v.refs == 0 {
			c.lru.Remove(el)
			delete(c.entries, v.key)
			if v.writableLocked() && c.evictWriter != nil {
				writers = append(writers, v)
			} else {
				victims = append(victims, v)
			}
		}
		el = prev
	}
	c.mu.Unlock()
	for _, v := range victims {
		v.close()
	}
	for _, v := range writers {
		c.evictWriter(v)
	}
	return e
}

func (c *fdCache) release(e *entry) {
	c.mu.Lock()
	e.refs--
	closeIt := e.refs == 0 && e.gone
	writer := false
	if e.refs == 0 && !e.gone && e.writableLocked() {
		// No holder left to change io (OpenIO runs with a reference).
		e.used = time.Now()
		writer = true
	}
	c.mu.Unlock()
	if closeIt {
		c.closeGone(e)
	}
	if writer && c.idleWriter != nil {
		c.idleWriter()
	}
}

// invalidate drops key from the cache (the object was removed); its descriptors
// are closed now, or by the last user; by fdCache.retire if retire is set. large
// says the object holds more than largeFree bytes (entry.large).
func (c *fdCache) invalidate(key string, retire, large bool) {
	c.mu.Lock()
	e := c.entries[key]
	if e == nil {
		c.mu.Unlock()
		return
	}
	delete(c.entries, key)
	c.lru.Remove(e.elem)
	e.gone, e.retire, e.large = true, retire, large
	closeIt := e.refs == 0
	c.mu.Unlock()
	if closeIt {
		c.closeGone(e)
	}
}

func (c *fdCache) closeGone(e *entry) {
	if e.retire && c.retire != nil {
		c.retire(e)
		return
	}
	e.close()
}

// dropDev drops every entry whose object is on device dev (a removed export's
// file system, which the administrator may want to unmount): each descriptor
// is closed now, or by its last user.
func (c *fdCache) dropDev(dev uint64) {
	c.mu.Lock()
	held := make([]*entry, 0, len(c.entries))
	for _, e := range c.entries {
		e.refs++
		held = append(held, e)
	}
	c.mu.Unlock()
	for _, e := range held {
		var st unix.Stat_t
		if rawsys.Fstat(e.fd, &st) == nil && uint64(st.Dev) == dev {
			c.mu.Lock()
			if c.entries[e.key] == e {
				delete(c.entries, e.key)
				c.lru.Remove(e.elem)
				e.gone = true
			}
			c.mu.Unlock()
		}
		c.release(e)
	}
}

// closeAll closes every idle entry (shutdown).
func (c *fdCache) closeAll() {
	c.mu.Lock()
	var victims []*entry
	for k, e := range c.entries {
		delete(c.entries, k)
		c.lru.Remove(e.elem)
		e.gone = true
		if e.refs == 0 {
			victims = append(victims, e)
		}
	}
	c.mu.Unlock()
	for _, v := range victims {
		v.close()
	}
}

// largeFree is the allocation above which freeing a removed object is left to a
// close on the scheduler's syscall path (rawsys).
const largeFree = 1 << 20

func (e *entry) close() {
	closeFD := rawsys.Close
	if e.large {
		closeFD = unix.Close
	}
	if e.io >= 0 && e.io != e.fd {
		closeFD(e.io)
	}
	for _, fd := range e.ioOld {
		closeFD(fd)
	}
	closeFD(e.fd)
}
