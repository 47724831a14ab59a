package drcstore

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
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

func checkXIDs(t *testing.T, what string, got []sunrpc.SavedReply, at time.Time, xids ...int) {
	t.Helper()
	if len(got) != len(xids) {
		t.Fatalf("%s: %d replies, want %d", what, len(got), len(xids))
	}
	for i, r := range got {
		want := reply(xids[i], at)
		if r.Key != want.Key || !bytes.Equal(r.Reply, want.Reply) || !r.At.Equal(at) {
			t.Fatalf("%s: reply %d is %+v, want %+v", what, i, r, want)
		}
	}
}

func saveBatch(t *testing.T, s *Store, at time.Time, xids ...int) {
	t.Helper()
	var rs []sunrpc.SavedReply
	for _, x := range xids {
		rs = append(rs, reply(x, at))
	}
	if err := s.Save(rs); err != nil {
		t.Fatal(err)
	}
}

// TestStoreBounds: replies come back after a reopen as they were saved, oldest
// first; only the newest MaxCount come back, and the log deletes segments
// beyond the count bound and past the age bound.
func TestStoreBounds(t *testing.T) {
	dir := tempDir(t)
	t0 := time.Now()
	now := t0
	open := func() *Store {
		s, err := Open(dir, 8, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		s.now = func() time.Time { return now }
		return s
	}
	s := open()
	loadAll(t, s)
	for b := range 6 { // 6 batches of 3: 18 saved, the newest 8 loaded
		saveBatch(t, s, t0, 3*b, 3*b+1, 3*b+2)
		if s.count > 8+3 {
			t.Fatalf("after batch %d: %d replies on disk, bound 8 and a segment", b, s.count)
		}
	}
	s.Close()
	s = open()
	checkXIDs(t, "after a reopen", loadAll(t, s), t0, 10, 11, 12, 13, 14, 15, 16, 17)

	// Two minutes later, one more reply: the old ones are past the age bound
	// and their segments go with the save.
	now = t0.Add(2 * time.Minute)
	saveBatch(t, s, now, 100)
	if s.count != 1 || len(s.segs) != 1 {
		t.Fatalf("after the age bound: %d replies in %d segments on disk", s.count, len(s.segs))
	}
	checkXIDs(t, "after the age bound", loadAll(t, s), now, 100)
	// Load itself skips replies past the age bound.
	now = t0.Add(4 * time.Minute)
	if got := loadAll(t, s); len(got) != 0 {
		t.Fatalf("Load returned %d replies past the age bound", len(got))
	}
	s.Close()
}

// TestStoreTornTail: a save cut short by a crash (a record half written, or
// written with a wrong checksum) ends its segment when the log is read; the
// replies before it are loaded, and the next server writes a new segment.
func TestStoreTornTail(t *testing.T) {
	dir := tempDir(t)
	s, err := Open(dir, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	loadAll(t, s)
	saveBatch(t, s, at, 1, 2)
	saveBatch(t, s, at, 3)
	// The crash: half of a record after the last one, then garbage.
	rec := encode(&sunrpc.SavedReply{Key: sunrpc.DRCKey{XID: 4}, At: at, Reply: []byte("torn")})
	torn := append([]byte{0, 0, 0, byte(len(rec)), 1, 2, 3, 4}, rec[:len(rec)/2]...)
	if _, err := s.cur.WriteAt(torn, s.off); err != nil {
		t.Fatal(err)
	}
	seg := s.segPath(s.segs[len(s.segs)-1].num)
	s.Close()

	s, err = Open(dir, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkXIDs(t, "after the crash", loadAll(t, s), at, 1, 2, 3)
	saveBatch(t, s, at, 5)
	if got := s.segPath(s.segs[len(s.segs)-1].num); got == seg {
		t.Fatalf("the restarted log writes after the torn tail, in %s", filepath.Base(got))
	}
	s.Close()
	s, err = Open(dir, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkXIDs(t, "after the next save", loadAll(t, s), at, 1, 2, 3, 5)
	s.Close()
}
