package cachedir

import (
	"io"
	"testing"
)

// TestPin: only a complete file is pinned; while pinned, an invalidation
// keeps the bytes the kernel reads (but the cache no longer claims them) and
// eviction skips the file.
func TestPin(t *testing.T) {
	c := openCache(t, testDir(t), 0)
	f := mustFile(t, c, "h")
	if err := f.SetVersion(1, 8192); err != nil {
		t.Fatal(err)
	}
	if err := f.Fill(f.Gen(), 0, pattern(1, 4096)); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := f.Pin(true); ok || err != nil {
		t.Fatalf("Pin of a file missing bytes: %v, %v; want refused", ok, err)
	}
	if err := f.Fill(f.Gen(), 4096, pattern(2, 4096)); err != nil {
		t.Fatal(err)
	}
	fd, ok, err := f.Pin(true)
	if !ok || err != nil {
		t.Fatalf("Pin of a complete file: %v, %v", ok, err)
	}
	defer fd.Close()
	if err := f.Invalidate(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(fd)
	if err != nil {
		t.Fatal(err)
	}
	equalBytes(t, "pinned file after Invalidate", got, append(pattern(1, 4096), pattern(2, 4096)...))
	if miss := f.Missing(); miss == nil {
		t.Fatalf("the cache still claims the invalidated bytes")
	}
	if err := f.Fill(f.Gen(), 0, pattern(3, 8192)); err != nil {
		t.Fatal(err)
	}
	c.limit = 1 // would evict anything unpinned
	c.maybeEvict()
	if f.Missing() != nil {
		t.Fatalf("a pinned file was evicted")
	}
	f.Unpin()
}

// TestExternalWrites: writes made to the data file behind the cache's back
// become dirty at NoteExternal; meanwhile committed records claim no clean
// bytes, so a crash never takes those bytes for the server's.
func TestExternalWrites(t *testing.T) {
	c := openCache(t, testDir(t), 0)
	f := mustFile(t, c, "h")
	if err := f.SetVersion(1, 4096); err != nil {
		t.Fatal(err)
	}
	if err := f.Fill(f.Gen(), 0, pattern(1, 4096)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	fd, ok, err := f.Pin(true)
	if !ok || err != nil {
		t.Fatalf("Pin: %v, %v", ok, err)
	}
	defer fd.Close()
	if err := f.BeginExternal(); err != nil {
		t.Fatal(err)
	}
	if changed, err := f.NoteExternal(); changed || err != nil {
		t.Fatalf("NoteExternal before any write: %v, %v", changed, err)
	}
	if _, err := fd.WriteAt(pattern(9, 100), 4050); err != nil { // also grows the file
		t.Fatal(err)
	}
	// A crash now: the committed record claims nothing clean.
	f.mu.RLock()
	claimed := f.d.valid.subtract(f.d.dirty)
	f.mu.RUnlock()
	if len(claimed) != 0 {
		t.Fatalf("during external writes the record claims %v clean", claimed)
	}
	changed, err := f.NoteExternal()
	if !changed || err != nil {
		t.Fatalf("NoteExternal after a write: %v, %v", changed, err)
	}
	in := f.Info()
	if in.Size != 4150 || len(in.Dirty) != 1 || in.Dirty[0] != (Range{0, 4150}) {
		t.Fatalf("after NoteExternal: size %d, dirty %v; want 4150 and all", in.Size, in.Dirty)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.EndExternal()
	f.Unpin()
	want := append(pattern(1, 4096)[:4050], pattern(9, 100)...)
	equalBytes(t, "cache after external write", readAll(t, f, 0, 4150), want)
	if dirty := c.DirtyFiles(); len(dirty) != 1 {
		t.Fatalf("DirtyFiles: %d, want 1", len(dirty))
	}
}
