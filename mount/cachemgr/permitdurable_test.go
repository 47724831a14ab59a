package cachemgr

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"snfs/mount/vfs"
	"snfs/snfs1"
	"snfs/state"
	"snfs/store"
)

// failingFlush is a server data flush (server.Config.Sync) that fails with
// EIO the flushes of regular files holding data while fail is above zero
// (one fewer each), as a disk that refuses writes: the flush of a
// REINTEGRATE batch's STORE, of a FILE_SYNC WRITE or of a COMMIT. Empty
// files (a batch's CREATEs) and directories flush.
type failingFlush struct{ fail atomic.Int64 }

func (ff *failingFlush) sync(n *store.Node, dataOnly bool) error {
	if n.Stat.Mode&syscall.S_IFMT == syscall.S_IFREG && ff.fail.Load() > 0 {
		var st unix.Stat_t
		if unix.Fstat(n.FD(), &st) == nil && st.Size > 0 && ff.fail.Add(-1) >= 0 {
			return syscall.EIO
		}
	}
	return store.SyncNode(n, dataOnly)
}

// createLocal creates name in d through v with local data (--permit-data),
// writes data and closes it (a FLUSH), and returns the open, not released,
// and its provisional id.
func createLocal(t *testing.T, v *vfs.FS, sn *snfsFS, d *vfs.Inode, name string, data []byte) (*vfs.File, uint64) {
	t.Helper()
	ctx := context.Background()
	e, f, err := v.Create(ctx, d, vfs.Cred{}, name, 0o644, false, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	if !isProvFH(e.Inode.FH) || offOf(f) == nil {
		t.Fatalf("the create was not made locally with local data (handle %x)", e.Inode.FH)
	}
	if _, err := sn.Write(ctx, f, 0, data); err != nil {
		t.Fatal(err)
	}
	if err := sn.Flush(ctx, f); err != nil {
		t.Fatal(err)
	}
	o, ok := sn.permits.made.of(e.Inode.FH)
	if !ok {
		t.Fatal("no provisional object")
	}
	return f, o.id
}

// TestPermitStoreLeftInLogNotOverwritten (F1): a small file's CML_STORE
// whose batch failed after the batch that made the file was applied stays
// in the log; the file is then written again, and the newer data must end
// on the server, never the STORE's older data sent after it:
//   - callback: on its local data (an open still open), and another
//     client's open calls the mount back: the log (the STORE) goes before
//     the newer data is pushed;
//   - open: through a new open (of the real file), fsync'd: the open
//     sends the log first, so the newer data's WRITE comes after the STORE.
func TestPermitStoreLeftInLogNotOverwritten(t *testing.T) {
	for _, how := range []string{"callback", "open"} {
		t.Run(how, func(t *testing.T) { storeLeftInLog(t, how) })
	}
}

func storeLeftInLog(t *testing.T, how string) {
	ff := &failingFlush{}
	s := newServerSync(t, true, ff.sync)
	v, sn, d := permitsMountData(t, s, "permits-store-left-"+how, true)
	holdPermit(t, sn, d)
	ctx := context.Background()
	if _, err := v.ReadDir(ctx, d, vfs.Cred{}); err != nil {
		t.Fatal(err)
	}
	old, newer := []byte("older data, stored"), []byte("newer data, written after the STORE")
	f, id := createLocal(t, v, sn, d, "victim", old)
	p := sn.permits
	// The file's CREATE ends the first batch; its STORE, appended at the
	// reintegration, goes alone in the second.
	logCreates(t, sn, d, "c", snfs1.ReintegrateMax-p.log.Len())
	ff.fail.Store(1)
	if err := p.flush(ctx, "test"); err == nil {
		t.Fatal("the reintegration whose second batch failed returned no error")
	}
	fh, made := p.log.Handle(id)
	if !made || !p.log.Stores(id) {
		t.Fatalf("after the failed batch: made %v, STORE in the log %v; want both", made, p.log.Stores(id))
	}
	switch how {
	case "callback":
		// Written again on its local data (the open made before the
		// reintegration goes on on it).
		if _, err := sn.Write(ctx, f, 0, newer); err != nil {
			t.Fatal(err)
		}
		if err := sn.Flush(ctx, f); err != nil {
			t.Fatal(err)
		}
		sn.Callback(ctx, fh, state.Writeback, nil)
		if err := v.Release(ctx, f); err != nil {
			t.Fatal(err)
		}
	case "open":
		i := f.I
		if err := v.Release(ctx, f); err != nil {
			t.Fatal(err)
		}
		g, _, err := v.Open(ctx, i, vfs.Cred{}, syscall.O_RDWR|syscall.O_TRUNC)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sn.Write(ctx, g, 0, newer); err != nil {
			t.Fatal(err)
		}
		if err := sn.Fsync(ctx, g); err != nil {
			t.Fatal(err)
		}
		if err := v.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	if err := sn.SyncDir(ctx, d); err != nil {
		t.Fatal(err)
	}
	srv := filepath.Join(s.export, "d", "victim")
	if got, err := os.ReadFile(srv); err != nil || !bytes.Equal(got, newer) {
		t.Errorf("the server's d/victim: %q, %v; want the newer data %q", got, err, newer)
	}
	if p.log.Stores(id) || p.offDataOf(id) != nil {
		t.Error("the STORE or the local data is still held")
	}
}

// TestPermitDataSyncDirFailsUntilPushed (F2): a file made locally whose
// push after its reintegration fails (the server cannot flush it): the
// directory's fsync fails (EIO), and once the server can flush again,
// a directory's fsync with an empty log pushes it; a second such file is
// pushed by the log's loop alone, with no call of the application.
func TestPermitDataSyncDirFailsUntilPushed(t *testing.T) {
	ff := &failingFlush{}
	s := newServerSync(t, true, ff.sync)
	v, sn, d := permitsMountData(t, s, "permits-data-syncdir", true)
	holdPermit(t, sn, d)
	ctx := context.Background()
	p := sn.permits
	for k, name := range []string{"one", "two"} {
		holdPermit(t, sn, d)
		if _, err := v.ReadDir(ctx, d, vfs.Cred{}); err != nil {
			t.Fatal(err)
		}
		data := bytes.Repeat([]byte(name), snfs1.StoreMax) // pushed by WRITE, not stored
		f, id := createLocal(t, v, sn, d, name, data)
		if err := v.Release(ctx, f); err != nil {
			t.Fatal(err)
		}
		ff.fail.Store(1 << 40)
		err := sn.SyncDir(ctx, d)
		if !errors.Is(err, syscall.EIO) {
			t.Fatalf("%s: the directory's fsync with the push failing: %v; want EIO", name, err)
		}
		if p.log.Len() != 0 || p.offDataOf(id) == nil {
			t.Fatalf("%s: after the failed push: %d records, local data %v; want none and held", name, p.log.Len(), p.offDataOf(id) != nil)
		}
		ff.fail.Store(0)
		if k == 0 {
			if err := sn.SyncDir(ctx, d); err != nil {
				t.Fatalf("%s: the directory's fsync once the server flushes: %v", name, err)
			}
		} else if !waitFor(30*time.Second, func() bool { return p.offDataOf(id) == nil }) {
			t.Fatalf("%s: the log's loop did not push the data again", name)
		}
		if p.offDataOf(id) != nil {
			t.Fatalf("%s: the local data is still held", name)
		}
		if got, err := os.ReadFile(filepath.Join(s.export, "d", name)); err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s: the server's file: %d bytes, %v; want %d", name, len(got), err, len(data))
		}
	}
}

// TestPermitDataPushedAtStart (F2): the data of a file made locally that
// could not be pushed before the mount ended (its unmount failed, EIO)
// is pushed by the next mount on the cache directory as it starts, with
// an empty log.
func TestPermitDataPushedAtStart(t *testing.T) {
	ff := &failingFlush{}
	s := newServerSync(t, true, ff.sync)
	if err := os.Mkdir(filepath.Join(s.export, "d"), 0o777); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cache := t.TempDir()
	open := func() (*vfs.FS, *snfsFS) {
		v, err := OpenSNFS(ctx, SNFSMountConfig{Addr: s.addr, Export: s.export, Name: "permits-data-start",
			CacheDir: cache, WriteBackDelay: time.Hour, Permits: true, PermitData: true,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		return v, mgrOf(v)
	}
	v, sn := open()
	e, err := v.Lookup(ctx, v.Root(), vfs.Cred{}, "d")
	if err != nil {
		t.Fatal(err)
	}
	d := e.Inode
	holdPermit(t, sn, d)
	if _, err := v.ReadDir(ctx, d, vfs.Cred{}); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("pushed at the start;"), snfs1.StoreMax/10)
	f, id := createLocal(t, v, sn, d, "f", data)
	if err := v.Release(ctx, f); err != nil {
		t.Fatal(err)
	}
	ff.fail.Store(1 << 40)
	if err := v.Sync(ctx); !errors.Is(err, syscall.EIO) {
		t.Errorf("Sync with the push failing: %v; want EIO", err)
	}
	if err := v.Close(); !errors.Is(err, syscall.EIO) {
		t.Errorf("the unmount with the push failing: %v; want EIO", err)
	}
	ff.fail.Store(0)
	v, sn = open()
	defer v.Close()
	if sn.permits.offDataOf(id) != nil {
		t.Error("the local data is still held after the start")
	}
	if got, err := os.ReadFile(filepath.Join(s.export, "d", "f")); err != nil || !bytes.Equal(got, data) {
		t.Errorf("the server's file: %d bytes, %v; want %d", len(got), err, len(data))
	}
}

// waitFor polls cond until it holds or limit passes (a bound, not a
// timing assertion) and reports whether it held.
func waitFor(limit time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// refusingFlush is a server data flush (server.Config.Sync) that fails
// with EIO, while on, the flushes of a regular file of bad's size: the
// flush of a REINTEGRATE batch whose STORE wrote bad fails, those of the
// same file holding other data (of another size) do not.
type refusingFlush struct {
	on  atomic.Bool
	bad []byte
}

func (rf *refusingFlush) sync(n *store.Node, dataOnly bool) error {
	if rf.on.Load() && n.Stat.Mode&syscall.S_IFMT == syscall.S_IFREG {
		// By its size: reading it would open it, which the server's
		// leases take for a local process's open (a callback).
		var st unix.Stat_t
		if unix.Fstat(n.FD(), &st) == nil && st.Size == int64(len(rf.bad)) {
			return syscall.EIO
		}
	}
	return store.SyncNode(n, dataOnly)
}

// TestPermitStoreLeftInLogRemount (F1): a small file's STORE whose batch
// fails again and again (the server cannot flush what it writes) stays in
// the log while the file's local data is written again; the mount ends
// (its unmount fails: the data is not on the server) and a new mount on
// the cache directory resends the log once the server can flush. The
// server must end with the newer data: no push of it goes before the
// STORE, neither in the mount that ends (whose mark of the file is gone
// with the write) nor in the new one (which has no mark).
func TestPermitStoreLeftInLogRemount(t *testing.T) {
	old, newer := []byte("older data, stored"), []byte("newer data, written after the STORE")
	rf := &refusingFlush{bad: old}
	s := newServerSync(t, true, rf.sync)
	if err := os.Mkdir(filepath.Join(s.export, "d"), 0o777); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cache := t.TempDir()
	open := func() (*vfs.FS, *snfsFS) {
		v, err := OpenSNFS(ctx, SNFSMountConfig{Addr: s.addr, Export: s.export, Name: "permits-store-remount",
			CacheDir: cache, WriteBackDelay: time.Hour, Permits: true, PermitData: true,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		return v, mgrOf(v)
	}
	v, sn := open()
	e, err := v.Lookup(ctx, v.Root(), vfs.Cred{}, "d")
	if err != nil {
		t.Fatal(err)
	}
	d := e.Inode
	holdPermit(t, sn, d)
	if _, err := v.ReadDir(ctx, d, vfs.Cred{}); err != nil {
		t.Fatal(err)
	}
	f, id := createLocal(t, v, sn, d, "victim", old)
	p := sn.permits
	logCreates(t, sn, d, "c", snfs1.ReintegrateMax-p.log.Len())
	rf.on.Store(true)
	if err := p.flush(ctx, "test"); err == nil {
		t.Fatal("the reintegration whose second batch failed returned no error")
	}
	if _, made := p.log.Handle(id); !made || !p.log.Stores(id) {
		t.Fatalf("after the failed batch: made %v, STORE in the log %v; want both", made, p.log.Stores(id))
	}
	if _, err := sn.Write(ctx, f, 0, newer); err != nil {
		t.Fatal(err)
	}
	if err := sn.Flush(ctx, f); err != nil {
		t.Fatal(err)
	}
	if err := v.Release(ctx, f); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err == nil {
		t.Error("the unmount with the STORE's batch failing returned no error")
	}
	rf.on.Store(false)
	v, sn = open()
	defer v.Close()
	if sn.permits.log.Len() != 0 || sn.permits.offDataOf(id) != nil {
		t.Errorf("after the remount: %d records, local data held %v; want none", sn.permits.log.Len(), sn.permits.offDataOf(id) != nil)
	}
	if got, err := os.ReadFile(filepath.Join(s.export, "d", "victim")); err != nil || !bytes.Equal(got, newer) {
		t.Errorf("the server's d/victim: %q, %v; want the newer data %q", got, err, newer)
	}
}
