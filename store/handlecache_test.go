package store

import (
	"bytes"
	"testing"

	"golang.org/x/sys/unix"
)

func TestHandleCache(t *testing.T) {
	c := newHandleCache(4)
	t1, t2 := unix.Timespec{Sec: 1}, unix.Timespec{Sec: 2}
	c.put(7, "d", t1, "a", 10, []byte("ha"))
	if h, ok := c.get(7, "d", t1, "a", 10); !ok || !bytes.Equal(h, []byte("ha")) {
		t.Fatal("miss on a fresh entry")
	}
	if h, _ := c.get(7, "d", t1, "a", 10); len(append(h, 'x')) > 0 {
		if h2, _ := c.get(7, "d", t1, "a", 10); !bytes.Equal(h2, []byte("ha")) {
			t.Fatal("appending to a returned handle changed the cached one")
		}
	}
	if _, ok := c.get(7, "d", t1, "a", 11); ok {
		t.Fatal("hit with another inode number")
	}
	if _, ok := c.get(8, "d", t1, "a", 10); ok {
		t.Fatal("hit for another export (its handles carry another id and MAC)")
	}
	if _, ok := c.get(7, "d", t2, "a", 10); ok {
		t.Fatal("hit after the directory changed")
	}
	c.put(7, "d", t2, "b", 12, []byte("hb")) // the directory changed: its old entries go
	if _, ok := c.get(7, "d", t2, "a", 10); ok || c.total != 1 {
		t.Fatalf("stale entry kept (total %d)", c.total)
	}
	for i, dir := range []string{"e", "f", "g", "h"} {
		c.put(7, dir, t1, "x", uint64(i), []byte("h"))
	}
	if c.total > 4 {
		t.Fatalf("%d entries, bound 4", c.total)
	}
	if _, ok := c.get(7, "d", t2, "b", 12); ok {
		t.Fatal("least recently used directory not evicted")
	}
}
