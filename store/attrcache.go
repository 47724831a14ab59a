package store

import (
	"encoding/binary"
	"time"

	"golang.org/x/sys/unix"

	"snfs/rawsys"
	"snfs/store/attrcache"
)

// The store's side of the attribute cache (package attrcache): READDIRPLUS
// reads entries through ChildAttrs, which fills the cache and is served from it;
// every operation of this package drops what it may have changed (changed); the
// notifier's reports of everyone else's changes drop the objects they name
// (notifyTarget); entries served past half their lifetime are read again in the
// background after the reply (ChildAttrs.Done, background.go).
//
// The cache is used only while an export's file system has a working change
// notifier; otherwise every entry is read from the file system, as before.

// DefaultAttrTTL bounds how long a cached entry is served without an event.
const DefaultAttrTTL = attrcache.DefaultTTL

// attrCacheMax bounds the entries the attribute cache holds.
const attrCacheMax = 1 << 18

// attrClock is the attribute cache's clock, read by Open; tests set it before
// Open to age entries without waiting.
var attrClock = time.Now

// AttrCacheStats reports the attribute cache's hits and misses so far.
func (s *Store) AttrCacheStats() (hits, misses uint64) {
	return s.attrs.Stats()
}

// changed drops what the cache holds for nodes and for the objects with the
// given kernel handles: called by every operation of this package that changes
// them, before it returns.
func (s *Store) changed(nodes []*Node, keys ...string) {
	for _, n := range nodes {
		if n != nil {
			s.attrs.InvalidateIno(n.Stat.Dev, n.Stat.Ino)
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
	s.attrs.InvalidateAll()
	s.handles.clear()
}

// forget drops what the caches hold for the object with kernel handle key
// (for a directory, its entries' handles too).
func (s *Store) forget(key string) {
	s.attrs.InvalidateKey(key)
	s.handles.forgetDir(key)
}

// notifyTarget applies the change notifier's reports to the store's caches.
type notifyTarget struct{ s *Store }

func (t notifyTarget) Changed(typ uint32, h []byte, self bool) {
	if len(h) > maxKernelFH {
		return // names nothing this package caches (AddExport refuses such handles)
	}
	key := make([]byte, 4+len(h)) // kernelKey's layout
	binary.BigEndian.PutUint32(key, typ)
	copy(key[4:], h)
	t.s.forget(string(key))
	if self {
		return
	}
	if fn := t.s.foreign.Load(); fn != nil {
		t.s.mu.RLock()
		for _, e := range t.s.exports {
			if e.notified {
				(*fn)(t.s.makeHandle(e, string(key)))
			}
		}
		t.s.mu.RUnlock()
	}
}

// OnForeignChange has fn told of every change that another process on this
// machine makes to an object of a watched export (a local process writing in
// the exported tree), as the object's handle in each such export (an object of
// one export's file system may be named in another: the handle names nothing
// there). Changes this process makes are not reported. A nil handle means that
// anything may have changed: events were lost, or the notifier stopped (no more
// changes will be reported). fn is called from the notifier's drain: it must
// be quick, must not block and must not drain. nil stops the reports. Without
// a working notifier nothing is reported.
func (s *Store) OnForeignChange(fn func(fh []byte)) {
	if fn == nil {
		s.foreign.Store(nil)
		return
	}
	s.foreign.Store(&fn)
}

// DrainChanges applies every change notification queued now (OnForeignChange
// is told of each before it returns): a request that must see every change
// completed before it began (an OPEN) drains first.
func (s *Store) DrainChanges() {
	if s.notify != nil {
		s.notify.Drain()
	}
}

func (t notifyTarget) Lost() {
	t.s.forgetAll()
	t.s.foreignAll()
}

// Stopped turns the attribute cache off: nothing would drop its entries.
func (t notifyTarget) Stopped() {
	t.s.attrs.Stop()
	t.s.forgetAll()
	t.s.foreignAll()
}

// ChangesLost is how many times the change notifier reported that anything
// may have changed (events lost, as when its queue overflows on a busy file
// system, or the notifier stopped): each time OnForeignChange's function was
// told so.
func (s *Store) ChangesLost() uint64 { return s.changesLost.Load() }

// foreignAll tells OnForeignChange's function that anything may have changed.
func (s *Store) foreignAll() {
	s.changesLost.Add(1)
	if fn := s.foreign.Load(); fn != nil {
		(*fn)(nil)
	}
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
		e, ok := s.attrs.Peek(export, dst, de.Ino)
		if !ok {
			continue
		}
		var st unix.Stat_t
		if rawsys.Fstatat(ent.fd, de.Name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Ino == e.St.Ino && st.Dev == e.St.Dev {
			e.St = st
			s.attrs.Replace(e)
		}
	}
}

// ChildAttrs returns a reader of dir's entries' attributes, for one call, inside
// As (it checks the caller's permissions).
func (s *Store) ChildAttrs(dir *Node) *ChildAttrs {
	if dir.Export.notified {
		s.notify.Drain() // every change completed before this call is applied
	}
	return &ChildAttrs{s: s, dir: dir, now: s.attrs.Now()}
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
		if fh, st, ok, aging := s.attrs.Get(dir.Export.ID, &dir.Stat, de.Ino, c.now); ok {
			c.Hits++
			if aging {
				c.aging = append(c.aging, de)
			}
			return fh, st, nil
		}
	}
	c.Misses++
	epoch := s.attrs.BeginFill()
	fh, st, err := s.Lookup(dir, de.Name)
	var e *attrcache.Entry
	if err == nil && c.searchable > 0 && st.Ino == de.Ino {
		if key, ok := handleKey(fh); ok {
			e = &attrcache.Entry{Export: dir.Export.ID, DirIno: dir.Stat.Ino, DirCtime: dir.Stat.Ctim, Key: key, FH: fh, St: st}
		}
	}
	s.attrs.EndFill(epoch, e)
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
