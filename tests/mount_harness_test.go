package tests

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	snfsmount "snfs/mount"
	"snfs/mount/fusefs"
	"snfs/mount/vfs"
)

// mount is one `snfs mount --mode=nfs` of an env's export, served in this
// process.
type mount struct {
	dir string
	v   *vfs.FS
	srv *fuse.Server
}

func requireFUSE(t testing.TB) {
	t.Helper()
	requireRoot(t)
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("needs /dev/fuse (CI has it): ", err)
	}
}

// newMount mounts e's export on a fresh directory under /var/tmp and unmounts
// it when the test ends, failed or not (a forced, lazy unmount if a normal one
// does not work within 10 s: a mount left behind would hang later tests).
func newMount(t *testing.T, e *env) *mount {
	t.Helper()
	return newMountConfig(t, e, vfs.Config{})
}

// newMountConfig is newMount with the vfs settings of cfg (its NFS, Root and
// Logger are filled in).
func newMountConfig(t *testing.T, e *env, cfg vfs.Config) *mount {
	t.Helper()
	requireFUSE(t)
	dir := diskTempDir(t, "snfs-mnt-")
	life, cancel := context.WithCancel(context.Background())
	ctx, stop := context.WithTimeout(life, 10*time.Second)
	defer stop()
	mt, err := snfsmount.Open(ctx, snfsmount.Config{Mode: snfsmount.NFS, Addr: e.addr, Export: e.cfg.Exports[0].Path,
		Dir: dir, Logger: quietLogger(), NFSConfig: cfg})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	srv, err := mt.Serve(life, fusefs.Options{FsName: "127.0.0.1:" + e.cfg.Exports[0].Path})
	if err != nil {
		cancel()
		mt.Close()
		t.Fatal(err)
	}
	m := &mount{dir: dir, v: mt.FS, srv: srv}
	t.Cleanup(func() {
		if err := mt.Unmount(10 * time.Second); err != nil {
			t.Errorf("unmount: %v", err)
		}
		sctx, scancel := context.WithTimeout(life, 10*time.Second)
		if err := mt.Finish(sctx); err != nil {
			t.Errorf("sync after unmount: %v", err)
		}
		scancel()
		cancel()
		mt.Close()
	})
	return m
}
