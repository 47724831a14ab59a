package cachedir

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"testing"
)

func TestWriteSyncReopen(t *testing.T) {
	dir := testDir(t)
	c := openCache(t, dir, 0)
	f := mustFile(t, c, "h1")
	if _, err := f.WriteAt(pattern(1, 100), 10); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(pattern(2, 50), 80); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	want := readAll(t, f, 0, 130)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadAt(make([]byte, 1), 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("read after Close: %v", err)
	}
	c = openCache(t, dir, 0)
	defer c.Close()
	if got := c.DirtyFiles(); len(got) != 1 || string(got[0]) != "h1" {
		t.Fatalf("DirtyFiles = %q", got)
	}
	f = mustFile(t, c, "h1")
	info := f.Info()
	// [0,10) is a gap the first write made: known zeros, valid, not dirty.
	if !slices.Equal(info.Valid, []Range{{0, 130}}) || !slices.Equal(info.Dirty, []Range{{10, 120}}) || info.Size != 130 {
		t.Fatalf("after reopen: %+v", info)
	}
	equalBytes(t, "data after reopen", readAll(t, f, 0, 130), want)
	n, err := f.ReadAt(make([]byte, 200), 100)
	if n != 30 || err != io.EOF {
		t.Fatalf("read past end = %d, %v", n, err)
	}
}

func TestMissingFillGeneration(t *testing.T) {
	c := openCache(t, testDir(t), 0)
	defer c.Close()
	f := mustFile(t, c, "h")
	if err := f.SetVersion(5, 100); err != nil {
		t.Fatal(err)
	}
	_, err := f.ReadAt(make([]byte, 100), 0)
	me := missingOf(err)
	if me == nil || !slices.Equal(me.Ranges, []Range{{0, 100}}) {
		t.Fatalf("ReadAt of an empty file = %v", err)
	}
	server := pattern(9, 100)
	if err := f.Fill(me.Gen, 0, server[:40]); err != nil {
		t.Fatal(err)
	}
	// A local write over part of what is missing, then a fill of everything:
	// the fill must not replace the dirty bytes.
	if _, err := f.WriteAt([]byte("LOCAL"), 60); err != nil {
		t.Fatal(err)
	}
	_, err = f.ReadAt(make([]byte, 100), 0)
	if me2 := missingOf(err); me2 == nil || !slices.Equal(me2.Ranges, []Range{{40, 20}, {65, 35}}) {
		t.Fatalf("missing after partial fill: %v", err)
	}
	// Fill data past the size is cut off.
	if err := f.Fill(me.Gen, 0, append(slices.Clone(server), 1, 2, 3)); err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(server)
	copy(want[60:], "LOCAL")
	equalBytes(t, "filled", readAll(t, f, 0, 100), want)

	// Invalidate: clean data goes, dirty stays, a fill from before is refused.
	oldGen := f.Gen()
	if err := f.Invalidate(); err != nil {
		t.Fatal(err)
	}
	if err := f.Fill(oldGen, 0, server); !errors.Is(err, ErrStaleFill) {
		t.Fatalf("stale fill: %v", err)
	}
	if info := f.Info(); !slices.Equal(info.Valid, []Range{{60, 5}}) || info.Gen != oldGen+1 {
		t.Fatalf("after Invalidate: %+v", info)
	}
	equalBytes(t, "dirty kept", readAll(t, f, 60, 5), []byte("LOCAL"))
	// The same version does not invalidate; another one does.
	g := f.Gen()
	f.SetVersion(5, 100)
	if f.Gen() != g {
		t.Fatal("SetVersion with the same version bumped the generation")
	}
	f.SetVersion(6, 100)
	if f.Gen() == g || f.Version() != 6 {
		t.Fatalf("SetVersion with a new version: gen %d version %d", f.Gen(), f.Version())
	}
}

func TestTruncateAndWriteBack(t *testing.T) {
	c := openCache(t, testDir(t), 0)
	defer c.Close()
	f := mustFile(t, c, "h")
	f.WriteAt(pattern(3, 100), 0)
	if err := f.Truncate(50); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(80); err != nil {
		t.Fatal(err)
	}
	want := append(pattern(3, 50), make([]byte, 30)...)
	equalBytes(t, "after shrink and grow", readAll(t, f, 0, 80), want)
	wb := f.Dirty()
	if !slices.Equal(wb.Ranges, []Range{{0, 50}}) || !wb.Truncated || wb.TruncTo != 50 || wb.Size != 80 {
		t.Fatalf("WriteBack = %+v", wb)
	}
	// Written and truncated while the write-back is out: those stay pending.
	f.WriteAt([]byte("xx"), 10)
	f.Truncate(70)
	if err := f.MarkClean(wb, 9); err != nil {
		t.Fatal(err)
	}
	info := f.Info()
	if !slices.Equal(info.Dirty, []Range{{10, 2}}) || !info.Truncated || info.TruncTo != 70 || info.Version != 9 {
		t.Fatalf("after MarkClean: %+v", info)
	}
	if err := f.MarkClean(wb, 10); !errors.Is(err, ErrStaleWriteBack) {
		t.Fatalf("second MarkClean: %v", err)
	}
	old := f.Dirty()
	wb = f.Dirty()
	if err := f.MarkClean(old, 10); !errors.Is(err, ErrStaleWriteBack) {
		t.Fatalf("superseded MarkClean: %v", err)
	}
	if err := f.MarkClean(wb, 10); err != nil {
		t.Fatal(err)
	}
	if info := f.Info(); len(info.Dirty) != 0 || info.Truncated {
		t.Fatalf("after full MarkClean: %+v", info)
	}
	if len(c.DirtyFiles()) != 0 {
		t.Fatal("clean file listed dirty")
	}
}

func TestRemoveCancelsWriteBack(t *testing.T) {
	dir := testDir(t)
	c := openCache(t, dir, 0)
	f := mustFile(t, c, "tmp")
	f.WriteAt(pattern(1, 4096), 0)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("x"), 0); !errors.Is(err, ErrRemoved) {
		t.Fatalf("write after Remove: %v", err)
	}
	if len(c.DirtyFiles()) != 0 || c.Usage() != 0 {
		t.Fatalf("after Remove: dirty %q usage %d", c.DirtyFiles(), c.Usage())
	}
	if g := mustFile(t, c, "tmp"); g == f || g.Info().Size != 0 {
		t.Fatal("File after Remove is the removed one or not empty")
	}
	c.Close()
	c = openCache(t, dir, 0)
	defer c.Close()
	if len(c.DirtyFiles()) != 0 {
		t.Fatal("removed file dirty after reopen")
	}
	if names, _ := os.ReadDir(dir + "/data"); len(names) != 0 {
		t.Fatalf("data files left: %v", names)
	}
}

func TestEvictionOrder(t *testing.T) {
	dir := testDir(t)
	c := openCache(t, dir, 300)
	defer c.Close()
	fill := func(h string) *File {
		f := mustFile(t, c, h)
		f.SetVersion(1, 100)
		if err := f.Fill(f.Gen(), 0, pattern(1, 100)); err != nil {
			t.Fatal(err)
		}
		return f
	}
	// The oldest file is dirty: never evicted.
	d := mustFile(t, c, "dirty")
	d.WriteAt(pattern(2, 100), 0)
	a, b := fill("a"), fill("b")
	if c.Usage() != 300 {
		t.Fatalf("usage %d", c.Usage())
	}
	readAll(t, a, 0, 100) // a is now more recent than b
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	x := fill("x")
	if c.Usage() != 300 {
		t.Fatalf("usage after eviction %d", c.Usage())
	}
	for _, tc := range []struct {
		f      *File
		cached bool
	}{{d, true}, {a, true}, {b, false}, {x, true}} {
		_, err := tc.f.ReadAt(make([]byte, 100), 0)
		if (err == nil) != tc.cached {
			t.Errorf("%s: cached=%v, read: %v", tc.f.key, tc.cached, err)
		}
	}
	// The evicted file keeps its version and size, and can be filled again.
	if b.Version() != 1 || b.Info().Size != 100 {
		t.Fatalf("evicted file: %+v", b.Info())
	}
	if _, err := os.Stat(b.path); !os.IsNotExist(err) {
		t.Fatalf("evicted data file: %v", err)
	}
	c.Close()
	c = openCache(t, dir, 300)
	defer c.Close()
	if g := mustFile(t, c, "b"); len(g.Info().Valid) != 0 {
		t.Fatalf("evicted file has data after reopen: %+v", g.Info())
	}
	if g := mustFile(t, c, "a"); len(g.Info().Valid) != 1 {
		t.Fatalf("kept file lost data after reopen: %+v", g.Info())
	}
}

// TestConcurrent runs writers, readers, fills, invalidations and syncs on a
// few files at once, for the race detector.
func TestConcurrent(t *testing.T) {
	c := openCache(t, testDir(t), 1<<20)
	defer c.Close()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, _ := c.File([]byte{byte(w % 3)})
			for i := range 200 {
				off := int64((i * 37 * (w + 1)) % 8000)
				switch i % 5 {
				case 0:
					f.WriteAt(pattern(byte(w), 300), off)
				case 1:
					f.ReadAt(make([]byte, 200), off)
				case 2:
					f.Fill(f.Gen(), off, pattern(byte(i), 500))
				case 3:
					if i%25 == 3 {
						f.Invalidate()
					}
				case 4:
					if err := f.Sync(); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	for _, h := range c.DirtyFiles() {
		f, _ := c.File(h)
		wb := f.Dirty()
		if err := f.MarkClean(wb, 2); err != nil {
			t.Fatal(err)
		}
	}
}

// A fill whose READ was sent before the file shrank must not bring back the
// bytes past the new size once the file grows again (a truncate and extend
// that raced a READ reply): the shrink bumps the generation.
func TestFillRefusedAfterShrinkAndGrow(t *testing.T) {
	c := openCache(t, testDir(t), 0)
	defer c.Close()
	for _, local := range []bool{false, true} {
		f := mustFile(t, c, fmt.Sprintf("h%v", local))
		if err := f.SetVersion(5, 100); err != nil {
			t.Fatal(err)
		}
		gen := f.Gen() // a READ of [0, 100) is sent
		old := pattern(3, 100)
		if local { // a truncate and extend here (open for writing)
			if err := f.Truncate(10); err != nil {
				t.Fatal(err)
			}
			if err := f.Truncate(100); err != nil {
				t.Fatal(err)
			}
		} else { // the size the server reports after a SETATTR, twice
			if err := f.SetVersion(5, 10); err != nil {
				t.Fatal(err)
			}
			if err := f.SetVersion(5, 100); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.Fill(gen, 0, old); !errors.Is(err, ErrStaleFill) {
			t.Fatalf("local %v: a fill from before the shrink: %v, want ErrStaleFill", local, err)
		}
		if !local {
			continue
		}
		// The extension is known zeros.
		equalBytes(t, "after truncate and extend", readAll(t, f, 10, 90), make([]byte, 90))
	}
}
