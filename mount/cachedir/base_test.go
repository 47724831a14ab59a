package cachedir

import (
	"bytes"
	"io"
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
