package cachedir

import (
	"bytes"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestBaseOriginDurable: the base and the origin recorded with dirty data
// are found again after a restart (what reintegration compares and where it
// saves a conflict copy), and ReadKnown reads the whole local version with
// zeros where nothing is cached.
func TestBaseOriginDurable(t *testing.T) {
	dir := testDir(t)
	c := openCache(t, dir, 0)
	f := mustFile(t, c, "fh1")
	if err := f.SetVersion(3, 100); err != nil {
		t.Fatal(err)
	}
	base := Base{Size: 100, CtimeSec: 10, CtimeNsec: 11, MtimeSec: 12, MtimeNsec: 13}
	if err := f.SetBase(base); err != nil {
		t.Fatal(err)
	}
	if err := f.SetOrigin([]byte("dirhandle"), "name.txt"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(pattern(1, 30), 50); err != nil {
		t.Fatal(err)
	}
	c, f = syncReopen(t, c, f, dir)
	defer c.Close()
	if b, ok := f.Base(); !ok || b != base {
		t.Fatalf("base after reopen: %+v %v; want %+v", b, ok, base)
	}
	if p, n := f.Origin(); string(p) != "dirhandle" || n != "name.txt" {
		t.Fatalf("origin after reopen: %q %q", p, n)
	}
	if !f.NeedsWriteBack() {
		t.Fatal("dirty data lost")
	}
	buf := make([]byte, 200)
	n, unknown, err := f.ReadKnown(buf, 0)
	if err != nil || n != 100 || unknown != 70 {
		t.Fatalf("ReadKnown = %d, %d unknown, %v; want 100, 70", n, unknown, err)
	}
	want := append(append(make([]byte, 50), pattern(1, 30)...), make([]byte, 20)...)
	if !bytes.Equal(buf[:n], want) {
		t.Fatal("ReadKnown: wrong bytes")
	}
	if _, _, err := f.ReadKnown(buf, 100); err != io.EOF {
		t.Fatalf("ReadKnown at the end: %v; want EOF", err)
	}
}

// TestBaseOriginMoveDurable: a base or origin that changes while the dirty
// data does not (this client's own SETATTR moved the server's file; the file
// was renamed) is committed by the next Sync like any other change of the
// record.
func TestBaseOriginMoveDurable(t *testing.T) {
	dir := testDir(t)
	c := openCache(t, dir, 0)
	f := mustFile(t, c, "fh1")
	if err := f.SetVersion(3, 100); err != nil {
		t.Fatal(err)
	}
	if err := f.SetBase(Base{Size: 100, MtimeSec: 12}); err != nil {
		t.Fatal(err)
	}
	if err := f.SetOrigin([]byte("dir1"), "old.txt"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(pattern(2, 30), 50); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	moved := Base{Size: 100, CtimeSec: 20, MtimeSec: 21, MtimeNsec: 22}
	if err := f.SetBase(moved); err != nil {
		t.Fatal(err)
	}
	if err := f.SetOrigin([]byte("dir2"), "new.txt"); err != nil {
		t.Fatal(err)
	}
	c, f = syncReopen(t, c, f, dir)
	defer c.Close()
	if b, ok := f.Base(); !ok || b != moved {
		t.Errorf("base after reopen: %+v %v; want the moved %+v", b, ok, moved)
	}
	if p, n := f.Origin(); string(p) != "dir2" || n != "new.txt" {
		t.Errorf("origin after reopen: %q %q; want dir2 new.txt", p, n)
	}
}

// syncReopen syncs f, closes c and opens the cache in dir again, as a
// restarted mount does, returning it and its "fh1".
func syncReopen(t *testing.T, c *Cache, f *File, dir string) (*Cache, *File) {
	t.Helper()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c = openCache(t, dir, 0)
	return c, mustFile(t, c, "fh1")
}

// copyCacheDir copies the cache directory src to a new one: the state a
// kill -9 of the process would leave now (every commit so far, no more).
func copyCacheDir(t *testing.T, src string) string {
	t.Helper()
	dst := testDir(t)
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o700)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestRetractAfterWriteBackNotDirty: a file truncated and rewritten, synced
// (its record: a pending truncation and dirty bytes), written back (clean,
// not committed yet), then invalidated (another client's open): the
// retraction that the invalidation commits must not leave a record that
// claims no data but still a pending truncation. After a crash such a record
// was reintegrated as a file of zeros (the bytes were dropped, the size
// change kept): a conflict copy of nothing but zeros.
func TestRetractAfterWriteBackNotDirty(t *testing.T) {
	dir := testDir(t)
	c := openCache(t, dir, 0)
	defer c.Close()
	f := mustFile(t, c, "fh1")
	if err := f.SetVersion(1, 5000); err != nil {
		t.Fatal(err)
	}
	if err := f.Fill(f.Gen(), 0, pattern(1, 5000)); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(pattern(2, 3000), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.MarkClean(f.Dirty(), 2); err != nil {
		t.Fatal(err)
	}
	if err := f.Invalidate(); err != nil {
		t.Fatal(err)
	}
	c2 := openCache(t, copyCacheDir(t, dir), 0)
	defer c2.Close()
	if d := c2.DirtyFiles(); len(d) != 0 {
		f2 := mustFile(t, c2, "fh1")
		t.Fatalf("after the crash the cache lists %q to write back (%+v); want none: everything was written back", d, f2.Info())
	}
}

// TestSyncFilesRecordsWriteBacks: SyncFiles commits the clean state of
// several written-back files (one of them listed twice) in one go: a crash
// after it finds nothing to write back, and the data still cached.
func TestSyncFilesRecordsWriteBacks(t *testing.T) {
	dir := testDir(t)
	c := openCache(t, dir, 0)
	defer c.Close()
	var files []*File
	for k, h := range []string{"small", "big"} {
		f := mustFile(t, c, h)
		if _, err := f.WriteAt(pattern(byte(k), 1000+k*inlineMax), 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := f.MarkClean(f.Dirty(), 7); err != nil {
			t.Fatal(err)
		}
		files = append(files, f, f)
	}
	if err := c.SyncFiles(files); err != nil {
		t.Fatal(err)
	}
	c2 := openCache(t, copyCacheDir(t, dir), 0)
	defer c2.Close()
	if d := c2.DirtyFiles(); len(d) != 0 {
		t.Fatalf("after the crash the cache lists %q to write back; want none", d)
	}
	for k, h := range []string{"small", "big"} {
		f := mustFile(t, c2, h)
		if v := f.Version(); v != 7 {
			t.Errorf("%s: version %d; want 7", h, v)
		}
		equalBytes(t, h, readAll(t, f, 0, int64(1000+k*inlineMax)), pattern(byte(k), 1000+k*inlineMax))
	}
}
