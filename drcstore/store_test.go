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

// TestStoreRestarts: many starts of a server, most of which save nothing and
// some of which save replies larger than a read chunk (Load reads a segment
// a chunk at a time, only as far as its last record): every reply comes back
// in order; a segment made but never written (a crash between its making and
// its first save) is deleted at the next Load.
func TestStoreRestarts(t *testing.T) {
	dir := tempDir(t)
	at := time.Now()
	var want []int
	big := bytes.Repeat([]byte("b"), readChunk+1000)
	for start := 0; start < 60; start++ {
		s, err := Open(dir, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		got := loadAll(t, s)
		if len(got) != len(want) {
			t.Fatalf("start %d: %d replies, want %d", start, len(got), len(want))
		}
		for i, r := range got {
			if r.Key.XID != uint32(want[i]) {
				t.Fatalf("start %d: reply %d is xid %d, want %d", start, i, r.Key.XID, want[i])
			}
			if r.Intent != (r.Key.XID%3 == 1) {
				t.Fatalf("start %d: record %d came back with Intent %v", start, r.Key.XID, r.Intent)
			}
			if r.Key.XID%7 == 0 && !bytes.Equal(r.Reply, big) {
				t.Fatalf("start %d: the large reply %d came back with %d bytes", start, r.Key.XID, len(r.Reply))
			}
		}
		if start == 30 {
			if err := s.newSegment(0); err != nil { // made, never written
				t.Fatal(err)
			}
		}
		if start%5 == 0 {
			var rs []sunrpc.SavedReply
			for x := start * 10; x < start*10+3; x++ {
				r := reply(x, at)
				r.Intent = x%3 == 1 // an intent, kept as a reply is
				if x%7 == 0 {
					r.Reply = big
				}
				rs = append(rs, r)
				want = append(want, x)
			}
			if err := s.Save(rs); err != nil {
				t.Fatal(err)
			}
		}
		s.Close()
	}
	ents, err := os.ReadDir(filepath.Join(dir, DirName))
	if err != nil {
		t.Fatal(err)
	}
	if saves := 12; len(ents) != saves {
		t.Fatalf("%d segment files after 60 starts that saved in %d; want %d (empty ones deleted)", len(ents), saves, saves)
	}
}

// BenchmarkLoadSegments: Load of 100 segments of a few replies each (a
// server started 100 times within the age bound).
func BenchmarkLoadSegments(b *testing.B) {
	dir, err := os.MkdirTemp("/var/tmp", "snfs-drcstore-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	at := time.Now()
	for start := range 100 {
		s, err := Open(dir, 0, 0)
		if err != nil {
			b.Fatal(err)
		}
		var rs []sunrpc.SavedReply
		for x := range 3 {
			rs = append(rs, reply(start*3+x, at))
		}
		if err := s.Save(rs); err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
	b.ResetTimer()
	for range b.N {
		s, err := Open(dir, 0, 0)
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		if err := s.Load(func(sunrpc.SavedReply) { n++ }); err != nil || n != 300 {
			b.Fatal(n, err)
		}
		s.Close()
	}
}
