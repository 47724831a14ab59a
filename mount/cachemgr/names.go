package cachemgr

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/sunrpc"
)

// snfs mode's name cache (docs/protocol.md section 20, docs/mount.md "The
// name cache"): directories listed with LISTDIR under a directory promise.
// While a directory's promise holds, its names (a lookup's hit and its
// miss), its listing and the attributes of the objects it lists are answered
// here without a call. The server breaks the promise (a CB_CALLBACK
// CB_INVALIDATE with the directory's handle, dirCallback) before another
// client's change of the directory is acknowledged; this mount's own changes
// are applied to the cache as they end (DirChanged).
//
// The kernel is told to keep no name of a cached directory (entry timeout
// 0: each path walk asks the mount, which answers from here), so a break
// needs no notification of names (the kernel's dentry invalidation takes the
// directory's lock, which a request of the kernel's may hold while it waits
// for a change the server holds behind this very break). The kernel keeps
// the attributes it is given at most as long as the lease (leaseWatch), and
// a break or an eviction drops them (attribute notifications take no
// directory lock); its listing pages are dropped too, and the next opendir
// after a fill is answered without FOPEN_KEEP_CACHE.

const (
	// maxCachedDirs bounds the directories cached (LRU; the evicted one's
	// promise is given back with DIR_RELEASE).
	maxCachedDirs = 1024
	// fillOnLookupMax: a lookup in a directory not cached lists it (to
	// cache it) only if its size attribute is at most this; a larger one
	// is looked up name by name, as in nfs mode.
	fillOnLookupMax = 64 << 10
	// noPromiseRetry: after a LISTDIR that gave no promise, lookups of that
	// directory go the core's way for this long.
	noPromiseRetry = 5 * time.Second
	// listDirCount and listMaxCount are each LISTDIR page's dircount and
	// maxcount (as the core's READDIRPLUS).
	listDirCount, listMaxCount = 32768, 131072
)

// nameCache is the mount's cache of promised directories.
type nameCache struct {
	sn *snfsFS

	// mu guards what follows. A leaf with respect to inodes: no Inode's
	// Mu is taken while it is held (it may be taken with one held:
	// attrTTLLocked).
	mu sync.Mutex
	// off: the server answered LISTDIR with PROC_UNAVAIL (section 20.1).
	off  bool
	dirs map[string]*cdir // by the directory's handle
	lru  list.List        // of *cdir, the most recently used in front
	// fills in flight, by directory handle: a break (or this mount's own
	// change) of the directory meanwhile marks them, and they install
	// nothing (the generation rule).
	fills map[string][]*fillTok
	// covered: the cached directory whose listing covers an object's
	// attributes, by the object's handle.
	covered map[string]*cdir
	// noPromise: directories whose last LISTDIR gave no promise, and when.
	noPromise map[string]time.Time
	// regs is the lease's registration count the cache belongs to, lost
	// the session's count of lost connections: another REGISTER (a new
	// connection, a server restart) or a lost connection empties it.
	regs, lost uint64
	// Promises to give back (DIR_RELEASE) and those being given back.
	queue     []nfs3.FH
	releasing map[string]int
	releaser  bool // a release goroutine runs (wg)
	closed    bool
	wg        sync.WaitGroup

	// offl: the last listings of directories whose promise ended with the
	// connection or the lease, served only while the mount is offline
	// (disconnectednames.go); offLRU bounds them as lru does dirs.
	offl    map[string]*cdir
	offLRU  list.List
	offKept time.Time // when the latest copy was kept
	// goingOff: the copies were made for a disconnection (wentOffline),
	// until the mount is back online (backOnline): a listing filled
	// meanwhile is not installed (it would drop its directory's copy), nor
	// do the copies go at an answer (connectedLocked).
	goingOff bool

	stats nameStats

	// kept: directories whose names the kernel may keep (permitnames.go);
	// provGiven: names of provisional objects were given since the
	// kernel's names were last dropped.
	kept      map[string]bool
	provGiven bool

	// afterList, set only by tests, runs when a fill's last LISTDIR
	// reply is in, before the listing is installed (a break racing it).
	afterList testHook
}

// nameStats counts the name cache's work: lookups answered from a listing
// (Hits) or not (Misses), listings made under a promise (Fills), promises
// broken by the server (Breaks), listings dropped for room (Evictions),
// promises given back (Releases) and renewed (Renewals).
type nameStats struct {
	Hits, Misses, Fills, Breaks, Evictions, Releases, Renewals uint64
	// CallbackWaits: listings not used while callbacks were being served.
	CallbackWaits uint64
}

// cdir is one cached directory.
type cdir struct {
	key string
	fh  nfs3.FH
	ino *vfs.Inode // the directory's inode when it was listed: another one for its handle is another listing
	// modGen is ino.ModGen as the listing began (or as the latest own
	// change was applied): a change of ino's attributes that did not go
	// through DirChanged makes the listing stale.
	modGen uint64
	filled time.Time      // when the listing was installed (debug logs)
	ents   []cent         // in listing order ("." and ".." included)
	index  map[string]int // name -> its place in ents
	gone   int            // ents removed (their name ""), compacted at half
	by     map[string]bool
	elem   *list.Element
	// stale: an own change whose outcome is not known; the next use lists
	// again (the promise is still held).
	stale  bool
	broken bool // dropped (a break, an eviction, the lease): set under mu
	// unsure: names whose own change's outcome is not known (stale); an
	// offline copy does not answer them.
	unsure  map[string]bool
	offElem *list.Element // in offLRU while an offline copy
	// offChanged: an offline copy this mount changed offline (offline.go):
	// a break does not drop it (the log's records are checked against the
	// server's names at reintegration), nor the bound.
	offChanged bool
}

// cent is one name of a cached directory.
type cent struct {
	name   string // "" once removed
	fileID uint64
	typ    nfs3.FType
	fh     nfs3.FH // nil for "." and ".."
	attr   nfs3.Fattr
	// noAttr: attr is not to be used (the object's inode was dropped
	// while its attributes were being fetched again): a lookup asks.
	noAttr bool
}

// fillTok is one fill in flight.
type fillTok struct {
	broken bool // a break, an eviction or the lease overtook it
	off    bool // the mount went offline meanwhile (wentOffline)
}

func newNameCache(sn *snfsFS) *nameCache {
	return &nameCache{sn: sn, dirs: map[string]*cdir{}, fills: map[string][]*fillTok{},
		covered: map[string]*cdir{}, noPromise: map[string]time.Time{}, releasing: map[string]int{},
		offl: map[string]*cdir{}}
}

// credKey names c for the record of who listed a directory.
func credKey(c vfs.Cred) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d:%d", c.UID, c.GID)
	for _, g := range c.Groups {
		fmt.Fprintf(&b, ",%d", g)
	}
	return b.String()
}

// leaseLocked checks the lease (section 20.4) and empties the cache when
// the registration changed; renew reports that the lease has lapsed but
// may be renewed (a NULL).
func (nc *nameCache) leaseLocked(now time.Time) (ok, renew bool) {
	lw := nc.sn.lease()
	if lw == nil {
		return false, false
	}
	regs, sent := lw.state()
	lost := nc.sn.sess.ConnectionsLost()
	if regs != nc.regs || lost != nc.lost {
		nc.dropAllLocked()
		nc.regs, nc.lost = regs, lost
	}
	cbt := nc.sn.sess.CallbackTimeout()
	if cbt <= 0 {
		return false, false
	}
	if now.Sub(sent) < cbt/2 {
		nc.connectedLocked(sent)
		return true, false
	}
	return false, true
}

// leaseLeftLocked is how much longer the lease holds (0: lapsed).
func (nc *nameCache) leaseLeftLocked(now time.Time) time.Duration {
	lw := nc.sn.lease()
	if lw == nil {
		return 0
	}
	regs, sent := lw.state()
	cbt := nc.sn.sess.CallbackTimeout()
	if regs != nc.regs || nc.sn.sess.ConnectionsLost() != nc.lost || cbt <= 0 {
		return 0
	}
	return max(0, sent.Add(cbt/2).Sub(now))
}

// usable returns dir's cached listing if it may be used now, renewing the
// lease with a NULL if it lapsed.
func (nc *nameCache) usable(ctx context.Context, dir *vfs.Inode) *cdir {
	dir.Mu.Lock()
	gen := dir.ModGen
	dir.Mu.Unlock()
	for try := 0; ; try++ {
		nc.mu.Lock()
		ok, renew := nc.leaseLocked(time.Now())
		d := nc.dirs[string(dir.FH)]
		if d == nil || nc.off {
			nc.mu.Unlock()
			return nil
		}
		if d.ino != dir || d.modGen != gen {
			d.stale = true
		}
		if d.stale {
			nc.mu.Unlock()
			return nil
		}
		if ok && nc.sn.sess.CallbacksServing() > 0 {
			// A callback read before the reply that renewed the lease
			// may be dir's break, timed out at the server already and
			// not acted on yet (a partition that healed delivers them
			// just before that reply; keptlease.go): the listing is not
			// trusted until they are served. A cost, never a risk.
			nc.stats.CallbackWaits++
			nc.mu.Unlock()
			return nil
		}
		if ok {
			nc.lru.MoveToFront(d.elem)
			nc.mu.Unlock()
			return d
		}
		nc.mu.Unlock()
		if !renew || try > 0 {
			return nil
		}
		// Idle for half the callback timeout: a NULL answered renews.
		nc.mu.Lock()
		nc.stats.Renewals++
		nc.mu.Unlock()
		if err := nc.sn.sess.Null(ctx); err != nil {
			return nil
		}
	}
}

// dropAllLocked empties the cache (a new registration, the lease's end):
// the promises still held are given back, the fills in flight install
// nothing. The kernel's attributes kept for the cached objects expire with
// the lease they were given under (attrTTLLocked).
func (nc *nameCache) dropAllLocked() {
	for _, d := range nc.dirs {
		nc.keepOfflineLocked(d) // what the mount last knew, for a disconnection
		nc.removeLocked(d)
		nc.queueLocked(d.fh)
	}
	for _, toks := range nc.fills {
		for _, t := range toks {
			t.broken = true
		}
	}
	clear(nc.noPromise)
	nc.startReleaseLocked()
}

// removeLocked drops d from the cache (not from the server).
func (nc *nameCache) removeLocked(d *cdir) {
	if d.broken {
		return
	}
	d.broken = true
	delete(nc.dirs, d.key)
	nc.lru.Remove(d.elem)
	for _, e := range d.ents {
		if e.fh != nil && nc.covered[string(e.fh)] == d {
			delete(nc.covered, string(e.fh))
		}
	}
	if nc.covered[d.key] == d {
		delete(nc.covered, d.key)
	}
}

// coveredLocked reports whether i's attributes are those a valid promise
// covers.
func (nc *nameCache) coveredLocked(i *vfs.Inode) bool {
	if nc.off {
		return false
	}
	if d := nc.dirs[string(i.FH)]; d != nil && !d.stale && d.ino == i {
		return true
	}
	d := nc.covered[string(i.FH)]
	return d != nil && !d.broken
}

// forgetLocked: i is about to be dropped (the kernel forgot it; i.Mu
// held). The attributes it has, which this mount's own changes since the
// listing (a write, a truncation: no break) made newer than the listed
// ones, replace those in the listing that covers it, for the inode a later
// lookup makes.
func (nc *nameCache) forgetLocked(i *vfs.Inode) {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	d := nc.covered[string(i.FH)]
	if d == nil || d.broken {
		return
	}
	for k := range d.ents {
		if e := &d.ents[k]; e.name != "" && string(e.fh) == string(i.FH) {
			e.attr, e.noAttr = i.Attr, i.AttrAt.IsZero()
		}
	}
}

// attrTTLLocked is the attributes' lifetime of i, not held by the file
// protocol (i.Mu held): while a promise covers them, as long as the lease
// holds (the kernel then keeps them no longer either); else nfs mode's.
func (nc *nameCache) attrTTLLocked(i *vfs.Inode) (time.Duration, bool) {
	if i.AttrAt.IsZero() {
		return 0, false
	}
	nc.mu.Lock()
	defer nc.mu.Unlock()
	if !nc.coveredLocked(i) {
		if nc.off {
			return 0, false // no promises: nfs mode's timeouts
		}
		// No promise covers them (a LISTDIR answered without one: another
		// client's write-back permit, a bound; or not listed): asked
		// again at each use, so that another client's change is seen at
		// once (and a GETATTR of a directory under another's permit
		// recalls it, docs/protocol.md 21.4), not after nfs mode's
		// attribute timeout.
		return 0, true
	}
	left := nc.leaseLeftLocked(time.Now())
	if left <= 0 {
		// A GETATTR revalidates, and its answer renews the lease.
		return 0, true
	}
	return min(left, nc.sn.cfg.CacheTTL), true
}

// RenewAttrs is vfs.Ops.RenewAttrs in snfs mode: attributes a cached
// listing covers, stale only because the lease lapsed (the mount idle for
// half the callback timeout), are made fresh by a NULL answered, as a
// lookup's are (usable), not by a GETATTR of each.
func (sn *snfsFS) RenewAttrs(ctx context.Context, i *vfs.Inode) bool {
	nc := sn.names
	if nc == nil || sn.disc.offline() || isProvFH(i.FH) {
		return false
	}
	i.Mu.Lock()
	held := stOf(i).Held() > 0 // its open's rules decide (snfsTTL)
	i.Mu.Unlock()
	if held {
		return false
	}
	nc.mu.Lock()
	_, renew := nc.leaseLocked(time.Now())
	covered := renew && nc.coveredLocked(i)
	if covered {
		nc.stats.Renewals++
	}
	nc.mu.Unlock()
	return covered && nc.sn.sess.Null(ctx) == nil
}

// entryTTLLocked is how long the kernel may keep a name of dir: not at all
// while dir is cached or about to be (a lookup lists it), so that a break
// needs no notification of names, except under the directory's write-back
// permit (keptTTLLocked, permitnames.go); nor while it is not cached
// (below); nfs mode's only when the server has no promises.
func (nc *nameCache) entryTTLLocked(dir, child *vfs.Inode) (time.Duration, bool) {
	if nc.sn.disc.offline() {
		// Served from what the mount last knew: online, the server is
		// asked again.
		return 0, true
	}
	nc.mu.Lock()
	defer nc.mu.Unlock()
	if nc.off {
		return 0, false
	}
	if _, ok := nc.dirs[string(dir.FH)]; ok {
		var fh nfs3.FH
		if child != nil {
			fh = child.FH
		}
		return nc.keptTTLOfLocked(dir.FH, fh), true // permitnames.go
	}
	// Not cached: the kernel keeps no name of it either (nfs mode's
	// timeouts would keep a name another client removed, or an ENOENT of
	// one it made): each path walk asks the mount, which asks the server
	// or lists the directory (a small one).
	return 0, true
}

// shouldFill: a lookup in dir, not cached, lists it first.
func (nc *nameCache) shouldFill(dir *vfs.Inode) bool {
	dir.Mu.Lock()
	small := dir.Attr.Size <= fillOnLookupMax && !dir.AttrAt.IsZero()
	dir.Mu.Unlock()
	nc.mu.Lock()
	defer nc.mu.Unlock()
	if nc.off || nc.closed || !small {
		return false
	}
	t, ok := nc.noPromise[string(dir.FH)]
	return !ok || time.Since(t) >= noPromiseRetry
}

// unpromised: dir's latest LISTDIR gave no promise, lately (or the server
// has none): the core lists it.
func (nc *nameCache) unpromised(dir *vfs.Inode) bool {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	t, ok := nc.noPromise[string(dir.FH)]
	return nc.off || ok && time.Since(t) < noPromiseRetry
}

// errNoPromises: the server has no directory promises (LISTDIR is
// PROC_UNAVAIL): the core lists and looks up.
var errNoPromises = errors.New("snfs: the server has no directory promises")

// fill lists dir with LISTDIR as c and caches the listing if every page
// was promised, no break of dir came meanwhile and the lease holds. It
// returns the listing (cached or not).
func (nc *nameCache) fill(ctx context.Context, dir *vfs.Inode, c vfs.Cred) ([]cent, error) {
	fs := nc.sn.FS
	key := string(dir.FH)
	if isProvFH(dir.FH) {
		return nil, errProvisional
	}
	tok := &fillTok{}
	nc.mu.Lock()
	if nc.off {
		nc.mu.Unlock()
		return nil, errNoPromises
	}
	// A release of dir's promise in flight may reach the server after this
	// LISTDIR: the listing could be used, not cached. One queued is not
	// sent.
	if k := indexFH(nc.queue, dir.FH); k >= 0 {
		nc.queue = append(nc.queue[:k], nc.queue[k+1:]...)
	}
	if nc.releasing[key] > 0 {
		tok.broken = true
	}
	nc.fills[key] = append(nc.fills[key], tok)
	nc.stats.Fills++
	nc.mu.Unlock()
	defer func() {
		nc.mu.Lock()
		toks := nc.fills[key]
		for k, t := range toks {
			if t == tok {
				toks = append(toks[:k], toks[k+1:]...)
				break
			}
		}
		if len(toks) == 0 {
			delete(nc.fills, key)
		} else {
			nc.fills[key] = toks
		}
		nc.mu.Unlock()
	}()

	dir.Mu.Lock()
	modGen := dir.ModGen
	dir.Mu.Unlock()
	start := fs.AttrStart()
	as := fs.Client(c)
	var ents []cent
	promised := true
	var cookie uint64
	var verf [nfs3.CookieVerfSize]byte
	for {
		res, err := nc.sn.sess.ListDirAs(ctx, as, dir.FH, cookie, verf, listDirCount, listMaxCount)
		var re *sunrpc.RPCError
		if errors.As(err, &re) && re.Accept == sunrpc.ProcUnavail {
			nc.mu.Lock()
			nc.off = true
			nc.mu.Unlock()
			fs.Logger().Info("the server has no directory promises (LISTDIR): names are not cached")
			return nil, errNoPromises
		}
		if err != nil {
			if ctx.Err() == nil {
				// Refused (a user who may look up but not list, say): the
				// core's way for a while, names kept by the kernel as in
				// nfs mode.
				nc.mu.Lock()
				nc.notPromisedLocked(key)
				nc.mu.Unlock()
			}
			return nil, err
		}
		promised = promised && res.Promised
		if a := res.Dir.DirAttr; a != nil {
			dir.Mu.Lock()
			dir.PostOpLocked(a, start, time.Now())
			dir.Mu.Unlock()
		}
		for _, e := range res.Dir.Entries {
			ce := cent{name: e.Name, fileID: e.FileID}
			if e.Attr != nil {
				ce.typ = e.Attr.Type
				ce.attr = *e.Attr
				if e.Handle != nil && e.Name != "." && e.Name != ".." {
					ce.fh = append(nfs3.FH(nil), e.Handle...)
				}
			}
			ents = append(ents, ce)
		}
		if res.Dir.EOF || len(res.Dir.Entries) == 0 {
			break
		}
		cookie, verf = res.Dir.Entries[len(res.Dir.Entries)-1].Cookie, res.Dir.CookieVerf
	}
	// The inodes this mount has of the listed objects take the listed
	// attributes (unless an own change answered since the listing began).
	var known []*vfs.Inode
	for _, e := range ents {
		if e.fh == nil || e.attr.Type == 0 {
			continue
		}
		if i := fs.LookupInode(e.fh); i != nil {
			i.Mu.Lock()
			i.PostOpLocked(&e.attr, start, time.Now())
			i.Mu.Unlock()
			known = append(known, i)
		}
	}
	nc.afterList.run(dir)

	nc.mu.Lock()
	ok, _ := nc.leaseLocked(time.Now())
	install := promised && ok && !tok.broken && !nc.closed
	// Held back by a disconnection, not stale: the copies stay as they are,
	// and so do the attributes of what it lists.
	offHeld := install && (tok.off || nc.goingOff)
	install = install && !offHeld
	if !promised {
		nc.notPromisedLocked(key)
	} else {
		delete(nc.noPromise, key)
	}
	var evicted []*cdir
	if install {
		d := nc.dirs[key]
		if d != nil {
			nc.removeLocked(d)
		}
		d = &cdir{key: key, fh: append(nfs3.FH(nil), dir.FH...), ino: dir, modGen: modGen, filled: time.Now(), ents: ents,
			index: make(map[string]int, len(ents)), by: map[string]bool{credKey(c): true}}
		for k, e := range ents {
			d.index[e.name] = k
			if e.fh != nil {
				nc.covered[string(e.fh)] = d
			}
		}
		d.elem = nc.lru.PushFront(d)
		nc.dirs[key] = d
		nc.dropOfflineLocked(key) // this listing is newer
		evicted = nc.evictLocked()
	}
	nc.mu.Unlock()
	if !install && !offHeld {
		// Attributes of a listing a break overtook may be older than the
		// change that broke it.
		for _, i := range known {
			i.Invalidate()
		}
	}
	for _, d := range evicted {
		nc.sn.dropKernel(d)
	}
	return ents, nil
}

// evictLocked drops the least recently used listings past maxCachedDirs
// (their promises given back), and returns them for dropKernel.
func (nc *nameCache) evictLocked() []*cdir {
	var evicted []*cdir
	for nc.lru.Len() > maxCachedDirs {
		old := nc.lru.Back().Value.(*cdir)
		nc.removeLocked(old)
		nc.queueLocked(old.fh)
		nc.stats.Evictions++
		evicted = append(evicted, old)
	}
	nc.startReleaseLocked()
	return evicted
}

// errProvisional: a provisional directory is never listed from the server
// (permitmake.go).
var errProvisional = errors.New("snfs: a provisional directory is listed locally")

// notPromisedLocked records that listing key gave no promise now.
func (nc *nameCache) notPromisedLocked(key string) {
	if len(nc.noPromise) > 4096 {
		clear(nc.noPromise)
	}
	nc.noPromise[key] = time.Now()
}

func indexFH(fhs []nfs3.FH, fh nfs3.FH) int {
	for k, f := range fhs {
		if string(f) == string(fh) {
			return k
		}
	}
	return -1
}

// queueLocked queues fh's promise for DIR_RELEASE.
func (nc *nameCache) queueLocked(fh nfs3.FH) {
	if isProvFH(fh) {
		return // listed locally, promised by nobody (permitmake.go)
	}
	if indexFH(nc.queue, fh) < 0 {
		nc.queue = append(nc.queue, fh)
	}
}

// startReleaseLocked starts the release goroutine if promises wait and
// none runs; close waits for it.
func (nc *nameCache) startReleaseLocked() {
	if nc.releaser || nc.closed || len(nc.queue) == 0 {
		return
	}
	nc.releaser = true
	nc.wg.Add(1)
	go nc.releaseLoop()
}

// releaseLoop gives back the queued promises, in calls of at most
// snfs1.DirReleaseMax, until none is left.
func (nc *nameCache) releaseLoop() {
	defer nc.wg.Done()
	for {
		nc.mu.Lock()
		n := min(len(nc.queue), snfs1.DirReleaseMax)
		if n == 0 || nc.closed {
			nc.releaser = false
			nc.mu.Unlock()
			return
		}
		batch := append([]nfs3.FH(nil), nc.queue[:n]...)
		nc.queue = nc.queue[n:]
		for _, fh := range batch {
			nc.releasing[string(fh)]++
		}
		nc.mu.Unlock()
		ctx, cancel := nc.sn.stopCtx(30 * time.Second)
		err := nc.sn.sess.DirRelease(ctx, batch)
		cancel()
		if err != nil {
			nc.sn.FS.Logger().Debug("DIR_RELEASE", "dirs", len(batch), "err", err)
		}
		nc.mu.Lock()
		nc.stats.Releases += uint64(len(batch))
		for _, fh := range batch {
			if nc.releasing[string(fh)]--; nc.releasing[string(fh)] <= 0 {
				delete(nc.releasing, string(fh))
			}
		}
		nc.mu.Unlock()
	}
}

// close ends the cache at unmount: the release goroutine stops (the
// session's UNREGISTER then ends every promise: section 20.5).
func (nc *nameCache) close() {
	nc.mu.Lock()
	nc.closed = true
	nc.mu.Unlock()
	nc.wg.Wait()
}

// Stats returns a copy of the name cache's counters.
func (nc *nameCache) Stats() nameStats {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	return nc.stats
}

// NameCacheEvents lists the name cache's counters by the name the metric
// snfs_client_name_cache_events_total labels them with.
var NameCacheEvents = []string{"hit", "miss", "fill", "break", "eviction", "release", "renewal", "callback_wait"}

// NameCacheCount returns the name cache's counter of event (one of
// NameCacheEvents; 0 for another).
func (sn *snfsFS) NameCacheCount(event string) uint64 {
	st := sn.names.Stats()
	switch event {
	case "hit":
		return st.Hits
	case "miss":
		return st.Misses
	case "fill":
		return st.Fills
	case "break":
		return st.Breaks
	case "eviction":
		return st.Evictions
	case "release":
		return st.Releases
	case "renewal":
		return st.Renewals
	case "callback_wait":
		return st.CallbackWaits
	}
	return 0
}
