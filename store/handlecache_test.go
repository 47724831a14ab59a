package store

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestHandleCache(t *testing.T) {
	c := newHandleCache(4)
	t1, t2 := unix.Timespec{Sec: 1}, unix.Timespec{Sec: 2}
	c.put("d", t1, "a", 10, "ka")
	if k, ok := c.get("d", t1, "a", 10); !ok || k != "ka" {
		t.Fatal("miss on a fresh entry")
	}
	if _, ok := c.get("d", t1, "a", 11); ok {
		t.Fatal("hit with another inode number")
	}
	if _, ok := c.get("d", t2, "a", 10); ok {
		t.Fatal("hit after the directory changed")
	}
	c.put("d", t2, "b", 12, "kb") // the directory changed: its old entries go
	if _, ok := c.get("d", t2, "a", 10); ok || c.total != 1 {
		t.Fatalf("stale entry kept (total %d)", c.total)
	}
	for i, dir := range []string{"e", "f", "g", "h"} {
		c.put(dir, t1, "x", uint64(i), "k")
	}
	if c.total > 4 {
		t.Fatalf("%d entries, bound 4", c.total)
	}
	if _, ok := c.get("d", t2, "b", 12); ok {
		t.Fatal("least recently used directory not evicted")
	}
}
