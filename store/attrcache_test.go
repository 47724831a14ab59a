package store

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// listAttrs lists dir with ChildAttrs, as READDIRPLUS does, returning each
// name's attributes.
func listAttrs(t *testing.T, s *Store, dir *Node, cred Cred) map[string]unix.Stat_t {
	t.Helper()
	out := map[string]unix.Stat_t{}
	err := As(cred, func() error {
		attrs := s.ChildAttrs(dir)
		_, err := s.ReadDir(dir, 0, 1<<16, func(de DirEntry) bool {
			if _, st, err := attrs.Get(de); err == nil {
				out[de.Name] = st
			}
			return true
		})
		attrs.Done()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// fill lists dir until one listing reads nothing from the file system. The
// notifier's mark covers the whole file system, so an unrelated change elsewhere
// (the go tool's cache, another test) may fail a fill in flight (the epoch rule);
// a later listing fills it again.
func fill(t *testing.T, s *Store, dir *Node) {
	t.Helper()
	for range 20 {
		_, m0 := s.AttrCacheStats()
		listAttrs(t, s, dir, Cred{})
		if _, m1 := s.AttrCacheStats(); m1 == m0 {
			return
		}
	}
	t.Fatal("20 listings in a row read entries from the file system")
}

func newTestExport(t *testing.T) (*Store, *Node, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (fanotify, handles)")
	}
	base := diskTempDir(t, "snfs-attrcache-")
	exp := filepath.Join(base, "export")
	if err := os.MkdirAll(exp, 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := Open(filepath.Join(base, "state"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	e, err := s.AddExport(exp)
	if err != nil {
		t.Fatal(err)
	}
	if !e.notified {
		t.Fatalf("no change notifier on %s: %v", exp, s.AttrCacheError())
	}
	root, err := s.Resolve(e.Root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(root.Release)
	return s, root, exp
}

// child resolves name in dir, released when the test ends.
func child(t *testing.T, s *Store, dir *Node, name string) *Node {
	t.Helper()
	n := resolveChild(t, s, dir, name)
	t.Cleanup(n.Release)
	return n
}

// resolveChild resolves name in dir; the caller releases it.
func resolveChild(t *testing.T, s *Store, dir *Node, name string) *Node {
	t.Helper()
	fh, _, err := s.Lookup(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	n, err := s.Resolve(fh)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAttrCacheOwnChanges: a second listing is served from the cache, and
// every change made through the store shows in the very next listing.
func TestAttrCacheOwnChanges(t *testing.T) {
	s, root, exp := newTestExport(t)
	var verf [8]byte
	for _, name := range []string{"a", "b", "c"} {
		if _, err := s.Create(root, name, 0o644, CreateUnchecked, verf); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.Mkdir(root, "d", 0o755); err != nil {
		t.Fatal(err)
	}
	fill(t, s, root)
	h0, _ := s.AttrCacheStats()
	first := listAttrs(t, s, root, Cred{})
	if h1, _ := s.AttrCacheStats(); h1-h0 != 4 {
		t.Fatalf("second listing: %d hits, want 4", h1-h0)
	}

	a := child(t, s, root, "a")
	if err := s.OpenIO(a); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteAt(a, []byte("hello"), 0); err != nil {
		t.Fatal(err)
	}
	if got := listAttrs(t, s, root, Cred{})["a"].Size; got != 5 {
		t.Fatalf("size after WRITE: %d, want 5", got)
	}
	if err := s.Truncate(a, 2); err != nil {
		t.Fatal(err)
	}
	if got := listAttrs(t, s, root, Cred{})["a"].Size; got != 2 {
		t.Fatalf("size after truncate: %d, want 2", got)
	}
	mode := uint32(0o600)
	b := child(t, s, root, "b")
	if err := s.Setattr(b, SetAttr{Mode: &mode}); err != nil {
		t.Fatal(err)
	}
	if got := listAttrs(t, s, root, Cred{})["b"].Mode & 0o7777; got != 0o600 {
		t.Fatalf("mode after SETATTR: %o", got)
	}
	if err := s.Link(b, root, "b2"); err != nil {
		t.Fatal(err)
	}
	if got := listAttrs(t, s, root, Cred{})["b"].Nlink; got != 2 {
		t.Fatalf("nlink after LINK: %d", got)
	}
	if err := s.Remove(root, "b2"); err != nil {
		t.Fatal(err)
	}
	if got := listAttrs(t, s, root, Cred{})["b"].Nlink; got != 1 {
		t.Fatalf("nlink after REMOVE of the other link: %d", got)
	}
	d := child(t, s, root, "d")
	if _, err := s.Create(d, "x", 0o644, CreateUnchecked, verf); err != nil {
		t.Fatal(err)
	}
	if got := listAttrs(t, s, root, Cred{})["d"]; got.Mtim == first["d"].Mtim && got.Ctim == first["d"].Ctim && got.Size == first["d"].Size {
		t.Fatal("directory attributes unchanged after CREATE in it")
	}
	// A removed file whose inode number comes back for a new file under the
	// same name: the listing must give the new file's handle, not the old one's.
	for i := range 20 {
		old := listAttrs(t, s, root, Cred{})["c"]
		if err := s.Remove(root, "c"); err != nil {
			t.Fatal(err)
		}
		res, err := s.Create(root, "c", 0o644, CreateUnchecked, verf)
		if err != nil {
			t.Fatal(err)
		}
		got := listAttrs(t, s, root, Cred{})["c"]
		if got.Ino != res.Stat.Ino || got.Ctim != res.Stat.Ctim {
			t.Fatalf("round %d: listing gives ino %d ctime %v, new file is %d %v (old %d)", i, got.Ino, got.Ctim, res.Stat.Ino, res.Stat.Ctim, old.Ino)
		}
	}
	if err := s.Rename(root, "a", d, "a"); err != nil {
		t.Fatal(err)
	}
	after := listAttrs(t, s, root, Cred{})
	if _, ok := after["a"]; ok {
		t.Fatal("renamed entry still listed")
	}
	_ = exp
}

// TestAttrCacheExternalChanges: changes made on the server machine by other
// processes reach the cache through fanotify, without any store call, and the
// very next listing shows them: it applies the events queued when it begins.
func TestAttrCacheExternalChanges(t *testing.T) {
	s, root, exp := newTestExport(t)
	p := filepath.Join(exp, "f")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	listAttrs(t, s, root, Cred{})
	listAttrs(t, s, root, Cred{}) // now cached
	next := func(what string, ok func(unix.Stat_t) bool) {
		t.Helper()
		if !ok(listAttrs(t, s, root, Cred{})["f"]) {
			t.Fatalf("%s: the next listing still shows the old attributes", what)
		}
	}
	if err := os.WriteFile(p, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	next("write", func(st unix.Stat_t) bool { return st.Size == 10 })
	if err := os.Chmod(p, 0o640); err != nil {
		t.Fatal(err)
	}
	next("chmod", func(st unix.Stat_t) bool { return st.Mode&0o777 == 0o640 })
	if err := os.Link(p, p+"2"); err != nil {
		t.Fatal(err)
	}
	next("link", func(st unix.Stat_t) bool { return st.Nlink == 2 })
}

// TestAttrCacheSearchPermission: a caller who may read a directory but not
// search it gets no attributes, cached or not, as locally.
func TestAttrCacheSearchPermission(t *testing.T) {
	s, root, exp := newTestExport(t)
	if err := os.Mkdir(filepath.Join(exp, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(exp, "d", "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d := child(t, s, root, "d")
	listAttrs(t, s, d, Cred{})
	if got := listAttrs(t, s, d, Cred{}); len(got) != 3 { // ., .., f
		t.Fatalf("root's listing: %d entries with attributes, want 3", len(got))
	}
	if err := os.Chmod(filepath.Join(exp, "d"), 0o744); err != nil {
		t.Fatal(err)
	}
	d.Refresh()
	user := Cred{UID: 1000, GID: 1000}
	if got := listAttrs(t, s, d, user); got["f"] != (unix.Stat_t{}) {
		t.Fatal("a caller without search permission got f's attributes")
	}
}

// TestAttrCacheRefreshAhead: a listing served entries past half their lifetime
// has them read again in the background, so a listing after the original
// lifetime still hits; without that listing in between, they expire.
func TestAttrCacheRefreshAhead(t *testing.T) {
	clock := time.Now()
	attrClock = func() time.Time { return clock } // read by Open
	t.Cleanup(func() { attrClock = time.Now })
	s, root, exp := newTestExport(t)
	var verf [8]byte
	for _, name := range []string{"a", "b", "c"} {
		if _, err := s.Create(root, name, 0o644, CreateUnchecked, verf); err != nil {
			t.Fatal(err)
		}
	}
	idle := func() { // wait for the background goroutine to finish what is queued
		done := make(chan struct{})
		if !s.bg.later(func() { close(done) }) {
			t.Fatal("background queue refused")
		}
		<-done
	}
	hits := func() uint64 { h, _ := s.AttrCacheStats(); return h }

	fill(t, s, root) // at clock
	idle()
	clock = clock.Add(DefaultAttrTTL * 6 / 10)
	fresh := func() bool { // every entry was read at clock
		for _, name := range []string{"a", "b", "c"} {
			var st unix.Stat_t
			if err := unix.Lstat(filepath.Join(exp, name), &st); err != nil {
				t.Fatal(err)
			}
			if e, ok := s.attrs.Peek(root.Export.ID, &root.Stat, st.Ino); !ok || !e.At().Equal(clock) {
				return false
			}
		}
		return true
	}
	// Listings at 0.6 TTL hit, and have the entries read again in the
	// background (again if an unrelated event failed a refresh, as in fill).
	for i := 0; !fresh(); i++ {
		if i == 20 {
			t.Fatal("entries served at 0.6 TTL were not refreshed")
		}
		h0 := hits()
		listAttrs(t, s, root, Cred{})
		idle()
		if h := hits() - h0; h != 3 {
			t.Fatalf("listing at 0.6 TTL: %d hits, want 3", h)
		}
	}
	clock = clock.Add(DefaultAttrTTL * 6 / 10) // 1.2 TTL after the fill, 0.6 after the refresh
	h0 := hits()
	got := listAttrs(t, s, root, Cred{})
	idle()
	if h := hits() - h0; h != 3 {
		t.Fatalf("listing at 1.2 TTL after a refresh: %d hits, want 3", h)
	}
	for name, st := range got {
		if name == "." || name == ".." {
			continue // the directory itself, not from the cache
		}
		var want unix.Stat_t
		if err := unix.Lstat(filepath.Join(exp, name), &want); err != nil {
			t.Fatal(err)
		}
		if st.Ino != want.Ino || st.Size != want.Size || st.Mtim != want.Mtim {
			t.Fatalf("%s: refreshed attributes differ from the file system's", name)
		}
	}
	clock = clock.Add(DefaultAttrTTL * 11 / 10) // no listing in between: expired
	h0 = hits()
	listAttrs(t, s, root, Cred{})
	idle()
	if h := hits() - h0; h != 0 {
		t.Fatalf("listing past the lifetime: %d hits, want 0", h)
	}
}
