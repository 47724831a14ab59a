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

	"snfs/mount/vfs"
)

// A restarted mount reintegrates as the recorded writer; a writer that may
// no longer write the file (its mode changed since) leaves the record
// dirty for ever: no write-back, no conflict copy.
func TestReintegrateWriterLostPermission(t *testing.T) {
	addr, export := testServer(t)
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cacheA := t.TempDir()
	p := filepath.Join(export, "p")
	if err := os.WriteFile(p, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	os.Chmod(p, 0o666)
	os.Chown(p, 1002, 1002)
	v1, err := OpenSNFS(ctx, SNFSMountConfig{Addr: addr, Export: export, Name: "writer-test",
		CacheDir: cacheA, WriteBackDelay: time.Hour, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	user := vfs.Cred{UID: 1001, GID: 1001}
	e, err := v1.Lookup(ctx, v1.Root(), user, "p")
	if err != nil {
		t.Fatal(err)
	}
	f, _, err := v1.Open(ctx, e.Inode, user, syscall.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("acknowledged "), 3000)
	if _, err := v1.Write(ctx, f, 0, data); err != nil {
		t.Fatal(err)
	}
	if err := v1.Flush(ctx, f); err != nil {
		t.Fatal(err)
	}
	v1.Release(ctx, f)
	cacheB := t.TempDir()
	copyDir(t, cacheA, cacheB) // the kill
	fh := append([]byte(nil), e.Inode.FH...)
	// The mount's end: not written back (a kill), its session closed.
	v1.Close()
	os.Truncate(p, 0)
	os.WriteFile(p, nil, 0o666)
	// The owner takes other users' write permission away meanwhile.
	os.Chmod(p, 0o644)
	v2, err := OpenSNFS(ctx, SNFSMountConfig{Addr: addr, Export: export, Name: "writer-test",
		CacheDir: cacheB, WriteBackDelay: time.Hour, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer v2.Close()
	cf, err := mgrOf(v2).cache.File(fh)
	if err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(export)
	var names []string
	for _, d := range ents {
		names = append(names, d.Name())
	}
	if cf.NeedsWriteBack() {
		t.Errorf("after the restart the user's acknowledged data is still only in the cache (not written back, no conflict copy); export holds %v", names)
	}
}
