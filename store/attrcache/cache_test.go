package attrcache_test

import (
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"snfs/store/attrcache"
)

// dir is the directory every test entry is listed in.
var dir = &unix.Stat_t{Dev: 9, Ino: 5}

func entry(ino uint64) *attrcache.Entry {
	return &attrcache.Entry{Export: 1, DirIno: dir.Ino, Key: fmt.Sprint("k", ino), FH: []byte{byte(ino)},
		St: unix.Stat_t{Dev: dir.Dev, Ino: ino, Size: int64(ino)}}
}

func fill(c *attrcache.Cache, e *attrcache.Entry) { c.EndFill(c.BeginFill(), e) }

func hit(c *attrcache.Cache, ino uint64, now time.Time) bool {
	_, _, ok, _ := c.Get(1, dir, ino, now)
	return ok
}

// TestCacheFreshness: a hit needs the same export, the same directory with the
// ctime it had when the entry was listed, no invalidation since, and an age
// within the TTL; past half the TTL it is reported as aging.
func TestCacheFreshness(t *testing.T) {
	now := time.Unix(1000, 0)
	c := attrcache.New(10, time.Minute, func() time.Time { return now })
	fill(c, entry(1))
	fh, st, ok, aging := c.Get(1, dir, 1, now)
	if !ok || aging || len(fh) != 1 || fh[0] != 1 || st.Ino != 1 || st.Size != 1 {
		t.Fatalf("clean fill: ok %v aging %v fh %v ino %d", ok, aging, fh, st.Ino)
	}
	if _, _, ok, _ := c.Get(2, dir, 1, now); ok {
		t.Fatal("hit for another export")
	}
	if _, _, ok, _ := c.Get(1, &unix.Stat_t{Dev: 9, Ino: 5, Ctim: unix.Timespec{Nsec: 1}}, 1, now); ok {
		t.Fatal("hit after the directory's entries changed (ctime)")
	}
	if _, _, ok, _ := c.Get(1, &unix.Stat_t{Dev: 9, Ino: 6}, 1, now); ok {
		t.Fatal("hit from another directory (a hard link elsewhere)")
	}
	if _, _, ok, aging := c.Get(1, dir, 1, now.Add(40*time.Second)); !ok || !aging {
		t.Fatalf("at 2/3 of the TTL: ok %v aging %v, want a hit that is aging", ok, aging)
	}
	if hit(c, 1, now.Add(2*time.Minute)) {
		t.Fatal("hit past the TTL")
	}
	c.InvalidateKey("k1")
	if hit(c, 1, now) {
		t.Fatal("hit after its key was invalidated")
	}
	fill(c, entry(1))
	c.InvalidateIno(dir.Dev, 1)
	if hit(c, 1, now) {
		t.Fatal("hit after its inode was invalidated")
	}
	fill(c, entry(1))
	fill(c, entry(2))
	c.InvalidateAll()
	if hit(c, 1, now) || hit(c, 2, now) {
		t.Fatal("hit after InvalidateAll")
	}
}

// TestCacheRacingFill: an invalidation that runs while an entry is being read
// (and so finds nothing to drop) keeps that entry out, whichever object it
// named; a fill with nothing in flight against it is installed.
func TestCacheRacingFill(t *testing.T) {
	now := time.Unix(1000, 0)
	c := attrcache.New(10, time.Minute, func() time.Time { return now })
	for _, inval := range []func(){
		func() { c.InvalidateKey("unrelated-or-not") },
		func() { c.InvalidateIno(7, 7) },
		func() { c.InvalidateAll() },
	} {
		ep := c.BeginFill()
		inval()
		c.EndFill(ep, entry(1))
		if hit(c, 1, now) {
			t.Fatal("an entry filled across an invalidation was installed")
		}
	}
	ep := c.BeginFill()
	fill(c, entry(2)) // another fill, begun and ended meanwhile, is no invalidation
	c.EndFill(ep, entry(1))
	if !hit(c, 1, now) || !hit(c, 2, now) {
		t.Fatal("clean fills were not installed")
	}
	c.EndFill(c.BeginFill(), nil) // a fill that read nothing installs nothing
}

// TestCacheBound: a cache never serves more than its bound: a fill into a full
// cache drops everything else.
func TestCacheBound(t *testing.T) {
	now := time.Unix(1000, 0)
	c := attrcache.New(2, time.Minute, func() time.Time { return now })
	for ino := uint64(1); ino <= 3; ino++ {
		fill(c, entry(ino))
	}
	n := 0
	for ino := uint64(1); ino <= 3; ino++ {
		if hit(c, ino, now) {
			n++
		}
	}
	if n > 2 || !hit(c, 3, now) {
		t.Fatalf("%d of 3 entries served with bound 2 (the last fill served: %v)", n, hit(c, 3, now))
	}
	// Invalidating by key still works after the reset: the keys went with the entries.
	c.InvalidateKey("k3")
	if hit(c, 3, now) {
		t.Fatal("hit after its key was invalidated")
	}
}

// TestCacheRefresh: an entry peeked, read again and replaced is served with the
// new attributes and a new age, unless an invalidation of that object came in
// between; invalidations of other objects do not fail it.
func TestCacheRefresh(t *testing.T) {
	now := time.Unix(1000, 0)
	c := attrcache.New(10, time.Minute, func() time.Time { return now })
	fill(c, entry(1))
	fill(c, entry(2))
	if _, ok := c.Peek(1, &unix.Stat_t{Dev: 9, Ino: 6}, 1); ok {
		t.Fatal("peek from another directory")
	}
	now = now.Add(50 * time.Second)
	e, ok := c.Peek(1, dir, 1)
	if !ok || !e.At().Equal(time.Unix(1000, 0)) || e.St.Size != 1 {
		t.Fatalf("peek: ok %v read at %v size %d", ok, e.At(), e.St.Size)
	}
	e.St.Size = 100
	c.InvalidateKey("k2") // another object
	c.Replace(e)
	_, st, ok, aging := c.Get(1, dir, 1, now.Add(30*time.Second)) // 80 s after the fill, 30 after the refresh
	if !ok || aging || st.Size != 100 {
		t.Fatalf("after Replace: ok %v aging %v size %d, want a fresh hit of size 100", ok, aging, st.Size)
	}
	if e, ok := c.Peek(1, dir, 1); !ok || !e.At().Equal(now) {
		t.Fatalf("after Replace: read at %v, want %v", e.At(), now)
	}

	e, _ = c.Peek(1, dir, 1)
	c.InvalidateKey("k1")
	fill(c, entry(1)) // read again by a listing meanwhile
	e.St.Size = 200
	c.Replace(e)
	if _, st, _, _ := c.Get(1, dir, 1, now); st.Size != 1 {
		t.Fatalf("a refresh across an invalidation of its object was installed (size %d)", st.Size)
	}
	c.Replace(*entry(1)) // not from Peek: nothing to replace
	if _, st, _, _ := c.Get(1, dir, 1, now); st.Size != 1 {
		t.Fatal("Replace of an entry not from Peek changed the cache")
	}
}

// TestCacheStats: every Get counts as a hit or a miss.
func TestCacheStats(t *testing.T) {
	now := time.Unix(1000, 0)
	c := attrcache.New(10, time.Minute, func() time.Time { return now })
	hit(c, 1, now)
	fill(c, entry(1))
	hit(c, 1, now)
	hit(c, 1, now)
	if h, m := c.Stats(); h != 2 || m != 1 {
		t.Fatalf("stats %d hits %d misses, want 2 and 1", h, m)
	}
	if !c.Now().Equal(now) {
		t.Fatal("Now is not the cache's clock")
	}
}

// TestCacheStop: a stopped cache serves nothing and installs nothing.
func TestCacheStop(t *testing.T) {
	now := time.Unix(1000, 0)
	c := attrcache.New(10, time.Minute, func() time.Time { return now })
	fill(c, entry(1))
	e, _ := c.Peek(1, dir, 1)
	c.Stop()
	if hit(c, 1, now) {
		t.Fatal("hit after Stop")
	}
	if _, ok := c.Peek(1, dir, 1); ok {
		t.Fatal("peek after Stop")
	}
	fill(c, entry(4))
	c.Replace(e)
	if hit(c, 4, now) || hit(c, 1, now) {
		t.Fatal("installed after Stop")
	}
}
