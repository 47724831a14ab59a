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

// TestReintegrationsOverEachOthersDirtyFiles: the cycle of docs/protocol.md
// section 11 between two mounts, each holding a permit and local data of a
// file made under it. Mount a caches b/y dirty (written here, not written
// back), mount b caches a/x dirty; then a, holding a's permit, renames x to
// x2 and b, holding b's permit, renames y to y2, and both reintegrate at
// once. The server holds each RENAME record for its callback to the other
// mount (CB_WRITEBACK_INVALIDATE: the other is x's, or y's, closed dirty
// holder), and each mount answers that callback while its own
// reintegration is in progress. The callback asks for data of a file the
// mount knows by its real handle and of which it holds no local data: it
// is answered with the cached data written back, without waiting for the
// reintegration in progress, so both batches end at once, nobody is
// fenced, no conflict copy is made, and x2 and y2 hold the bytes written
// by their dirty holders. Before, each callback waited for its mount's own
// reintegration, which waited on the server for the other's answer: both
// batches took the whole callback timeout (5 s), both mounts were fenced
// for the file they held dirty, and its bytes reached the server only by
// the fenced file's reintegration at the next write-back.
func TestReintegrationsOverEachOthersDirtyFiles(t *testing.T) {
	s := newServer(t, true)
	for _, d := range []string{"a", "b"} {
		if err := os.Mkdir(filepath.Join(s.export, d), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(s.export, "a", "x"), []byte("old x"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.export, "b", "y"), []byte("old y"), 0o666); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	va, sa := permitsDataMount(t, s, "cycle-a")
	vb, sb := permitsDataMount(t, s, "cycle-b")
	da, db := lookupPath(t, va, "a"), lookupPath(t, vb, "b")
	// The dirty caches, before the permits (an open by name in a directory
	// another mount holds the permit of would recall it).
	xb, yb := []byte("x as mount b wrote it"), []byte("y as mount a wrote it")
	writeDirty(t, vb, mgrOf(vb), lookupPath(t, vb, "a"), "x", xb)
	writeDirty(t, va, mgrOf(va), lookupPath(t, va, "b"), "y", yb)
	// Not read: a local read of the export calls the dirty holder back
	// (server/coexist.go).
	for _, p := range []string{"a/x", "b/y"} {
		if fi, err := os.Stat(filepath.Join(s.export, p)); err != nil || fi.Size() != int64(len("old x")) {
			t.Fatalf("the server's %s: %v, %v: written through, not held dirty", p, fi, err)
		}
	}
	holdPermit(t, sa, da)
	holdPermit(t, sb, db)
	for _, m := range []struct {
		v     *vfs.FS
		sn    *snfsFS
		d     *vfs.Inode
		from  string
		local string
	}{{va, sa, da, "x", "ma"}, {vb, sb, db, "y", "mb"}} {
		if _, err := m.v.ReadDir(ctx, m.d, vfs.Cred{}); err != nil {
			t.Fatal(err)
		}
		f, _ := createLocal(t, m.v, m.sn, m.d, m.local, []byte("made as "+m.local))
		if err := m.v.Release(ctx, f); err != nil {
			t.Fatal(err)
		}
		e, err := m.v.Lookup(ctx, m.d, vfs.Cred{}, m.from)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.v.Rename(ctx, m.d, m.from, m.d, m.from+"2", vfs.Cred{}, nil, e.Inode, false); err != nil {
			t.Fatal(err)
		}
		if m.sn.permits.log.Len() == 0 {
			t.Fatal("nothing logged under the permit")
		}
	}
	// Both reintegrations in progress before either's batch reaches the
	// server: each mount's callbacks meet its own reintegration running.
	type done struct {
		err  error
		took time.Duration
	}
	res := make(chan done, 2)
	start := time.Now()
	for _, sn := range []*snfsFS{sa, sb} {
		p := sn.permits
		p.reint.Lock()
		go func() {
			var rbs []*readback
			err := p.reintegrateLocked(ctx, "test", false, &rbs)
			p.reint.Unlock()
			res <- done{err, time.Since(start)}
		}()
	}
	for range 2 {
		d := <-res
		if d.err != nil {
			t.Errorf("reintegration: %v", d.err)
		}
		if d.took > 2*time.Second {
			t.Errorf("a reintegration took %v (the callback timeout is 5s): the mounts held each other's callbacks", d.took.Round(time.Millisecond))
		}
		t.Logf("reintegration done after %v", d.took.Round(time.Millisecond))
	}
	// Before any sync: the callbacks' write-backs sent the dirty data.
	for _, w := range []struct {
		path string
		data []byte
	}{{"a/x2", xb}, {"b/y2", yb}, {"a/ma", []byte("made as ma")}, {"b/mb", []byte("made as mb")}} {
		if got, err := os.ReadFile(filepath.Join(s.export, w.path)); err != nil || !bytes.Equal(got, w.data) {
			t.Errorf("the server's %s: %q, %v; want %q", w.path, got, err, w.data)
		}
	}
	// What either mount still holds is sent: nothing is left to conflict,
	// nobody was fenced.
	for _, v := range []*vfs.FS{va, vb} {
		if err := v.Sync(ctx); err != nil {
			t.Errorf("sync: %v", err)
		}
	}
	for _, sn := range []*snfsFS{sa, sb} {
		t.Logf("callbacks failed %d, fenced %d, conflicts %d", sn.stats.CallbacksFailed.Load(), sn.stats.Fenced.Load(), sn.stats.Conflicts.Load())
		if f := sn.stats.Fenced.Load(); f != 0 {
			t.Errorf("fenced for %d files", f)
		}
		if f := sn.stats.CallbacksFailed.Load(); f != 0 {
			t.Errorf("%d callbacks failed", f)
		}
		if c := sn.stats.Conflicts.Load(); c != 0 {
			t.Errorf("%d conflict copies made", c)
		}
	}
	for _, gone := range []string{"a/x", "b/y"} {
		if _, err := os.Lstat(filepath.Join(s.export, gone)); err == nil {
			t.Errorf("the server's %s is still there", gone)
		}
	}
}

// permitsDataMount opens an snfs-mode FS named name on s with write-back
// permits and local data of the files made under them (as
// permitsMountData, without making a directory).
func permitsDataMount(t *testing.T, s *restartableServer, name string) (*vfs.FS, *snfsFS) {
	t.Helper()
	ctx := context.Background()
	v, err := OpenSNFS(ctx, SNFSMountConfig{Addr: s.addr, Export: s.export, Name: name,
		CacheDir: t.TempDir(), WriteBackDelay: time.Hour, Permits: true, PermitData: true,
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
	return v, mgrOf(v)
}

// lookupPath is the inode of the root's entry name.
func lookupPath(t *testing.T, v *vfs.FS, name string) *vfs.Inode {
	t.Helper()
	e, err := v.Lookup(context.Background(), v.Root(), vfs.Cred{}, name)
	if err != nil {
		t.Fatal(err)
	}
	return e.Inode
}

// writeDirty writes data over dir's name through v, cached (the server's
// OPEN granted caching) and left dirty in the cache once released: the
// server takes v for its closed dirty holder.
func writeDirty(t *testing.T, v *vfs.FS, sn *snfsFS, dir *vfs.Inode, name string, data []byte) {
	t.Helper()
	ctx := context.Background()
	e, err := v.Lookup(ctx, dir, vfs.Cred{}, name)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		f, _, err := v.Open(ctx, e.Inode, vfs.Cred{}, syscall.O_RDWR)
		if err != nil {
			t.Fatal(err)
		}
		if !snfsCaching(e.Inode) {
			// The server's probe of the callback path is still out.
			if err := v.Release(ctx, f); err != nil {
				t.Fatal(err)
			}
			if time.Now().After(deadline) {
				t.Fatal("never granted caching")
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if _, err := v.Write(ctx, f, 0, data); err != nil {
			t.Fatal(err)
		}
		if err := v.Flush(ctx, f); err != nil {
			t.Fatal(err)
		}
		if err := v.Release(ctx, f); err != nil {
			t.Fatal(err)
		}
		return
	}
}
