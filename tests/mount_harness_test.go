package tests

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
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
	// end unmounts, writes back and closes the mount, each step bounded by
	// wait, and returns what went wrong (endMount); only the first call
	// does anything (later ones return nothing). The test's cleanup calls
	// it with 10 s and fails the test on what it returns.
	end func(wait time.Duration) []error
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
	return newMountAt(t, e, e.addr, cfg)
}

// newMountAt is newMountConfig reaching e's server at addr (a proxy's).
func newMountAt(t *testing.T, e *env, addr string, cfg vfs.Config) *mount {
	t.Helper()
	return newMountWith(t, e, snfsmount.Config{Addr: addr, NFSConfig: cfg})
}

// newMountWith is the one setup of the tests' in-process nfs mode mounts
// (mount.Open, as `snfs mount --mode=nfs`, then Serve) with the settings of
// cfg: its Mode, Export and Dir are filled in (a fresh directory), Addr if
// empty (e's), Logger if nil (quiet).
func newMountWith(t *testing.T, e *env, cfg snfsmount.Config) *mount {
	t.Helper()
	requireFUSE(t)
	dir := diskTempDir(t, "snfs-mnt-")
	cfg.Mode, cfg.Export, cfg.Dir = snfsmount.NFS, e.cfg.Exports[0].Path, dir
	if cfg.Addr == "" {
		cfg.Addr = e.addr
	}
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	life, cancel := context.WithCancel(context.Background())
	ctx, stop := context.WithTimeout(life, 10*time.Second)
	defer stop()
	mt, err := snfsmount.Open(ctx, cfg)
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
	var once sync.Once
	m.end = func(wait time.Duration) (errs []error) {
		once.Do(func() { errs = endMount(mt, dir, srv, life, cancel, wait) })
		return errs
	}
	t.Cleanup(func() {
		for _, err := range m.end(10 * time.Second) { // nothing if the test called it
			t.Error(err)
		}
	})
	return m
}

// endMount unmounts mt (forced if a normal unmount does not work within
// wait), writes back what it still holds (Finish, within wait) and closes it;
// it returns what went wrong. Finish's flush of a file waits for one already
// running, and a FUSE request's flush runs on the mount's life context with
// no deadline: to a server that is gone for good, its WRITEs are retried for
// ever (a CI run hung here: a close's FLUSH to a server whose restart had
// failed). So when Finish is not back 2*wait after it started, life is
// cancelled (ending every RPC of the mount) and Finish waited for once more;
// either way the test is failed, not hung.
func endMount(mt *snfsmount.Mount, dir string, srv *fuse.Server, life context.Context, cancel context.CancelFunc, wait time.Duration) []error {
	defer cancel()
	var errs []error
	busy := busyReport(dir, srv)
	if err := mt.Unmount(wait); err != nil {
		errs = append(errs, unmountError(err, busy))
	}
	sctx, scancel := context.WithTimeout(life, wait)
	defer scancel()
	errs = append(errs, finishBounded("sync after unmount", func() error { return mt.Finish(sctx) }, wait, cancel)...)
	if len(errs) > 0 && strings.Contains(errs[len(errs)-1].Error(), stillRunning) {
		return errs // Close would race with the Finish still running
	}
	cancel()
	mt.Close()
	return errs
}

// unmountError is an unmount's failure with what held the mount just before
// (busyReport), if it was in use.
func unmountError(err error, busy string) error {
	if busy == "" {
		return fmt.Errorf("unmount: %w (the mount was not in use just before)", err)
	}
	return fmt.Errorf("unmount: %w; just before, the mount was in use: %s", err, busy)
}

const stillRunning = "still running"

// finishBounded runs finish, a write-back bounded by wait through its context,
// and returns what went wrong (what names it). A FUSE request's flush runs on
// the mount's life context with no deadline, and finish waits for it: when
// finish is not back 2*wait after it started, cancelLife (if not nil) ends the
// mount's RPCs, and finish is waited for wait more; if it is still not back,
// the last error says stillRunning and the caller leaves the mount as it is.
func finishBounded(what string, finish func() error, wait time.Duration, cancelLife func()) []error {
	done := make(chan error, 1)
	go func() { done <- finish() }()
	var errs []error
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * wait):
		errs = append(errs, fmt.Errorf("%s: not back %v after its %v deadline (a flush on the mount's life context to a server that is gone?): cancelling the mount's context", what, wait, wait))
		if cancelLife != nil {
			cancelLife()
		}
		select {
		case err = <-done:
		case <-time.After(wait):
			return append(errs, fmt.Errorf("%s: %s %v after that: the mount is left open", what, stillRunning, wait))
		}
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", what, err))
	}
	return errs
}
