package cachemgr

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"snfs/client"
	"snfs/mount/vfs"
	"snfs/nfs3"
)

// copyDir copies the regular files of src (recursively) to dst: a cache
// directory as a kill -9 would have left it at this moment (every record
// committed so far, nothing after).
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
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
}

// TestReintegrateOwnChangesNoConflict: a restarted mount finds records
// still dirty whose data it had written back before the kill, after the
// last commit of its cache directory's index (the crash window between a
// write-back's COMMIT and the index commit that records it). The server's
// files no longer have the recorded base, but nobody else changed them:
//   - f: the version is still the one the record carries: reintegration
//     completes the write-back (writes it again);
//   - g: a plain NFS client renamed it (the version is dropped) but its
//     bytes are this client's: nothing is written, nothing copied;
//   - h: a plain NFS client rewrote it: a real conflict, one copy.
//
// Only h makes a conflict copy, and nothing acknowledged is lost.
func TestReintegrateOwnChangesNoConflict(t *testing.T) {
	addr, export := testServer(t)
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cacheA := t.TempDir()
	v1, err := OpenSNFS(ctx, SNFSMountConfig{Addr: addr, Export: export, Name: "reconcile-test",
		CacheDir: cacheA, WriteBackDelay: time.Hour, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) {
		t.Helper()
		_, f, err := v1.Create(ctx, v1.Root(), vfs.Cred{}, name, 0o644, false, syscall.O_RDWR)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v1.Write(ctx, f, 0, data); err != nil {
			t.Fatal(err)
		}
		if err := v1.Flush(ctx, f); err != nil { // close(2): durable in the cache directory
			t.Fatal(err)
		}
		if err := v1.Release(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string][]byte{}
	for k, n := range []string{"f", "g", "h"} {
		want[n] = bytes.Repeat([]byte{byte('a' + k)}, 40000+k*1000)
		write(n, want[n])
	}
	cacheB := t.TempDir()
	copyDir(t, cacheA, cacheB) // the kill: the index says f, g, h are dirty

	if err := v1.Sync(ctx); err != nil { // all written back
		t.Fatal(err)
	}
	if err := v1.Close(); err != nil {
		t.Fatal(err)
	}
	for n, d := range want {
		if got, _ := os.ReadFile(filepath.Join(export, n)); !bytes.Equal(got, d) {
			t.Fatalf("%s: the server has %d bytes after the write-back; want %d", n, len(got), len(d))
		}
	}

	// A plain NFS client renames g away and back (same bytes, version
	// dropped) and rewrites h.
	nc, err := client.DialNFS(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	mc, err := client.DialMount(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	mr, err := mc.Mnt(ctx, export)
	mc.Close()
	if err != nil || mr.Status != 0 {
		t.Fatalf("MNT: %v %v", err, mr.Status)
	}
	for _, r := range [][2]string{{"g", "g2"}, {"g2", "g"}} {
		res, err := nc.Rename(ctx, mr.FH, r[0], mr.FH, r[1])
		if err != nil || res.Status != nfs3.OK {
			t.Fatalf("RENAME %s %s: %v %v", r[0], r[1], err, res)
		}
	}
	lk, err := nc.Lookup(ctx, mr.FH, "h")
	if err != nil || lk.Status != nfs3.OK {
		t.Fatalf("LOOKUP h: %v", err)
	}
	theirs := bytes.Repeat([]byte{'Z'}, 30000)
	if wr, err := nc.Write(ctx, lk.Object, 0, theirs, nfs3.FileSync); err != nil || wr.Status != nfs3.OK {
		t.Fatalf("WRITE h: %v", err)
	}
	ours := want["h"]
	want["h"] = append(append([]byte{}, theirs...), ours[len(theirs):]...)

	// The recovery's log, shown if it decides otherwise than wanted (an
	// error is only logged: the file stays dirty for the write-back loop).
	var recLog lockedBuffer
	v2, err := OpenSNFS(ctx, SNFSMountConfig{Addr: addr, Export: export, Name: "reconcile-test",
		CacheDir: cacheB, WriteBackDelay: time.Hour, Logger: slog.New(slog.NewTextHandler(&recLog, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := v2.Sync(ctx); err != nil {
			t.Error(err)
		}
		if err := v2.Close(); err != nil {
			t.Error(err)
		}
	}()
	for n, d := range want {
		if got, _ := os.ReadFile(filepath.Join(export, n)); !bytes.Equal(got, d) {
			t.Errorf("%s: the server has %d bytes after the recovery; want %d", n, len(got), len(d))
		}
	}
	copies, _ := filepath.Glob(filepath.Join(export, "*.snfs-conflict-*"))
	if len(copies) != 1 || filepath.Base(copies[0])[:2] != "h." {
		t.Fatalf("conflict copies %q; want one, of h", copies)
	}
	if got, _ := os.ReadFile(copies[0]); !bytes.Equal(got, ours) {
		t.Errorf("h's conflict copy has %d bytes; want this client's %d", len(got), len(ours))
	}
	st := StatsOf(v2)
	if c, r := st.Conflicts.Load(), st.Reconciled.Load(); c != 1 || r != 2 {
		t.Errorf("conflicts %d, reconciled %d; want 1 and 2 (f by version, g by its bytes); the recovery's log:\n%s", c, r, recLog.String())
	}
}

// lockedBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
