package cachedir

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// inlineKeys lists the handles whose records hold their data inline.
func inlineKeys(t *testing.T, c *Cache) []string {
	t.Helper()
	var keys []string
	err := c.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketInline).ForEach(func(k, _ []byte) error {
			keys = append(keys, string(k))
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	return keys
}

// TestInlineCopy follows a small dirty file's inline copy: made by Sync,
// kept while the file is dirty, dropped when a Sync after the write-back
// makes the data file durable, and with the record by Remove and eviction.
// Files larger than inlineMax never get one.
func TestInlineCopy(t *testing.T) {
	dir := testDir(t)
	c := openCache(t, dir, 0)
	small, big, gone := mustFile(t, c, "small"), mustFile(t, c, "big"), mustFile(t, c, "gone")
	for _, w := range []struct {
		f *File
		n int
	}{{small, 1000}, {big, inlineMax + 1}, {gone, 10}} {
		if _, err := w.f.WriteAt(pattern(3, w.n), 0); err != nil {
			t.Fatal(err)
		}
		if err := w.f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if got := inlineKeys(t, c); !slices.Equal(got, []string{"gone", "small"}) {
		t.Fatalf("inline after Sync: %q", got)
	}
	if err := gone.Remove(); err != nil {
		t.Fatal(err)
	}
	// Rewritten and synced while dirty: the copy is replaced, still inline.
	if _, err := small.WriteAt(pattern(4, 500), 200); err != nil {
		t.Fatal(err)
	}
	if err := small.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := inlineKeys(t, c); !slices.Equal(got, []string{"small"}) {
		t.Fatalf("inline after Remove and a rewrite: %q", got)
	}
	want := readAll(t, small, 0, 1000)
	if err := small.MarkClean(small.Dirty(), 7); err != nil {
		t.Fatal(err)
	}
	if err := small.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := inlineKeys(t, c); len(got) != 0 {
		t.Fatalf("inline after the write-back's Sync: %q", got)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	c = openCache(t, dir, 1)
	defer c.Close()
	small = mustFile(t, c, "small")
	if info := small.Info(); info.Version != 7 || len(info.Dirty) != 0 || info.Size != 1000 {
		t.Fatalf("small after reopen: %+v", info)
	}
	equalBytes(t, "small after reopen", readAll(t, small, 0, 1000), want)
	// An inline file written back but not synced again is evicted with its
	// copy once clean data pushes the cache over its limit.
	e := mustFile(t, c, "evict")
	if _, err := e.WriteAt(pattern(5, 10), 0); err != nil {
		t.Fatal(err)
	}
	if err := e.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := inlineKeys(t, c); !slices.Equal(got, []string{"evict"}) {
		t.Fatalf("inline before eviction: %q", got)
	}
	if err := e.MarkClean(e.Dirty(), 1); err != nil {
		t.Fatal(err)
	}
	if err := mustFile(t, c, "big").Invalidate(); err != nil {
		t.Fatal(err)
	}
	if _, err := mustFile(t, c, "trigger").WriteAt(pattern(6, 10), 0); err != nil {
		t.Fatal(err)
	}
	if e.Holds() {
		t.Fatalf("clean file not evicted: %+v", e.Info())
	}
	if got := inlineKeys(t, c); len(got) != 0 {
		t.Fatalf("inline after eviction: %q", got)
	}
}

// TestSyncUnchangedRecord: a rewrite of dirty bytes of a durable file leaves
// its record as it is, so Sync commits nothing to the index.
func TestSyncUnchangedRecord(t *testing.T) {
	c := openCache(t, testDir(t), 0)
	defer c.Close()
	f := mustFile(t, c, "big")
	p := pattern(1, inlineMax+1)
	for i := 0; i < 2; i++ {
		if _, err := f.WriteAt(p, 0); err != nil {
			t.Fatal(err)
		}
		before := indexWrites(c)
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		writes := indexWrites(c) - before
		if i == 0 && writes == 0 || i == 1 && writes != 0 {
			t.Fatalf("Sync %d wrote %d index pages", i, writes)
		}
	}
}

// indexWrites is the number of page writes the index's commits made so far.
func indexWrites(c *Cache) int64 {
	st := c.db.Stats()
	return st.TxStats.GetWrite()
}

// TestInlineRestore: a Close leaves small dirty files' data files unsynced
// (their copies are in the index), so a reopen after losing those data files
// restores them, an empty one (truncated to 0) included.
func TestInlineRestore(t *testing.T) {
	dir := testDir(t)
	c := openCache(t, dir, 0)
	full, empty := mustFile(t, c, "full"), mustFile(t, c, "empty")
	for _, f := range []*File{full, empty} {
		if _, err := f.WriteAt(pattern(8, 300), 100); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := empty.Truncate(0); err != nil {
		t.Fatal(err)
	}
	if err := empty.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"full", "empty"} {
		if err := os.Remove(filepath.Join(dir, "data", hex.EncodeToString([]byte(h)))); err != nil {
			t.Fatal(err)
		}
	}
	c = openCache(t, dir, 0)
	defer c.Close()
	if got := c.DirtyFiles(); len(got) != 2 {
		t.Fatalf("DirtyFiles after reopen: %q", got)
	}
	full, empty = mustFile(t, c, "full"), mustFile(t, c, "empty")
	want := append(make([]byte, 100), pattern(8, 300)...)
	equalBytes(t, "full after reopen", readAll(t, full, 0, 400), want)
	if info := empty.Info(); info.Size != 0 || !info.Truncated || len(info.Dirty) != 0 {
		t.Fatalf("empty after reopen: %+v", info)
	}
}

// TestCloseDropsCleanCopies: files written back since their inline commit
// get durable data files and lose their copies at Close (in one commit).
func TestCloseDropsCleanCopies(t *testing.T) {
	dir := testDir(t)
	c := openCache(t, dir, 0)
	want := map[string][]byte{}
	for i, h := range []string{"a", "b", "c"} {
		f := mustFile(t, c, h)
		want[h] = pattern(byte(i), 2000+i)
		if _, err := f.WriteAt(want[h], 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		if h != "c" {
			if err := f.MarkClean(f.Dirty(), 3); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c = openCache(t, dir, 0)
	defer c.Close()
	if got := inlineKeys(t, c); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("inline after Close: %q", got)
	}
	for h, p := range want {
		f := mustFile(t, c, h)
		if info := f.Info(); (len(info.Dirty) == 0) != (h != "c") {
			t.Fatalf("%s after reopen: %+v", h, info)
		}
		equalBytes(t, h+" after reopen", readAll(t, f, 0, int64(len(p))), p)
	}
}
