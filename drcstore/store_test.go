package drcstore

import (
	"bytes"
	"fmt"
	"os"
	"testing"
	"time"

	"snfs/sunrpc"
)

func tempDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("/var/tmp", "snfs-drcstore-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func reply(i int, at time.Time) sunrpc.SavedReply {
	return sunrpc.SavedReply{Key: sunrpc.DRCKey{Addr: "127.0.0.1", XID: uint32(i), Prog: 100003, Vers: 3, Proc: 12, Sum: 0xabcd, Len: 40},
		At: at, Reply: []byte(fmt.Sprintf("reply %d", i))}
}

func loadAll(t *testing.T, s *Store) []sunrpc.SavedReply {
	t.Helper()
	var out []sunrpc.SavedReply
	if err := s.Load(func(r sunrpc.SavedReply) { out = append(out, r) }); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestStoreBounds: replies come back after a reopen as they were saved, oldest
// first; beyond the count bound the oldest are deleted, and so are replies past
// the age bound.
func TestStoreBounds(t *testing.T) {
	dir := tempDir(t)
	s, err := Open(dir, 5, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	now := t0
	s.now = func() time.Time { return now }
	for b := range 4 { // 4 batches of 3: 12 saved, 5 kept
		var rs []sunrpc.SavedReply
		for i := range 3 {
			rs = append(rs, reply(3*b+i, t0))
		}
		if err := s.Save(rs); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(dir, 5, time.Minute); err != nil {
		t.Fatal(err)
	}
	s.now = func() time.Time { return now }
	got := loadAll(t, s)
	if len(got) != 5 || s.count != 5 {
		t.Fatalf("%d replies loaded (count %d), want the newest 5", len(got), s.count)
	}
	for i, r := range got {
		want := reply(7+i, t0)
		if r.Key != want.Key || !bytes.Equal(r.Reply, want.Reply) || !r.At.Equal(t0) {
			t.Fatalf("reply %d: %+v, want %+v", i, r, want)
		}
	}

	// Two minutes later, one more reply: the old ones are past the age bound
	// and go with the commit that saves it.
	now = t0.Add(2 * time.Minute)
	if err := s.Save([]sunrpc.SavedReply{reply(100, now)}); err != nil {
		t.Fatal(err)
	}
	if got := loadAll(t, s); len(got) != 1 || got[0].Key.XID != 100 || s.count != 1 {
		t.Fatalf("after the age bound: %d replies (count %d)", len(got), s.count)
	}
	// Load itself skips replies past the age bound.
	now = t0.Add(4 * time.Minute)
	if got := loadAll(t, s); len(got) != 0 {
		t.Fatalf("Load returned %d replies past the age bound", len(got))
	}
	s.Close()
}

// TestStoreLocked: a second server on the same state directory is refused.
func TestStoreLocked(t *testing.T) {
	dir := tempDir(t)
	s, err := Open(dir, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := Open(dir, 0, 0); err == nil {
		t.Fatal("a second Open of the same database succeeded")
	}
}
