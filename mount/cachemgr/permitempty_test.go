package cachemgr

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"snfs/mount/vfs"
)

// countDataSyncs counts the flushes of local data files (offSync) until the
// test ends.
func countDataSyncs(t *testing.T) *atomic.Int64 {
	var n atomic.Int64
	old := syncDataFile
	syncDataFile = func(f *os.File) error { n.Add(1); return old(f) }
	t.Cleanup(func() { syncDataFile = old })
	return &n
}

// TestPermitEmptyCloseFlushesLogOnly: the close of a file made locally
// into which nothing was written flushes the log alone (its data is empty,
// which the log says), while the close of one written, or truncated, flushes
// its data file too (offSync).
func TestPermitEmptyCloseFlushesLogOnly(t *testing.T) {
	syncs := countDataSyncs(t)
	s := newServer(t, true)
	v, sn, d := permitsMountData(t, s, "permits-empty-close", true)
	holdPermit(t, sn, d)
	ctx := context.Background()
	if _, err := v.ReadDir(ctx, d, vfs.Cred{}); err != nil {
		t.Fatal(err)
	}
	check := func(name string, change func(f *vfs.File), want int64) {
		t.Helper()
		_, f, err := v.Create(ctx, d, vfs.Cred{}, name, 0o644, false, syscall.O_RDWR)
		if err != nil {
			t.Fatal(err)
		}
		if offOf(f) == nil {
			t.Fatalf("%s was not made with local data", name)
		}
		change(f)
		before := syncs.Load()
		if err := sn.Flush(ctx, f); err != nil {
			t.Fatal(err)
		}
		if got := syncs.Load() - before; got != want {
			t.Errorf("%s: the close flushed the data file %d times; want %d", name, got, want)
		}
		if err := v.Release(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	check("empty", func(*vfs.File) {}, 0)
	check("written", func(f *vfs.File) {
		if _, err := sn.Write(ctx, f, 0, []byte("data")); err != nil {
			t.Fatal(err)
		}
	}, 1)
	check("truncated", func(f *vfs.File) {
		size := uint64(0)
		if _, _, err := v.Setattr(ctx, f.I, vfs.Cred{}, vfs.SetAttr{Size: &size}); err != nil {
			t.Fatal(err)
		}
	}, 1)
}

// TestPermitEmptyDataFileLostRemount: what the close of an empty file made
// locally leaves unflushed (its data file and that file's name, offSync) a
// crash of the machine may lose; a mount started again on the cache
// directory with the file's CREATE in its log and no data file for it
// makes the file on the server, empty, and keeps no local data of it.
func TestPermitEmptyDataFileLostRemount(t *testing.T) {
	s := newServer(t, true)
	if err := os.Mkdir(filepath.Join(s.export, "d"), 0o777); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cacheA, cacheB := t.TempDir(), t.TempDir()
	cfg := SNFSMountConfig{Addr: s.addr, Export: s.export, Name: "permits-empty-lost",
		CacheDir: cacheA, WriteBackDelay: time.Hour, Permits: true, PermitData: true,
		Disconnected: true, DisconnectAfter: time.Hour, // asked (SetDisconnected) only
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	a, err := OpenSNFS(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	sn := mgrOf(a)
	e, err := a.Lookup(ctx, a.Root(), vfs.Cred{}, "d")
	if err != nil {
		t.Fatal(err)
	}
	d := e.Inode
	holdPermit(t, sn, d)
	if _, err := a.ReadDir(ctx, d, vfs.Cred{}); err != nil {
		t.Fatal(err)
	}
	ce, f, err := a.Create(ctx, d, vfs.Cred{}, "empty", 0o644, false, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := sn.permits.made.of(ce.Inode.FH)
	if !ok || offOf(f) == nil {
		t.Fatal("the create was not made locally with local data")
	}
	if err := sn.Flush(ctx, f); err != nil {
		t.Fatal(err)
	}
	data := sn.permits.offDataOf(o.id)
	if data == nil {
		t.Fatal("no local data file")
	}
	// The crash, as a kill that leaves the cache directory as it is on
	// disk (a copy), with the data file's name, never flushed, lost.
	copyDir(t, cacheA, cacheB)
	rel, err := filepath.Rel(cacheA, data.path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(cacheB, rel)); err != nil {
		t.Fatal(err)
	}
	// a is not closed: a kill sends no UNREGISTER, and the server keeps
	// the last LSN it applied for the name.
	killSession(t, a)
	if _, err := os.Stat(filepath.Join(s.export, "d", "empty")); !os.IsNotExist(err) {
		t.Fatalf("the server has d/empty before the remount (%v): the test shows nothing", err)
	}

	cfg.CacheDir = cacheB
	b, err := OpenSNFS(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Sync(ctx); err != nil {
		t.Errorf("sync of the remount: %v", err)
	}
	snB := mgrOf(b)
	if n := snB.permits.log.Len(); n != 0 || snB.permits.offDataOf(o.id) != nil {
		t.Errorf("after the remount's sync: %d records, local data held %v; want none", n, snB.permits.offDataOf(o.id) != nil)
	}
	st, err := os.Stat(filepath.Join(s.export, "d", "empty"))
	if err != nil || st.Size() != 0 || !st.Mode().IsRegular() {
		t.Fatalf("the server's d/empty: %v, %v; want an empty regular file", st, err)
	}
}
