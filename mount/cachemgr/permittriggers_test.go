package cachemgr

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"snfs/mount/vfs"
)

// The reintegration policy's triggers besides age, fsync of a directory
// and recall (TestPermitsSyncDirAndAge, TestPermitsRecallReintegrates):
// the log's length, and the unmount.

// TestPermitsLengthTrigger: a log shorter than the length bound and younger
// than the age bound stays on the mount; the record that makes it that
// long sends it, well before its age would.
func TestPermitsLengthTrigger(t *testing.T) {
	s := newServer(t, true)
	_, sn, d := permitsMount(t, s, "permits-length")
	holdPermit(t, sn, d)
	const length = 40
	sn.permits.mu.Lock()
	sn.permits.age, sn.permits.length = time.Hour, length
	sn.permits.mu.Unlock()
	logCreates(t, sn, d, "n", length-1)
	time.Sleep(3 * permitLoopTick) // the loop looks at the log every tick
	if st := sn.permits.log.Stats(); st.Records != length-1 {
		t.Fatalf("%d records in the log after %v; want the %d logged, kept (shorter than %d, younger than an hour)",
			st.Records, 3*permitLoopTick, length-1, length)
	}
	if _, err := os.Lstat(filepath.Join(s.export, "d", "n0")); !os.IsNotExist(err) {
		t.Fatalf("a logged create is on the server before the log is long enough: %v", err)
	}
	logCreates(t, sn, d, "m", 1)
	deadline := time.Now().Add(10 * time.Second)
	for sn.permits.log.Stats().Records > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the log of %d records was not reintegrated: %d left", length, sn.permits.log.Stats().Records)
		}
		time.Sleep(50 * time.Millisecond)
	}
	wantFiles(t, s.export, "n", length-1)
	wantFiles(t, s.export, "m", 1)
}

// TestPermitsUnmountReintegrates: the unmount (Close, with no Sync before
// it) sends the log, however young, and leaves it empty for the next mount
// on the cache directory.
func TestPermitsUnmountReintegrates(t *testing.T) {
	s := newServer(t, true)
	if err := os.Mkdir(filepath.Join(s.export, "d"), 0o777); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cache := t.TempDir()
	open := func() *vfs.FS {
		v, err := OpenSNFS(ctx, SNFSMountConfig{Addr: s.addr, Export: s.export, Name: "permits-unmount",
			CacheDir: cache, WriteBackDelay: time.Hour, Permits: true,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	v := open()
	closed := false
	t.Cleanup(func() {
		if !closed {
			v.Close()
		}
	})
	e, err := v.Lookup(ctx, v.Root(), vfs.Cred{}, "d")
	if err != nil {
		t.Fatal(err)
	}
	sn := mgrOf(v)
	holdPermit(t, sn, e.Inode)
	sn.permits.mu.Lock()
	sn.permits.age = time.Hour
	sn.permits.mu.Unlock()
	logCreates(t, sn, e.Inode, "u", 25)
	if _, err := os.Lstat(filepath.Join(s.export, "d", "u0")); !os.IsNotExist(err) {
		t.Fatalf("a logged create is on the server before the unmount: %v", err)
	}
	closed = true
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	wantFiles(t, s.export, "u", 25)
	v = open()
	defer v.Close()
	if n := mgrOf(v).permits.log.Len(); n != 0 {
		t.Fatalf("the next mount on the cache directory found %d records left", n)
	}
}
