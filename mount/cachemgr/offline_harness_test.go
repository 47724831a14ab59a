package cachemgr

import (
	"context"
	"io"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"snfs/mount/vfs"
)

// offlineFS is an in-process snfs-mode mount with disconnected operation
// on request (SetDisconnected), for the tests of what is made offline.
type offlineFS struct {
	*vfs.FS
	t        *testing.T
	ctx      context.Context
	c        vfs.Cred // the test's own user
	cacheDir string
	cfg      SNFSMountConfig // what it was opened with
}

// openOffline mounts the export of the server at addr with a cache
// directory of its own, delayed write-back and disconnected operation;
// tune (if any) changes the configuration first. The mount is closed at
// the test's end.
func openOffline(t *testing.T, addr, exp string, tune func(*SNFSMountConfig)) *offlineFS {
	t.Helper()
	cfg := SNFSMountConfig{Addr: addr, Export: exp, Name: "A",
		CacheDir: t.TempDir(), WriteBackDelay: time.Hour, Disconnected: true, DisconnectAfter: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if tune != nil {
		tune(&cfg)
	}
	ctx := context.Background()
	fs, err := OpenSNFS(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	return &offlineFS{FS: fs, t: t, ctx: ctx, cacheDir: cfg.CacheDir, cfg: cfg,
		c: vfs.Cred{UID: uint32(syscall.Getuid()), GID: uint32(syscall.Getgid())}}
}

// killSession ends fs's part in the protocol as a kill of its process
// would: offline, its connection closed with no UNREGISTER (the server
// keeps the client's state and the last LSN it applied for its name, which
// a clean end would forget). Left running, the mount would register again
// whenever the remount under the same name registers (a changed client id),
// and the two would take the registration, and with it the remount's
// promises, from each other.
func killSession(t *testing.T, fs *vfs.FS) {
	t.Helper()
	if err := SetDisconnected(fs, true); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, off := DisconnectedSince(fs); off {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("offline not reached 20 s after the request")
		}
	}
	mgrOf(fs).sess.Disconnect()
}

// setOffline asks the mount to go offline (off) or back online, and waits
// until it is.
func (o *offlineFS) setOffline(off bool) {
	o.t.Helper()
	if err := SetDisconnected(o.FS, off); err != nil {
		o.t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, is := DisconnectedSince(o.FS); is == off {
			return
		}
		if time.Now().After(deadline) {
			o.t.Fatalf("offline %v not reached 20 s after the request", off)
		}
	}
}

// lookup is Lookup of name in dir (nil: the root), which must succeed.
func (o *offlineFS) lookup(dir *vfs.Inode, name string) vfs.Entry {
	o.t.Helper()
	if dir == nil {
		dir = o.Root()
	}
	e, err := o.Lookup(o.ctx, dir, o.c, name)
	if err != nil {
		o.t.Fatalf("lookup of %s: %v", name, err)
	}
	return e
}

// listed lists dir (nil: the root), which must succeed: the offline copy
// of a directory is made of a complete listing.
func (o *offlineFS) listed(dir *vfs.Inode) {
	o.t.Helper()
	if dir == nil {
		dir = o.Root()
	}
	if _, err := o.ReadDir(o.ctx, dir, o.c); err != nil {
		o.t.Fatal(err)
	}
}

// writeNew creates name in dir (exclusive) and writes data to it, closed
// (flushed and released) at once.
func (o *offlineFS) writeNew(dir *vfs.Inode, name string, data []byte) vfs.Entry {
	o.t.Helper()
	e, w, err := o.Create(o.ctx, dir, o.c, name, 0o644, true, syscall.O_WRONLY)
	if err != nil {
		o.t.Fatalf("create of %s: %v", name, err)
	}
	if _, err := o.Write(o.ctx, w, 0, data); err != nil {
		o.t.Fatal(err)
	}
	if err := o.Flush(o.ctx, w); err != nil {
		o.t.Fatal(err)
	}
	if err := o.Release(o.ctx, w); err != nil {
		o.t.Fatal(err)
	}
	return e
}

// copyNlink is the link count of name in the offline copy of dir (0: no
// copy, or no such name in it): what is served after the kernel forgets the
// inode.
func (o *offlineFS) copyNlink(dir *vfs.Inode, name string) uint32 {
	sn := o.Ops().(*snfsFS)
	sn.names.mu.Lock()
	defer sn.names.mu.Unlock()
	cp := sn.names.offl[string(dir.FH)]
	if cp == nil {
		return 0
	}
	k, ok := cp.index[name]
	if !ok {
		return 0
	}
	return cp.ents[k].attr.Nlink
}
