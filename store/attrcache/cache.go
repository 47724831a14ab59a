package attrcache

import (
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultTTL bounds how long a cached entry is served without an event.
const DefaultTTL = 60 * time.Second

type inoKey struct{ dev, ino uint64 }

// Entry is what the cache holds for one object: its handle and attributes, as read
// through one directory.
type Entry struct {
	Export uint32 // FH's export: two exports may share a file system
	// The directory it was listed in, and that directory's ctime then: a hit
	// needs both unchanged (see Get).
	DirIno   uint64
	DirCtime unix.Timespec
	Key      string // the object's kernel handle, as InvalidateKey is given it
	FH       []byte
	St       unix.Stat_t

	at   time.Time // when it was read: set by EndFill and Replace
	orig *Entry    // in a copy from Peek: the cached entry it was copied from
}

// At reports when the entry's attributes were read (the cache's clock).
func (e *Entry) At() time.Time { return e.at }

// Cache maps (device, inode number) to Entry. Safe for concurrent use.
type Cache struct {
	ttl time.Duration
	max int
	now func() time.Time
	off atomic.Bool // set by Stop: nothing is served or filled

	mu      sync.Mutex
	byIno   map[inoKey]*Entry // guarded by mu
	byKey   map[string]inoKey // guarded by mu
	filling int               // guarded by mu: fills in flight
	epoch   uint64            // guarded by mu
	hits    uint64            // guarded by mu
	misses  uint64            // guarded by mu
}

// New returns a cache of at most max entries, each served for at most ttl after
// it was read, with now as its clock.
func New(max int, ttl time.Duration, now func() time.Time) *Cache {
	return &Cache{ttl: ttl, max: max, now: now,
		byIno: map[inoKey]*Entry{}, byKey: map[string]inoKey{}}
}

// Now reads the cache's clock: one reading serves a whole listing (Get's now).
func (c *Cache) Now() time.Time { return c.now() }

// Stats reports the hits and misses of Get so far.
func (c *Cache) Stats() (hits, misses uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits, c.misses
}

// Get returns the cached handle and attributes of (dev, ino).
// now is the caller's idea of the time (one reading serves a whole listing).
// dir is the directory being listed, as just read (fstat).
//
// The entry must come from the same directory with the same ctime. Entries
// added, removed or renamed there change it, which covers the one change whose
// event may come too late to be harmless: a name removed and made again by
// another process, whose new file may reuse the inode number (a new
// generation), where the cached handle would be stale rather than just the
// attributes old.
//
// aging reports a hit on an entry past half its lifetime, which the caller should
// have read again (Peek, Replace).
func (c *Cache) Get(export uint32, dir *unix.Stat_t, ino uint64, now time.Time) (fh []byte, st unix.Stat_t, ok, aging bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.byIno[inoKey{dir.Dev, ino}]
	if e == nil || c.off.Load() || e.Export != export || now.Sub(e.at) > c.ttl ||
		e.DirIno != dir.Ino || e.DirCtime != dir.Ctim {
		c.misses++
		return nil, unix.Stat_t{}, false, false
	}
	c.hits++
	return e.FH[:len(e.FH):len(e.FH)], e.St, true, now.Sub(e.at) > c.ttl/2
}

// Peek returns a copy of the entry of (dev, ino) if it is still the one listed in
// dir (as it was then) for export, whatever its age. The copy, with its
// attributes read again, goes to Replace.
func (c *Cache) Peek(export uint32, dir *unix.Stat_t, ino uint64) (Entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.byIno[inoKey{dir.Dev, ino}]
	if e == nil || c.off.Load() || e.Export != export || e.DirIno != dir.Ino || e.DirCtime != dir.Ctim {
		return Entry{}, false
	}
	cp := *e
	cp.orig = e
	return cp, true
}

// Replace installs e, a copy from Peek read again for the same object, in place
// of the entry it was copied from, if that is still there: every invalidation
// that concerns the object removes its entry, so finding it unchanged means none
// came since the Peek, and e is no staler than the entry was. Unlike a fill, a
// refresh knows its entry, so it needs no epoch and is not failed by
// invalidations of other objects.
func (c *Cache) Replace(e Entry) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	k := inoKey{e.St.Dev, e.St.Ino}
	if c.off.Load() || e.orig == nil || c.byIno[k] != e.orig {
		return
	}
	e.orig = nil
	e.at = now
	c.byIno[k] = &e
}

// BeginFill starts a fill: the caller is about to read an entry from the file
// system. The epoch it returns goes to EndFill.
//
// A fill can race an invalidation: the entry is read (fstatat), the object then
// changes and its invalidation runs before the entry is installed, finding nothing
// to drop. So every invalidation while fills are in flight bumps the epoch, and a
// fill installs its entry only if the epoch is the one it started under.
func (c *Cache) BeginFill() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.filling++
	return c.epoch
}

// EndFill finishes a fill begun under epoch, installing e (if not nil; the cache
// keeps it) unless an invalidation may have concerned it meanwhile.
func (c *Cache) EndFill(epoch uint64, e *Entry) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.filling--
	if e == nil || epoch != c.epoch || c.off.Load() {
		return
	}
	if len(c.byIno) >= c.max {
		c.clearLocked()
	}
	k := inoKey{e.St.Dev, e.St.Ino}
	if old := c.byIno[k]; old != nil {
		delete(c.byKey, old.Key)
	}
	e.at = now
	e.orig = nil
	c.byIno[k] = e
	c.byKey[e.Key] = k
}

// InvalidateKey drops the entry of the object with kernel handle key.
func (c *Cache) InvalidateKey(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if k, ok := c.byKey[key]; ok {
		delete(c.byKey, key)
		delete(c.byIno, k)
	}
	c.raceLocked()
}

// InvalidateIno drops the entry of (dev, ino).
func (c *Cache) InvalidateIno(dev, ino uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := inoKey{dev, ino}
	if e := c.byIno[k]; e != nil {
		delete(c.byKey, e.Key)
		delete(c.byIno, k)
	}
	c.raceLocked()
}

// raceLocked fails the fills in flight: the object just invalidated may be one
// of them, read before the change and not yet installed.
func (c *Cache) raceLocked() {
	if c.filling > 0 {
		c.epoch++
	}
}

// Stop turns the cache off for good (no notifier: nothing would drop entries);
// Get then misses and nothing is installed, whatever the maps still hold.
func (c *Cache) Stop() { c.off.Store(true) }

// InvalidateAll drops every entry (event queue overflow, notifier failure).
func (c *Cache) InvalidateAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clearLocked()
}

func (c *Cache) clearLocked() {
	c.byIno = map[inoKey]*Entry{}
	c.byKey = map[string]inoKey{}
	c.epoch++
}
