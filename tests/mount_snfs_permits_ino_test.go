package tests

import (
	"bytes"
	"encoding/binary"
	"os"
	"syscall"
	"testing"

	"snfs/mount/vfs"
)

// Inode numbers of files made locally under a write-back permit: a file's
// st_ino is its provisional inode's until the server makes it, and stays
// that while the mount knows the file (docs/mount.md "What changes at the
// reintegration"): POSIX wants it unchanged for the life of the file.

// fdIno is f's st_ino (fstat).
func fdIno(t *testing.T, f *os.File) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatalf("fstat %s: %v", f.Name(), err)
	}
	return st.Ino
}

// direntInos are the d_ino of dir's entries, as getdents64 gives them.
func direntInos(t *testing.T, dir string) map[string]uint64 {
	t.Helper()
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	defer syscall.Close(fd)
	out := map[string]uint64{}
	buf := make([]byte, 64<<10)
	for {
		n, err := syscall.ReadDirent(fd, buf)
		if err != nil {
			t.Fatalf("getdents %s: %v", dir, err)
		}
		if n == 0 {
			return out
		}
		// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
		for b := buf[:n]; len(b) >= 19; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			name := b[19:reclen]
			if k := bytes.IndexByte(name, 0); k >= 0 {
				name = name[:k]
			}
			out[string(name)] = binary.NativeEndian.Uint64(b[0:8])
			b = b[reclen:]
		}
	}
}

// TestMountSNFSPermitDataIno: files made under a permit with
// --permit-data=on keep their st_ino across the reintegration that makes
// them (a directory's fsync) - through a descriptor kept open, a stat of
// the path and a listing's d_ino -, across a LINK that resolves one (both
// names show it), across a RENAME to another directory that resolves one
// and across a RENAME over a file the server made; no two files show the
// same number.
func TestMountSNFSPermitDataIno(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, _ := keptEnv(t, nil)
	for _, d := range []string{"d", "d2"} {
		if err := os.MkdirAll(e.path(d), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(e.path("d/old"), []byte("the server's"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := newPermitDataMountKept(t, e, "permit-data-ino")
	for _, d := range []string{"d", "d2"} {
		if _, err := os.ReadDir(m.path(d)); err != nil {
			t.Fatal(err)
		}
	}
	oldIno := inoOf(t, m.path("d/old"))

	// a: made, kept open across the reintegration.
	f, err := os.OpenFile(m.path("d/a"), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("made locally"); err != nil {
		t.Fatal(err)
	}
	a := fdIno(t, f)
	if got := inoOf(t, m.path("d/a")); got != a {
		t.Fatalf("d/a before the reintegration: stat %d, fstat %d", got, a)
	}
	// b: made and closed, then linked (the LINK resolves it).
	if err := os.WriteFile(m.path("d/b"), []byte("linked"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := inoOf(t, m.path("d/b"))
	if err := os.Link(m.path("d/b"), m.path("d/b2")); err != nil {
		t.Fatal(err)
	}
	// c: made, then moved to another directory (the RENAME resolves it).
	if err := os.WriteFile(m.path("d/c"), []byte("moved"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := inoOf(t, m.path("d/c"))
	if err := os.Rename(m.path("d/c"), m.path("d2/c")); err != nil {
		t.Fatal(err)
	}
	// x: made, then renamed over the server's file.
	if err := os.WriteFile(m.path("d/x"), []byte("over"), 0o644); err != nil {
		t.Fatal(err)
	}
	x := inoOf(t, m.path("d/x"))
	if err := os.Rename(m.path("d/x"), m.path("d/old")); err != nil {
		t.Fatal(err)
	}

	// The reintegration: everything is on the server.
	syncDir(t, m.path("d"))
	syncDir(t, m.path("d2"))
	for name, want := range map[string]string{"d/a": "made locally", "d/b": "linked", "d/b2": "linked", "d2/c": "moved", "d/old": "over"} {
		if got, err := os.ReadFile(e.path(name)); err != nil || string(got) != want {
			t.Errorf("the server's %s: %q, %v; want %q", name, got, err, want)
		}
	}

	seen := map[uint64]string{}
	for name, want := range map[string]uint64{"a": a, "b": b, "c": c, "x": x} {
		if other, ok := seen[want]; ok {
			t.Errorf("%s and %s were made with the same inode number %d", name, other, want)
		}
		seen[want] = name
	}
	if _, ok := seen[oldIno]; ok {
		t.Errorf("a file made locally has the inode number of the server's d/old (%d)", oldIno)
	}
	if got := fdIno(t, f); got != a {
		t.Errorf("d/a's open descriptor after the reintegration: st_ino %d; was %d", got, a)
	}
	for name, want := range map[string]uint64{"d/a": a, "d/b": b, "d/b2": b, "d2/c": c, "d/old": x} {
		if got := inoOf(t, m.path(name)); got != want {
			t.Errorf("stat of %s after the reintegration: st_ino %d; was %d", name, got, want)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Stat(m.path("d/b2"), &st); err != nil || st.Nlink != 2 {
		t.Errorf("d/b2: nlink %d, %v; want 2", st.Nlink, err)
	}
	ents := direntInos(t, m.path("d"))
	for name, want := range map[string]uint64{"a": a, "b": b, "b2": b, "old": x} {
		if got := ents[name]; got != want {
			t.Errorf("the listing's d_ino of d/%s: %d; stat gave %d", name, got, want)
		}
	}
	if got := direntInos(t, m.path("d2"))["c"]; got != c {
		t.Errorf("the listing's d_ino of d2/c: %d; stat gave %d", got, c)
	}
	// A descriptor opened now (through the path) shows it too, and reads
	// the data.
	g, err := os.Open(m.path("d/a"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if got := fdIno(t, g); got != a {
		t.Errorf("d/a opened after the reintegration: st_ino %d; was %d", got, a)
	}
	if got, err := os.ReadFile(m.path("d2/c")); err != nil || string(got) != "moved" {
		t.Errorf("the mount reads d2/c: %q, %v", got, err)
	}
}

// checkMadeInos checks the inode numbers the mount shows for the files
// listed in dir (a directory of m) that it made locally and reintegrated:
// the provisional numbers they were made with (vfs.LocalIno's range: kept
// while the mount knows the files), one per file, the same through a stat
// and the listing's d_ino; the server's objects show their own.
func checkMadeInos(t *testing.T, m *snfsMount, dir string, names []string) {
	t.Helper()
	ents := direntInos(t, m.path(dir))
	seen := map[uint64]string{}
	for _, name := range names {
		ino := inoOf(t, m.path(dir+"/"+name))
		if ino < vfs.LocalIno {
			t.Errorf("%s/%s: st_ino %d on the mount; want the provisional number it was made with", dir, name, ino)
		}
		if got := ents[name]; got != ino {
			t.Errorf("%s/%s: d_ino %d in the listing, st_ino %d", dir, name, got, ino)
		}
		if other, ok := seen[ino]; ok {
			t.Errorf("%s/%s and %s/%s show the same st_ino %d", dir, name, dir, other, ino)
		}
		seen[ino] = name
	}
}
