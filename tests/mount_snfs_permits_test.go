package tests

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	snfsmount "snfs/mount"
	"snfs/mount/cachemgr"
	"snfs/mount/cml"
	"snfs/mount/fusefs"
	"snfs/nfs3"
	"snfs/snfs1"
)

// Write-back permits, the mount's side (docs/mount.md "The client
// modification log"; --permits=on).

// newPermitsMount mounts e's export in snfs mode with --permits=on, cache
// directory cacheDir ("": a fresh one), as client name.
func newPermitsMount(t *testing.T, e *env, name, cacheDir string) *snfsMount {
	t.Helper()
	requireFUSE(t)
	if cacheDir == "" {
		cacheDir = diskTempDir(t, "snfs-cache-")
	}
	dir := diskTempDir(t, "snfs-mnt-")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mt, err := snfsmount.Open(ctx, snfsmount.Config{Mode: snfsmount.SNFS, Addr: e.addr, Export: e.cfg.Exports[0].Path, Dir: dir,
		Name: name, CacheDir: cacheDir, WriteBackDelay: time.Hour, Logger: quietLogger(), Permits: true})
	if err != nil {
		t.Fatal(err)
	}
	life, cancelLife := context.WithCancel(context.Background())
	srv, err := mt.Serve(life, fusefs.Options{FsName: "127.0.0.1:" + e.cfg.Exports[0].Path})
	if err != nil {
		cancelLife()
		mt.Close()
		t.Fatal(err)
	}
	m := &snfsMount{dir: dir, cacheDir: cacheDir, v: mt.FS, srv: srv, cancel: cancelLife}
	t.Cleanup(func() { m.unmount(t) })
	return m
}

// TestMountSNFSPermitsRestartReplay: a mount killed with records in its
// modification log (written here into its cache directory as the mount
// writes them) is mounted again with the same name: before it serves, it
// gets the permits of the log's directories and reintegrates the log, a
// directory made in it and a file made in that directory included; the
// log is then empty, and `snfs status` shows the log in use and the permit
// held.
func TestMountSNFSPermitsRestartReplay(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e, D := permitEnv(t, "old")
	cacheDir := diskTempDir(t, "snfs-cache-")
	l, err := cml.Open(filepath.Join(cacheDir, "cml"), cml.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	mode := uint32(0o644)
	dmode := uint32(0o755)
	dir := snfs1.ObjRef{FH: D}
	if _, err := l.Append(snfs1.CMLRecord{Op: snfs1.CMLCreate, Dir: dir, Name: "a", Attr: nfs3.Sattr{Mode: &mode}}); err != nil {
		t.Fatal(err)
	}
	sub, err := l.Append(snfs1.CMLRecord{Op: snfs1.CMLMkdir, Dir: dir, Name: "sub", Attr: nfs3.Sattr{Mode: &dmode}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(snfs1.CMLRecord{Op: snfs1.CMLCreate, Dir: snfs1.ObjRef{Prov: sub}, Name: "b", Attr: nfs3.Sattr{Mode: &mode}}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(snfs1.CMLRecord{Op: snfs1.CMLUnlink, Dir: dir, Name: "old"}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	m := newPermitsMount(t, e, "permits-replay:"+cacheDir, cacheDir)
	// No wait: the log was reintegrated before the mount served.
	for _, p := range []string{"d/a", "d/sub/b"} {
		if _, err := os.Lstat(e.path(p)); err != nil {
			t.Errorf("the export after the remount: %v", err)
		}
	}
	if _, err := os.Lstat(e.path("d/old")); !os.IsNotExist(err) {
		t.Errorf("d/old after the remount reintegrated its UNLINK: %v", err)
	}
	st, ok := cachemgr.StatusOf(m.v, 0)
	if !ok || !st.ModLogInUse || !st.PermitsInUse {
		t.Fatalf("status: %+v", st)
	}
	if st.ModLog.Records != 0 {
		t.Errorf("status: %d records left in the log", st.ModLog.Records)
	}
	if len(st.Permits) < 2 {
		t.Errorf("status: permits held %+v; want d's and the new d/sub's", st.Permits)
	}
	// The mount sees what it logged.
	if _, err := os.Lstat(m.path("d/sub/b")); err != nil {
		t.Error(err)
	}
}
