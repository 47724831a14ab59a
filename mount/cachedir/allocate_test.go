package cachedir

import (
	"errors"
	"slices"
	"testing"
)

// TestAllocated: an allocation the server made extends the size with known
// zeros (none with keepSize), written back as nothing; a punched hole turns
// the range into known zeros, clean, dirty bytes there dropped, and refuses a
// fill started before it. Both survive a reopen of the cache.
func TestAllocated(t *testing.T) {
	dir := testDir(t)
	c := openCache(t, dir, 0)
	f := mustFile(t, c, "h")
	if err := f.SetVersion(1, 0); err != nil {
		t.Fatal(err)
	}
	f.WriteAt(pattern(5, 8192), 0)
	wb := f.Dirty()
	if err := f.MarkClean(wb, 1); err != nil {
		t.Fatal(err)
	}
	if err := f.Allocated(0, 4096, false, false); err != nil {
		t.Fatal(err)
	}
	if err := f.Allocated(8192, 100, true, false); err != nil {
		t.Fatal(err)
	}
	if info := f.Info(); info.Size != 8192 || f.NeedsWriteBack() {
		t.Fatalf("after allocations within the size and keeping it: %+v", info)
	}
	if err := f.Allocated(4096, 8192, false, false); err != nil {
		t.Fatal(err)
	}
	want := append(pattern(5, 8192), make([]byte, 4096)...)
	equalBytes(t, "after an extending allocation", readAll(t, f, 0, 12288), want)
	if f.NeedsWriteBack() {
		t.Fatalf("an allocation the server made is pending write-back: %+v", f.Info())
	}

	f.WriteAt([]byte("dirty"), 1000)
	gen := f.Gen()
	if err := f.Allocated(998, 3000, true, true); err != nil {
		t.Fatal(err)
	}
	copy(want[1000:], "dirty")
	clear(want[998:3998])
	equalBytes(t, "after a punched hole", readAll(t, f, 0, 12288), want)
	if f.NeedsWriteBack() {
		t.Fatalf("the punched dirty bytes are still dirty: %+v", f.Info())
	}
	if err := f.Fill(gen, 998, pattern(9, 100)); !errors.Is(err, ErrStaleFill) {
		t.Fatalf("a fill from before the hole: %v", err)
	}
	// A hole past the size changes nothing.
	if err := f.Allocated(20000, 10, true, true); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c = openCache(t, dir, 0)
	defer c.Close()
	f = mustFile(t, c, "h")
	equalBytes(t, "after a reopen", readAll(t, f, 0, 12288), want)
	if info := f.Info(); info.Size != 12288 || !slices.Equal(info.Valid, []Range{{0, 12288}}) {
		t.Fatalf("after a reopen: %+v", info)
	}
}

// TestAllocatedExternal: with passthrough writers, an allocation applied to
// the data file is not taken for their writes (NoteExternal finds nothing),
// but their writes from before it still are.
func TestAllocatedExternal(t *testing.T) {
	c := openCache(t, testDir(t), 0)
	defer c.Close()
	f := mustFile(t, c, "h")
	if err := f.SetVersion(1, 4096); err != nil {
		t.Fatal(err)
	}
	if err := f.Fill(f.Gen(), 0, pattern(1, 4096)); err != nil {
		t.Fatal(err)
	}
	fd, ok, err := f.Pin(true)
	if !ok || err != nil {
		t.Fatalf("Pin: %v, %v", ok, err)
	}
	defer fd.Close()
	defer f.Unpin()
	if err := f.BeginExternal(); err != nil {
		t.Fatal(err)
	}
	defer f.EndExternal()
	if err := f.Allocated(0, 10000, false, false); err != nil {
		t.Fatal(err)
	}
	if err := f.Allocated(100, 200, true, true); err != nil {
		t.Fatal(err)
	}
	if changed, err := f.NoteExternal(); changed || err != nil {
		t.Fatalf("NoteExternal after allocations only: %v, %v", changed, err)
	}
	if f.NeedsWriteBack() {
		t.Fatalf("allocations the server made are pending write-back: %+v", f.Info())
	}
	if _, err := fd.WriteAt([]byte("kernel"), 5000); err != nil {
		t.Fatal(err)
	}
	if err := f.Allocated(0, 20000, false, false); err != nil {
		t.Fatal(err)
	}
	if changed, err := f.NoteExternal(); !changed || err != nil {
		t.Fatalf("NoteExternal after a write and an allocation: %v, %v", changed, err)
	}
}
