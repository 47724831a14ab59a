package cachemgr

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"snfs/mount/vfs"
)

// TestOfflineCheckedKilledAfterLog: as TestOfflineCheckedKilled, but the
// mount is killed after the whole log is on the server and before the
// findings of the check are dropped (offDone): the remount finds an empty
// log and the bases file of the check, f poisoned. A later offline removal
// of f (the server's f, which nobody changed since the remount looked it
// up) must reach the server: the finding of a log that is all in must not
// outlive it and refuse a record of a later one as a conflict.
func TestOfflineCheckedKilledAfterLog(t *testing.T) {
	addr, exp := testServer(t)
	if err := os.Mkdir(filepath.Join(exp, "d"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(exp, "d", "f"), []byte("the server's f"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := openOffline(t, addr, exp, func(cfg *SNFSMountConfig) { cfg.Name = "offstale" })
	ctx, cacheA, cacheB := a.ctx, a.cacheDir, t.TempDir()
	d := a.lookup(nil, "d")
	a.listed(d.Inode)
	f := a.lookup(d.Inode, "f")
	a.setOffline(true)
	if err := a.Remove(ctx, d.Inode, a.c, "f", f.Inode); err != nil {
		t.Fatalf("remove offline: %v", err)
	}
	if err := os.WriteFile(filepath.Join(exp, "d", "f"), []byte("a process on the server wrote f meanwhile"), 0o644); err != nil {
		t.Fatal(err)
	}
	basesA := filepath.Join(cacheA, "offline", "bases")
	var found []byte
	checked := make(chan struct{})
	sn := mgrOf(a.FS)
	sn.afterOffCheck.set(func(*vfs.Inode) {
		sn.afterOffCheck.set(nil)
		found, _ = os.ReadFile(basesA)
		close(checked)
	})
	if err := SetDisconnected(a.FS, false); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		cs, _ := ReadConflicts(cacheA)
		if len(cs) == 1 && sn.permits.log.Len() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after reconnection: conflicts %+v, log %d; want f's UNLINK kept as a conflict", cs, sn.permits.log.Len())
		}
	}
	<-checked
	if len(found) == 0 {
		t.Fatal("no bases file after the check")
	}
	// The kill: the log is in, the check's findings are still on disk.
	killSession(t, a.FS)
	copyDir(t, cacheA, cacheB)
	if err := os.WriteFile(filepath.Join(cacheB, "offline", "bases"), found, 0o600); err != nil {
		t.Fatal(err)
	}

	cfg := a.cfg
	cfg.CacheDir = cacheB
	fsB, err := OpenSNFS(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer fsB.Close()
	b := &offlineFS{FS: fsB, t: t, ctx: ctx, c: a.c, cacheDir: cacheB, cfg: cfg}
	d = b.lookup(nil, "d")
	b.listed(d.Inode)
	f = b.lookup(d.Inode, "f")
	b.setOffline(true)
	if err := b.Remove(ctx, d.Inode, b.c, "f", f.Inode); err != nil {
		t.Fatalf("remove offline after the remount: %v", err)
	}
	b.setOffline(false)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, ferr := os.Stat(filepath.Join(exp, "d", "f"))
		cs, _ := ReadConflicts(cacheB)
		if os.IsNotExist(ferr) && len(cs) == 1 {
			break
		}
		if time.Now().After(deadline) || len(cs) > 1 {
			t.Fatalf("after the remount's reconnection: d/f %v, conflicts %+v; want f removed, no new conflict", ferr, cs)
		}
	}
}
