package tests

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"snfs/metrics"
	snfsmount "snfs/mount"
	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/server"
)

// The file system's own guard of a read-only mount (mount/vfs/readonly.go),
// which the kernel's MS_RDONLY hides from tests through a mount: every
// changing vfs call fails with NFS3ERR_ROFS (EROFS) before anything is sent,
// and an snfs-mode read-only mount does not start from a cache directory it
// would have to write back.

// TestVFSReadOnly calls every changing operation of a read-only vfs (nfs and
// snfs mode) directly: each fails with ROFS, the server gets no changing
// call, and reads work.
func TestVFSReadOnly(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	for _, mode := range []string{"nfs", "snfs"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, "rw,no_root_squash")
			reg := metrics.New()
			e.restartWith(func(c *server.Config) { c.Metrics, c.Observer = reg, reg })
			if err := os.WriteFile(e.path("f"), []byte("data"), 0o666); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(e.path("d"), 0o777); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			// mount.Open without Serve: the vfs's own guard, below the
			// kernel's MS_RDONLY, which would hide it.
			mt, err := snfsmount.Open(ctx, snfsmount.Config{Mode: snfsmount.Mode(mode), Addr: e.addr, Export: e.dir,
				Name: "ro:vfs", CacheDir: diskTempDir(t, "snfs-cache-"), Logger: quietLogger(), ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer mt.Close()
			v := mt.FS
			if !v.ReadOnly() {
				t.Fatal("ReadOnly() is false")
			}
			c := vfs.Cred{}
			root := v.Root()
			fe, err := v.Lookup(ctx, root, c, "f")
			if err != nil {
				t.Fatal(err)
			}
			de, err := v.Lookup(ctx, root, c, "d")
			if err != nil {
				t.Fatal(err)
			}
			f, _, err := v.Open(ctx, fe.Inode, c, syscall.O_RDONLY)
			if err != nil {
				t.Fatalf("a read open: %v", err)
			}
			buf := make([]byte, 16)
			if n, err := v.Read(ctx, f, 0, buf); err != nil || string(buf[:n]) != "data" {
				t.Fatalf("read %q, %v", buf[:n], err)
			}
			mode := uint32(0o600)
			for _, op := range []struct {
				what string
				do   func() error
			}{
				{"open O_WRONLY", func() error { _, _, err := v.Open(ctx, fe.Inode, c, syscall.O_WRONLY); return err }},
				{"open O_RDWR", func() error { _, _, err := v.Open(ctx, fe.Inode, c, syscall.O_RDWR); return err }},
				{"open O_TRUNC", func() error { _, _, err := v.Open(ctx, fe.Inode, c, syscall.O_RDONLY|syscall.O_TRUNC); return err }},
				{"write", func() error { _, err := v.Write(ctx, f, 0, []byte("x")); return err }},
				{"append", func() error { _, _, err := v.Append(ctx, f, []byte("x")); return err }},
				{"create", func() error { _, _, err := v.Create(ctx, root, c, "new", 0o644, false, syscall.O_WRONLY); return err }},
				{"mkdir", func() error { _, err := v.Mkdir(ctx, root, c, "d2", 0o755); return err }},
				{"symlink", func() error { _, err := v.Symlink(ctx, root, c, "l", "f"); return err }},
				{"mknod", func() error { _, err := v.Mknod(ctx, root, c, "p", nfs3.TypeFifo, 0o644, 0, 0); return err }},
				{"link", func() error { _, err := v.Link(ctx, fe.Inode, root, c, "h"); return err }},
				{"remove", func() error { return v.Remove(ctx, root, c, "f", fe.Inode) }},
				{"rmdir", func() error { return v.Rmdir(ctx, root, c, "d") }},
				{"rename", func() error { return v.Rename(ctx, root, "f", de.Inode, "g", c, nil, nil, false) }},
				{"setattr", func() error { _, _, err := v.Setattr(ctx, fe.Inode, c, vfs.SetAttr{Mode: &mode}); return err }},
				{"access modify", func() error { _, err := v.Access(ctx, fe.Inode, c, nfs3.AccessModify); return err }},
			} {
				if err := op.do(); !errors.Is(err, nfs3.ErrROFS) {
					t.Errorf("%s: %v, want NFS3ERR_ROFS", op.what, err)
				}
			}
			if ok, err := v.Access(ctx, fe.Inode, c, nfs3.AccessRead); err != nil || !ok {
				t.Errorf("access read: %v, %v", ok, err)
			}
			if err := v.Release(ctx, f); err != nil {
				t.Fatal(err)
			}
			if err := v.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			for proc := range changingProcs {
				if n := serverCalls(t, reg, proc); n != 0 {
					t.Errorf("the server got %v %s calls from a read-only vfs", n, proc)
				}
			}
		})
	}
}

// TestVFSReadOnlyDirtyCache: an snfs-mode read-only mount refuses a cache
// directory holding a previous mount's unwritten data (recovery would write
// it to the server), before it sends anything; a read-write one then writes
// it back.
func TestVFSReadOnlyDirtyCache(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	reg := metrics.New()
	e.restartWith(func(c *server.Config) { c.Metrics, c.Observer = reg, reg })
	cacheDir := diskTempDir(t, "snfs-cache-")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// mount.Open without Serve: the dirty cache directory is made through
	// the vfs, and a mount's refusal is Open's.
	cfg := snfsmount.Config{Mode: snfsmount.SNFS, Addr: e.addr, Export: e.dir, Name: "ro:dirty", CacheDir: cacheDir,
		WriteBackDelay: time.Hour, Logger: quietLogger()}
	mt, err := snfsmount.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	v := mt.FS
	_, f, err := v.Create(ctx, v.Root(), vfs.Cred{}, "dirty", 0o644, true, syscall.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Write(ctx, f, 0, []byte("unwritten")); err != nil {
		t.Fatal(err)
	}
	if err := v.Release(ctx, f); err != nil {
		t.Fatal(err)
	}
	// Closed without Sync: the data stays dirty in the cache directory, as
	// after a crash.
	if err := mt.Close(); err != nil {
		t.Fatal(err)
	}
	writes := serverCalls(t, reg, "WRITE")
	registers := serverCalls(t, reg, "REGISTER")
	if registers == 0 {
		t.Fatal("the server counted no REGISTER of the read-write mount")
	}

	ro := cfg
	ro.ReadOnly = true
	_, err = snfsmount.Open(ctx, ro)
	if err == nil || !strings.Contains(err.Error(), "read-only mount: the cache directory "+cacheDir+" holds unwritten data of 1 file(s)") {
		t.Fatalf("a read-only mount with a dirty cache directory: %v", err)
	}
	if n := serverCalls(t, reg, "REGISTER"); n != registers {
		t.Errorf("the refused read-only mount REGISTERed (%v calls, %v before)", n, registers)
	}
	if n := serverCalls(t, reg, "WRITE"); n != writes {
		t.Errorf("the refused read-only mount wrote (%v WRITEs, %v before)", n, writes)
	}
	if mt, err = snfsmount.Open(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if err := mt.Finish(ctx); err != nil {
		t.Fatal(err)
	}
	if err := mt.Close(); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(e.path("dirty")); err != nil || string(got) != "unwritten" {
		t.Fatalf("after a read-write mount: the export has %q, %v", got, err)
	}
}
