package cachemgr

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"snfs/mount/vfs"
)

// TestRemoveDirtyKilledNoConflict: a file with data not yet written back
// (the delayed write-back) is unlinked, and the mount is killed once the
// removal is on the server, before the file's cache record is dropped. The
// restarted mount finds the record dirty and its OPEN answered STALE: the
// file is gone because this client removed it, not another client, so no
// conflict copy of it is made (the soak's false conflicts of reason=restart,
// a/f34298 and s/f71452: a conflict line with no "server's file changed"
// before it, the file unlinked by its owner). The kill is a copy of the
// cache directory taken at that moment (snfsRemoved's start).
//
//   - through the server: the REMOVE was answered;
//   - under a permit: the REMOVE was logged, and the log reintegrated (a
//     recall, an fsync of the directory) before the record was dropped;
//   - renamed over: another file was renamed over it through the server
//     (the RENAME answered), which keeps its bytes under the name.
func TestRemoveDirtyKilledNoConflict(t *testing.T) {
	t.Run("through the server", func(t *testing.T) { testRemoveDirtyKilled(t, false, false) })
	t.Run("under a permit", func(t *testing.T) { testRemoveDirtyKilled(t, true, false) })
	t.Run("renamed over", func(t *testing.T) { testRemoveDirtyKilled(t, false, true) })
}

func testRemoveDirtyKilled(t *testing.T, permits, renameOver bool) {
	addr, export := testServer(t)
	ctx := context.Background()
	cacheA := t.TempDir()
	cfg := SNFSMountConfig{Addr: addr, Export: export, Name: "removedirty-test",
		CacheDir: cacheA, WriteBackDelay: time.Hour, Permits: permits,
		Logger: slog.New(slog.NewTextHandler(&lockedBuffer{}, nil))}
	v1, err := OpenSNFS(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) {
		t.Helper()
		_, f, err := v1.Create(ctx, v1.Root(), vfs.Cred{}, name, 0o644, false, syscall.O_RDWR|syscall.O_TRUNC)
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
	// f is made and written back (a file of the server's), then written
	// again: dirty, its write-back delayed.
	write("f", bytes.Repeat([]byte{'a'}, 5000))
	if err := v1.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	write("f", bytes.Repeat([]byte{'b'}, 4516))
	// g stays dirty: the recovery still writes back what it should.
	wantG := bytes.Repeat([]byte{'g'}, 3000)
	write("g", wantG)
	wantH := bytes.Repeat([]byte{'h'}, 2000)
	if renameOver {
		write("h", wantH)
		if err := v1.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		write("f", bytes.Repeat([]byte{'c'}, 4516)) // dirty again
	}
	e, err := v1.Lookup(ctx, v1.Root(), vfs.Cred{}, "f")
	if err != nil {
		t.Fatal(err)
	}
	i := e.Inode
	if isProvFH(i.FH) {
		t.Fatal("f is still a file made locally after the sync")
	}
	if cf := cacheFileOrNil(i); cf == nil || !cf.NeedsWriteBack() {
		t.Fatal("f has no data to write back before its removal")
	}

	cacheB := t.TempDir()
	copied := false
	mgrOf(v1).beforeRemoved.set(func(in *vfs.Inode) {
		if in != i || copied {
			return
		}
		copied = true
		if p := mgrOf(v1).permits; permits && p != nil {
			if err := p.flush(ctx, "test: a recall"); err != nil {
				t.Errorf("reintegrating the logged REMOVE: %v", err)
			}
		}
		copyDir(t, cacheA, cacheB) // the kill
	})
	local := StatsOf(v1).LocalChanges.Load()
	if renameOver {
		h, err := v1.Lookup(ctx, v1.Root(), vfs.Cred{}, "h")
		if err != nil {
			t.Fatal(err)
		}
		if err := v1.Rename(ctx, v1.Root(), "h", v1.Root(), "f", vfs.Cred{}, i, h.Inode, false); err != nil {
			t.Fatal(err)
		}
	} else if err := v1.Remove(ctx, v1.Root(), vfs.Cred{}, "f", i); err != nil {
		t.Fatal(err)
	}
	mgrOf(v1).beforeRemoved.set(nil)
	if !copied {
		t.Fatal("the removal did not reach snfsRemoved")
	}
	if made := StatsOf(v1).LocalChanges.Load() > local; made != permits {
		t.Fatalf("the REMOVE made locally: %v; want %v", made, permits)
	}
	if got, err := os.ReadFile(filepath.Join(export, "f")); renameOver && !bytes.Equal(got, wantH) {
		t.Fatalf("f on the server after h's rename over it: %d bytes, %v; want h's %d", len(got), err, len(wantH))
	} else if !renameOver && !os.IsNotExist(err) {
		t.Fatalf("f on the server after its removal: %v", err)
	}
	if err := v1.Close(); err != nil {
		t.Fatal(err)
	}

	var recLog lockedBuffer
	cfg.CacheDir, cfg.Logger = cacheB, slog.New(slog.NewTextHandler(&recLog, nil))
	v2, err := OpenSNFS(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer v2.Close()
	copies, _ := filepath.Glob(filepath.Join(export, "*.snfs-conflict-*"))
	if len(copies) != 0 {
		t.Errorf("conflict copies %q after the restart; want none (f was removed by this client); the recovery's log:\n%s", copies, recLog.String())
	}
	if st := StatsOf(v2); st.Conflicts.Load() != 0 {
		t.Errorf("conflicts %d; want 0", st.Conflicts.Load())
	}
	if got, err := os.ReadFile(filepath.Join(export, "f")); renameOver && !bytes.Equal(got, wantH) {
		t.Errorf("f on the server after the restart: %d bytes, %v; want h's %d", len(got), err, len(wantH))
	} else if !renameOver && !os.IsNotExist(err) {
		t.Errorf("f is back on the server after the restart: %v", err)
	}
	if err := v2.Sync(ctx); err != nil {
		t.Error(err)
	}
	if got, _ := os.ReadFile(filepath.Join(export, "g")); !bytes.Equal(got, wantG) {
		t.Errorf("g: the server has %d bytes after the recovery; want %d", len(got), len(wantG))
	}
}
