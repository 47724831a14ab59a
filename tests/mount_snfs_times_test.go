package tests

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"snfs/metrics"
	"snfs/server"
)

// TestMountSNFSTimesKeepWriteBackDelayed: times set on a file whose data is
// still only in the cache (tar sets each extracted file's times) do not
// force its write-back (mount/vfs/settimes.go): no WRITE until the write-back,
// the mount and the server show the times set, and after the write-back the
// server's file has the data and, still, those times, for another client
// too. A write after the times moves the mtime as on any file system.
func TestMountSNFSTimesKeepWriteBackDelayed(t *testing.T) {
	e := newEnv(t, "rw,no_root_squash")
	reg := metrics.New()
	e.restartWith(func(c *server.Config) { c.Metrics, c.Observer = reg, reg })
	a := newSNFSMount(t, e, "A", "", time.Hour)
	set := time.Date(2011, 3, 4, 5, 6, 7, 0, time.UTC)
	want := randBytes(71, 150000)
	before := serverCalls(t, reg, "WRITE")
	for _, name := range []string{"kept", "rewritten", "shared"} {
		if err := os.WriteFile(a.path(name), want, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(a.path(name), set, set); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(a.path(name))
		if err != nil {
			t.Fatal(err)
		}
		if !st.ModTime().Equal(set) || st.Size() != int64(len(want)) {
			t.Errorf("%s through the mount: mtime %v, size %d; want %v, %d", name, st.ModTime(), st.Size(), set, len(want))
		}
	}
	if n := serverCalls(t, reg, "WRITE") - before; n != 0 {
		t.Errorf("the server served %v WRITEs after write, close and utimes; want 0 (delayed write-back)", n)
	}
	if got := mustRead(t, e.path("kept")); len(got) != 0 {
		t.Errorf("the export has %d bytes before the write-back; want none", len(got))
	}
	// Another client's open calls A back: A writes back, times included.
	b := newSNFSMount(t, e, "B", "", time.Hour)
	if got := mustRead(t, b.path("shared")); !bytes.Equal(got, want) {
		t.Errorf("B reads %d bytes of shared, not A's", len(got))
	}
	if st, err := os.Stat(b.path("shared")); err != nil || !st.ModTime().Equal(set) {
		t.Errorf("B's stat of shared: %v, %v; want mtime %v", st.ModTime(), err, set)
	}
	// A write after the times: the mtime is that of the write.
	f, err := os.OpenFile(a.path("rewritten"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("later"), 10); err != nil {
		t.Fatal(err)
	}
	f.Close()
	orig := bytes.Clone(want)
	copy(want[10:], "later")

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := a.v.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	wants := map[string][]byte{"kept": orig, "rewritten": want}
	for _, name := range []string{"kept", "rewritten"} {
		st, err := os.Stat(e.path(name))
		if err != nil {
			t.Fatal(err)
		}
		if got := mustRead(t, e.path(name)); !bytes.Equal(got, wants[name]) {
			t.Errorf("%s on the server after the write-back: %d bytes, not the ones written", name, len(got))
		}
		switch {
		case name == "kept" && !st.ModTime().Equal(set):
			t.Errorf("kept on the server after the write-back: mtime %v, want the %v set", st.ModTime(), set)
		case name == "rewritten" && time.Since(st.ModTime()) > time.Minute:
			t.Errorf("rewritten on the server: mtime %v, want that of the write after the times", st.ModTime())
		}
		ast, err := os.Stat(a.path(name))
		if err != nil {
			t.Fatal(err)
		}
		if !ast.ModTime().Equal(st.ModTime()) {
			t.Errorf("%s: the mount says mtime %v, the server %v", name, ast.ModTime(), st.ModTime())
		}
	}
}
