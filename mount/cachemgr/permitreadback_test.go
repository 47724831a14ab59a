package cachemgr

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"snfs/mount/vfs"
	"snfs/state/clientfile"
)

// TestReadBackCallbackBeforeTaken: a file whose data a reintegration
// stored and whose open it asked (permitreadback.go) is read on the server
// by a local process after the reply and before the mount takes the open
// in: the server calls the mount back (the open is counted there), the
// callback is answered without waiting for the reintegration, and the
// process reads the data. The mount then reads the data too, and a write
// of its afterwards (kept in its cache: an hour's write-back delay) is what
// the server's process reads next (its access calls the mount back).
func TestReadBackCallbackBeforeTaken(t *testing.T) {
	s := newServer(t, true)
	if err := os.Mkdir(filepath.Join(s.export, "d"), 0o777); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	v, err := OpenSNFS(ctx, SNFSMountConfig{Addr: s.addr, Export: s.export, Name: "readback-callback",
		CacheDir: t.TempDir(), WriteBackDelay: time.Hour, CloseDelay: clientfile.UntilRecalled, Permits: true, PermitData: true,
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
	e, err := v.Lookup(ctx, v.Root(), vfs.Cred{}, "d")
	if err != nil {
		t.Fatal(err)
	}
	d, sn := e.Inode, mgrOf(v)
	holdPermit(t, sn, d)
	if _, err := v.ReadDir(ctx, d, vfs.Cred{}); err != nil {
		t.Fatal(err)
	}
	pe, f, err := v.Create(ctx, d, vfs.Cred{}, "p", 0o644, false, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	if !isProvFH(pe.Inode.FH) || offOf(f) == nil {
		t.Fatalf("the create was not made locally with local data (handle %x)", pe.Inode.FH)
	}
	if _, err := sn.Write(ctx, f, 0, []byte("stored data")); err != nil {
		t.Fatal(err)
	}
	if err := sn.Flush(ctx, f); err != nil {
		t.Fatal(err)
	}
	if err := v.Release(ctx, f); err != nil {
		t.Fatal(err)
	}
	srv := filepath.Join(s.export, "d", "p")
	taking := 0
	sn.readbackTaking = func() {
		taking++
		if got, err := os.ReadFile(srv); err != nil || string(got) != "stored data" {
			t.Errorf("the server's d/p read before the mount took its open in: %q, %v", got, err)
		}
	}
	if err := sn.permits.flush(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	sn.readbackTaking = nil
	if taking != 1 {
		t.Fatalf("the reintegration asked the stored file's open %d times; want 1", taking)
	}
	re, err := v.Lookup(ctx, d, vfs.Cred{}, "p")
	if err != nil {
		t.Fatal(err)
	}
	readAll := func() string {
		t.Helper()
		rf, _, err := v.Open(ctx, re.Inode, vfs.Cred{}, syscall.O_RDONLY)
		if err != nil {
			t.Fatal(err)
		}
		defer v.Release(ctx, rf)
		buf := make([]byte, 64)
		n, err := v.Read(ctx, rf, 0, buf)
		if err != nil {
			t.Fatal(err)
		}
		return string(buf[:n])
	}
	if got := readAll(); got != "stored data" {
		t.Errorf("the mount reads d/p: %q; want %q", got, "stored data")
	}
	wf, _, err := v.Open(ctx, re.Inode, vfs.Cred{}, syscall.O_WRONLY|syscall.O_TRUNC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Write(ctx, wf, 0, []byte("rewritten")); err != nil {
		t.Fatal(err)
	}
	if err := v.Flush(ctx, wf); err != nil {
		t.Fatal(err)
	}
	if err := v.Release(ctx, wf); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(srv); err != nil || string(got) != "rewritten" {
		t.Errorf("the server's d/p after the mount's write: %q, %v; want %q", got, err, "rewritten")
	}
	if got := readAll(); got != "rewritten" {
		t.Errorf("the mount reads d/p after its write: %q", got)
	}
}
