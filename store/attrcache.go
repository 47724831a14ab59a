package store

import (
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"snfs/rawsys"
)

// The attribute cache serves READDIRPLUS.
//
// Listing a directory with attributes costs one fstatat(2) per entry, and on a
// large directory the kernel's path walk for each name is most of the call (as
// ganesha avoids with its metadata cache). The cache keeps, per inode, the handle
// and attributes of directory entries that were listed, so that listing the
// directory again costs only getdents(2).
//
// Keys and freshness. Entries are found by (device, inode number), which the
// listing has from getdents itself, so the name-to-inode binding is always the
// file system's current one; only the inode's attributes and handle come from the
// cache, and only while the directory it was listed in keeps the ctime it had
// then (any entry added, removed or renamed there changes it), so a name that
// another process removed and made again is never given the old object's handle,
// even before that process's events arrive. They are dropped:
//   - synchronously, by this package's own operations, for every object they may
//     change (the file written or truncated or whose attributes were set, the
//     directories whose entries changed, the object removed, linked or renamed);
//   - for changes made by anyone else on the server machine, from fanotify(7)
//     events of a file-system-wide mark (notify.go), which report the changed
//     object's kernel handle; every listing applies the events queued when it
//     begins, so it sees every change completed before it;
//   - after TTL in any case, for the changes that no event reports (a write
//     through a shared mapping updates mtime silently; reads update atime).
//     A listing that is served an entry past half its TTL has it read again in
//     the background after the reply (ChildAttrs.Done, background.go), so a
//     directory listed at least once per half TTL never falls back to one
//     fstatat per entry, while no entry is ever served older than TTL;
//   - all at once when the event queue overflows or the cache is full.
//
// A fill can race an invalidation: the entry is read (fstatat), the object then
// changes and its invalidation runs before the entry is installed, finding nothing
// to drop. So every invalidation that finds nothing while fills are in flight
// bumps an epoch, and a fill installs its entry only if the epoch is the one it
// started under (JuiceFS's generation rule: a racing fill cannot install stale
// data).
//
// The cache is used only while an export's file system has a working change
// notifier; otherwise every entry is read from the file system, as before.

// DefaultAttrTTL bounds how long a cached entry is served without an event.
const DefaultAttrTTL = 60 * time.Second

type attrKey struct{ dev, ino uint64 }

type attrEntry struct {
	export uint32 // fh's export: two exports may share a file system
	// The directory it was listed in, and that directory's ctime then: a hit
	// needs both unchanged (see get).
	dirIno   uint64
	dirCtime unix.Timespec
	key      string // kernel handle (kernelKey)
	fh       []byte
	st       unix.Stat_t
	at       time.Time // when it was read
}

type attrCache struct {
	ttl time.Duration
	max int
	now func() time.Time
	off atomic.Bool // set when the notifier stops: nothing is served or filled

	mu      sync.Mutex
	byIno   map[attrKey]*attrEntry // guarded by mu
	byKey   map[string]attrKey     // guarded by mu
	filling int                    // guarded by mu: fills in flight
	epoch   uint64                 // guarded by mu
	hits    uint64                 // guarded by mu
	misses  uint64                 // guarded by mu
}

func newAttrCache(max int, ttl time.Duration, now func() time.Time) *attrCache {
	return &attrCache{ttl: ttl, max: max, now: now,
		byIno: map[attrKey]*attrEntry{}, byKey: map[string]attrKey{}}
}

// get returns the cached handle and attributes of (dev, ino).
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
// have refreshed (ChildAttrs.Done).
func (c *attrCache) get(export uint32, dir *unix.Stat_t, ino uint64, now time.Time) (fh []byte, st unix.Stat_t, ok, aging bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.byIno[attrKey{dir.Dev, ino}]
	if e == nil || c.off.Load() || e.export != export || now.Sub(e.at) > c.ttl ||
		e.dirIno != dir.Ino || e.dirCtime != dir.Ctim {
		c.misses++
		return nil, unix.Stat_t{}, false, false
	}
	c.hits++
	return e.fh[:len(e.fh):len(e.fh)], e.st, true, now.Sub(e.at) > c.ttl/2
}

// peek returns the entry of (dev, ino) if it is still the one listed in dir (as
// it was then) for export, whatever its age: the pointer, for replace, and a copy.
func (c *attrCache) peek(export uint32, dir *unix.Stat_t, ino uint64) (*attrEntry, attrEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.byIno[attrKey{dir.Dev, ino}]
	if e == nil || c.off.Load() || e.export != export || e.dirIno != dir.Ino || e.dirCtime != dir.Ctim {
		return nil, attrEntry{}, false
	}
	return e, *e, true
}

// replace installs e (read again for the same object) in place of old, if old
// is still there: every invalidation that concerns the object removes its
// entry, so finding old unchanged means none came since it was peeked, and
// e is no staler than old was. Unlike a fill, a refresh knows its entry, so it
// needs no epoch and is not failed by invalidations of other objects.
func (c *attrCache) replace(old, e *attrEntry) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	k := attrKey{e.st.Dev, e.st.Ino}
	if c.off.Load() || c.byIno[k] != old {
		return
	}
	e.at = now
	c.byIno[k] = e
}

// begin starts a fill; the epoch it returns goes to end.
func (c *attrCache) begin() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.filling++
	return c.epoch
}

// end finishes a fill begun under epoch, installing e (if not nil) unless an
// invalidation may have concerned it meanwhile. e.at is set to now.
func (c *attrCache) end(epoch uint64, e *attrEntry) {
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
	k := attrKey{e.st.Dev, e.st.Ino}
	if old := c.byIno[k]; old != nil {
		delete(c.byKey, old.key)
	}
	e.at = now
	c.byIno[k] = e
	c.byKey[e.key] = k
}

// invalidateKey drops the entry of the object with kernel handle key.
func (c *attrCache) invalidateKey(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if k, ok := c.byKey[key]; ok {
		delete(c.byKey, key)
		delete(c.byIno, k)
	}
	c.raceLocked()
}

// invalidateIno drops the entry of (dev, ino).
func (c *attrCache) invalidateIno(dev, ino uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := attrKey{dev, ino}
	if e := c.byIno[k]; e != nil {
		delete(c.byKey, e.key)
		delete(c.byIno, k)
	}
	c.raceLocked()
}

// raceLocked fails the fills in flight: the object just invalidated may be one
// of them, read before the change and not yet installed.
func (c *attrCache) raceLocked() {
	if c.filling > 0 {
		c.epoch++
	}
}

// stop turns the cache off for good (no notifier: nothing would drop entries);
// get then misses and end installs nothing, whatever the maps still hold.
func (c *attrCache) stop() { c.off.Store(true) }

// invalidateAll drops every entry (event queue overflow, notifier failure).
func (c *attrCache) invalidateAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clearLocked()
}

func (c *attrCache) clearLocked() {
	c.byIno = map[attrKey]*attrEntry{}
	c.byKey = map[string]attrKey{}
	c.epoch++
}

// AttrCacheStats reports the attribute cache's hits and misses so far.
func (s *Store) AttrCacheStats() (hits, misses uint64) {
	s.attrs.mu.Lock()
	defer s.attrs.mu.Unlock()
	return s.attrs.hits, s.attrs.misses
}

// changed drops what the cache holds for nodes and for the objects with the
// given kernel handles: called by every operation of this package that changes
// them, before it returns.
func (s *Store) changed(nodes []*Node, keys ...string) {
	for _, n := range nodes {
		if n != nil {
			s.attrs.invalidateIno(n.Stat.Dev, n.Stat.Ino)
			if n.Stat.Mode&unix.S_IFMT == unix.S_IFDIR {
				s.handles.forgetDir(n.Key())
			}
		}
	}
	for _, k := range keys {
		if k != "" {
			s.forget(k)
		}
	}
}

// forgetAll empties both caches: events were lost.
func (s *Store) forgetAll() {
	s.attrs.invalidateAll()
	s.handles.clear()
}

// forget drops what the caches hold for the object with kernel handle key
// (for a directory, its entries' handles too): the notifier's callback.
func (s *Store) forget(key string) {
	s.attrs.invalidateKey(key)
	s.handles.forgetDir(key)
}

// ChildAttrs reads the handles and attributes of a listing's entries.
type ChildAttrs struct {
	s          *Store
	dir        *Node
	searchable int8 // 0 unknown, 1 yes, -1 no: the caller may search dir
	now        time.Time

	Hits, Misses int // entries served from the cache, and read from the file system

	aging []DirEntry // served past half their lifetime: refreshed by Done
}

// Done ends the listing call: the entries it served past half their lifetime are
// read again in the background, after the reply, so that the next listing finds
// them fresh instead of expired. It never delays this call; if the background
// queue is full, they are simply left to expire.
func (c *ChildAttrs) Done() {
	if len(c.aging) == 0 {
		return
	}
	s, dir, ents := c.s, c.dir, c.aging
	c.aging = nil
	ent := s.cache.get(dir.Key()) // the directory's descriptor stays open for the job
	if ent == nil {
		return
	}
	export, dst := dir.Export.ID, dir.Stat
	if !s.bg.later(func() { s.refreshAttrs(ent, export, &dst, ents) }) {
		s.cache.release(ent)
	}
}

// refreshAttrs reads again the attributes of ents, listed in the directory open as
// ent (whose attributes were dst then), and installs them if the cached entry is
// still the one listed there and nothing invalidated it meanwhile (replace). It runs
// as the server (root): whoever is served the entries later is checked for
// search permission on the directory then.
func (s *Store) refreshAttrs(ent *entry, export uint32, dst *unix.Stat_t, ents []DirEntry) {
	defer s.cache.release(ent)
	for _, de := range ents {
		old, cur, ok := s.attrs.peek(export, dst, de.Ino)
		if !ok {
			continue
		}
		var st unix.Stat_t
		if rawsys.Fstatat(ent.fd, de.Name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Ino == cur.st.Ino && st.Dev == cur.st.Dev {
			e := cur
			e.st = st
			s.attrs.replace(old, &e)
		}
	}
}

// ChildAttrs returns a reader of dir's entries' attributes, for one call, inside
// As (it checks the caller's permissions).
func (s *Store) ChildAttrs(dir *Node) *ChildAttrs {
	if dir.Export.notified {
		s.notify.drain() // every change completed before this call is applied
	}
	return &ChildAttrs{s: s, dir: dir, now: s.attrs.now()}
}

// Get returns the handle and attributes of the entry de of the directory, as
// Lookup would, from the attribute cache when it holds them.
func (c *ChildAttrs) Get(de DirEntry) ([]byte, unix.Stat_t, error) {
	s, dir := c.s, c.dir
	if !dir.Export.notified || de.Name == "." || de.Name == ".." {
		return s.Lookup(dir, de.Name)
	}
	if c.searchable == 0 {
		// Reading an entry's attributes needs search permission on the
		// directory, which the cache must not skip.
		c.searchable = -1
		if rawsys.Faccessat2(dir.FD(), "", unix.X_OK, unix.AT_EACCESS|unix.AT_EMPTY_PATH) == nil {
			c.searchable = 1
		}
	}
	if c.searchable > 0 {
		if fh, st, ok, aging := s.attrs.get(dir.Export.ID, &dir.Stat, de.Ino, c.now); ok {
			c.Hits++
			if aging {
				c.aging = append(c.aging, de)
			}
			return fh, st, nil
		}
	}
	c.Misses++
	epoch := s.attrs.begin()
	fh, st, err := s.Lookup(dir, de.Name)
	var e *attrEntry
	if err == nil && c.searchable > 0 && st.Ino == de.Ino {
		if key, ok := handleKey(fh); ok {
			e = &attrEntry{export: dir.Export.ID, dirIno: dir.Stat.Ino, dirCtime: dir.Stat.Ctim, key: key, fh: fh, st: st}
		}
	}
	s.attrs.end(epoch, e)
	return fh, st, err
}

// handleKey returns the kernel key inside a handle this package made.
func handleKey(fh []byte) (string, bool) {
	if len(fh) < 6 {
		return "", false
	}
	n := int(fh[5])
	if len(fh) < 6+n {
		return "", false
	}
	return string(fh[6 : 6+n]), true
}
