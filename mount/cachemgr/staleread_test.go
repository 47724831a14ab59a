package cachemgr

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"snfs/client"
	"snfs/mount/vfs"
)

// restartTestFile opens an snfs-mode FS (write-back after an hour) on a
// fresh test server (its export directory is returned) and creates file "f" in its root, open for reading and
// writing; the FS is written back and closed when the test ends.
func restartTestFile(t *testing.T) (*vfs.FS, string, vfs.Entry, *vfs.File) {
	t.Helper()
	addr, exp := testServer(t)
	ctx := context.Background()
	v, err := OpenSNFS(ctx, SNFSMountConfig{Addr: addr, Export: exp, Name: "restart-test",
		CacheDir: t.TempDir(), WriteBackDelay: time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := v.Sync(ctx); err != nil {
			t.Error(err)
		}
		if err := v.Close(); err != nil {
			t.Error(err)
		}
	})
	e, f, err := v.Create(ctx, v.Root(), vfs.Cred{}, "f", 0o644, false, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	// The tests need the file cached: its first open may come before the
	// server's probe of the session's callback path is answered, and then
	// does not cache (docs/protocol.md 4.1). A create is one call
	// (CREATE_OPEN), so it often does: open again until caching is granted.
	for deadline := time.Now().Add(10 * time.Second); !snfsCaching(e.Inode); {
		if err := v.Release(ctx, f); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the file's OPEN never granted caching")
		}
		time.Sleep(10 * time.Millisecond)
		if f, _, err = v.Open(ctx, e.Inode, vfs.Cred{}, syscall.O_RDWR); err != nil {
			t.Fatal(err)
		}
	}
	return v, exp, e, f
}

// After a server restart, caching stops at once but the dirty data in the
// cache directory is written back afterwards, while the application goes on
// with its open file, now read and written through the server. Until that
// write-back has run, the server holds older data than the cache directory:
// a read through the server must not return it, and a write through must not
// be overwritten by it. Found by the fsx tester (TestMountFsxSNFSServerRestart,
// seed 5, op 76002): stale bytes read after a truncate and extend done in the
// cache directory before the restart was noticed. Here the restart's two steps
// are run apart (stopCaching, then snfsSync), with the application's
// operations in between: the ordering the tester hit by chance.
func TestServerRestartReadWriteBeforeWriteBack(t *testing.T) {
	ctx := context.Background()
	v, export, e, f := restartTestFile(t)
	var c vfs.Cred
	i := e.Inode
	const size = 8192
	old := bytes.Repeat([]byte{'o'}, size)
	if _, err := v.Write(ctx, f, 0, old); err != nil {
		t.Fatal(err)
	}
	if err := v.Fsync(ctx, f); err != nil { // the server has old
		t.Fatal(err)
	}
	// Truncate and extend in the cache directory (the file is cached and
	// open for writing): the server still has old beyond 100.
	for _, sz := range []uint64{100, size} {
		if _, _, err := v.Setattr(ctx, i, c, vfs.SetAttr{Size: &sz}); err != nil {
			t.Fatal(err)
		}
	}
	if !snfsCaching(i) {
		t.Fatal("the file is not cached")
	}
	want := make([]byte, size)
	copy(want, old[:100])

	mgrOf(v).stopCaching() // the restart is noticed; its write-back has not run yet
	buf := make([]byte, size)
	n, err := v.Read(ctx, f, 0, buf)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf[:n], want) {
		t.Errorf("read %d bytes after the restart: %d differ from what was written (truncated and extended)",
			n, countDiff(buf[:n], want))
	}

	// A write through, then the restart's write-back runs late: it must not
	// undo the write (its size changes are older).
	newer := bytes.Repeat([]byte{'n'}, 100)
	if _, err := v.Write(ctx, f, 200, newer); err != nil {
		t.Fatal(err)
	}
	copy(want[200:], newer)
	if err := mgrOf(v).snfsSync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := v.Fsync(ctx, f); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(export, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the server has %d bytes, %d of them differ from what was written", len(got), countDiff(got, want))
	}
	if err := v.Flush(ctx, f); err != nil {
		t.Error(err)
	}
	if err := v.Release(ctx, f); err != nil {
		t.Error(err)
	}
}

// countDiff counts the positions where a and b differ, and the length
// difference.
func countDiff(a, b []byte) int {
	d := max(len(a), len(b)) - min(len(a), len(b))
	for k := range min(len(a), len(b)) {
		if a[k] != b[k] {
			d++
		}
	}
	return d
}

// Caching stopped by a server restart noticed late, after the file was
// opened again from the new server instance (the OPEN's version is current
// and this client's writes are covered, so they do not drop it): what is then
// written through must not leave the cache directory's clean data labelled
// with that version, or the next OPEN (whose old_cache_version it is) reuses
// it and reads return the bytes from before the writes.
func TestServerRestartWriteThroughDropsCachedData(t *testing.T) {
	ctx := context.Background()
	v, _, e, f := restartTestFile(t)
	var err error
	var c vfs.Cred
	i := e.Inode
	old := bytes.Repeat([]byte{'o'}, 4096)
	if _, err := v.Write(ctx, f, 0, old); err != nil {
		t.Fatal(err)
	}
	if err := v.Fsync(ctx, f); err != nil { // clean in the cache directory
		t.Fatal(err)
	}
	mgrOf(v).stopCaching()
	newer := bytes.Repeat([]byte{'n'}, 4096)
	if _, err := v.Write(ctx, f, 0, newer); err != nil { // written through
		t.Fatal(err)
	}
	if err := v.Flush(ctx, f); err != nil {
		t.Fatal(err)
	}
	if err := v.Release(ctx, f); err != nil {
		t.Fatal(err)
	}
	f, _, err = v.Open(ctx, i, c, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	if !snfsCaching(i) {
		t.Fatal("not cached after the reopen")
	}
	buf := make([]byte, 4096)
	n, err := v.Read(ctx, f, 0, buf)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf[:n], newer) {
		t.Errorf("read %d bytes after the reopen: %d differ from what was written through", n, countDiff(buf[:n], newer))
	}
	if err := v.Flush(ctx, f); err != nil {
		t.Error(err)
	}
	if err := v.Release(ctx, f); err != nil {
		t.Error(err)
	}
}

// A READ answered before a flush sent and committed this client's unwritten
// bytes, and its reply laid over after that (the bytes no longer in the
// overlay): the read must not return the server's bytes from before them.
// The flush is injected between the READ's reply and the overlay (nfs mode,
// where written data waits in memory; snfs mode's read through is the same
// code).
func TestReadRacingFlushNotStale(t *testing.T) {
	addr, export := testServer(t)
	ctx := context.Background()
	m, err := client.DialMount(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	res, err := m.Mnt(ctx, export)
	if err != nil || res.Status != 0 {
		t.Fatalf("MNT: %v %v", err, res.Status)
	}
	nc, err := client.DialNFS(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// vfs.New, not mount.Open: package mount imports this one (an import cycle).
	v, err := vfs.New(ctx, vfs.Config{NFS: nc, Root: res.FH, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	var c vfs.Cred
	e, f, err := v.Create(ctx, v.Root(), c, "g", 0o644, false, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	old := bytes.Repeat([]byte{'o'}, 4096)
	if _, err := v.Write(ctx, f, 0, old); err != nil {
		t.Fatal(err)
	}
	if err := v.Fsync(ctx, f); err != nil {
		t.Fatal(err)
	}
	want := bytes.Clone(old)
	newer := bytes.Repeat([]byte{'n'}, 100)
	copy(want[1000:], newer)
	if _, err := v.Write(ctx, f, 1000, newer); err != nil { // waits in memory
		t.Fatal(err)
	}
	flushes := 0
	v.AfterRead = func() {
		flushes++
		if err := e.Inode.Flush(ctx, true); err != nil {
			t.Error(err)
		}
	}
	buf := make([]byte, 4096)
	n, err := v.Read(ctx, f, 0, buf)
	if err != nil {
		t.Fatal(err)
	}
	if flushes != 1 {
		t.Fatalf("%d flushes injected, want 1", flushes)
	}
	if !bytes.Equal(buf[:n], want) {
		t.Errorf("read %d bytes: %d differ from what was written", n, countDiff(buf[:n], want))
	}
	if err := v.Release(ctx, f); err != nil {
		t.Error(err)
	}
}
