package cachemgr

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"snfs/mount/vfs"
)

// TestOfflineCheckedKilled: offline, the mount makes d/n and removes d/f;
// a process on the server rewrites d/f meanwhile. At reconnection the
// check of the names poisons f (its UNLINK is kept as a conflict, not
// sent). The mount is killed right after the check (its cache directory
// copied there): the remount from that copy must not send the UNLINK
// either (what the check found is kept with the log), though nothing it
// could check again tells it so (n was made by then, the LSN moved past
// it).
func TestOfflineCheckedKilled(t *testing.T) {
	addr, exp := testServer(t)
	if err := os.Mkdir(filepath.Join(exp, "d"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(exp, "d", "f"), []byte("the server's f"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := openOffline(t, addr, exp, func(cfg *SNFSMountConfig) { cfg.Name = "offcheck" })
	ctx, cacheA, cacheB := a.ctx, a.cacheDir, t.TempDir()
	d := a.lookup(nil, "d")
	a.listed(d.Inode)
	f := a.lookup(d.Inode, "f")
	a.setOffline(true)
	a.writeNew(d.Inode, "n", []byte("made offline"))
	if err := a.Remove(ctx, d.Inode, a.c, "f", f.Inode); err != nil {
		t.Fatalf("remove offline: %v", err)
	}
	theirs := []byte("a process on the server wrote f meanwhile")
	if err := os.WriteFile(filepath.Join(exp, "d", "f"), theirs, 0o644); err != nil {
		t.Fatal(err)
	}

	copied := make(chan struct{})
	mgrOf(a.FS).afterOffCheck.set(func(*vfs.Inode) {
		select {
		case <-copied:
		default:
			copyDir(t, cacheA, cacheB) // the kill
			close(copied)
		}
	})
	if err := SetDisconnected(a.FS, false); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile(filepath.Join(exp, "d", "n"))
		if err == nil && string(b) == "made offline" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the export's d/n after reconnection: %q, %v", b, err)
		}
	}
	select {
	case <-copied:
	default:
		t.Fatal("the reconnection did not check the names")
	}
	mgrOf(a.FS).afterOffCheck.set(nil)
	if cs, _ := ReadConflicts(cacheA); len(cs) != 1 || cs[0].Name != "f" {
		t.Fatalf("conflicts of the mount that checked: %+v; want one, f's UNLINK", cs)
	}
	// a is not closed before the remount: a kill sends no UNREGISTER, and
	// the server keeps the last LSN it applied for the name (a clean end
	// would forget it, and the remount would send the CREATE again).
	killSession(t, a.FS)

	cfg := a.cfg
	cfg.CacheDir = cacheB
	b, err := OpenSNFS(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Sync(ctx); err != nil {
		t.Logf("sync of the remount: %v", err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got, err := os.ReadFile(filepath.Join(exp, "d", "f"))
		if err != nil || string(got) != string(theirs) {
			t.Fatalf("the export's d/f after the remount: %q, %v; want the server process's change kept", got, err)
		}
		if cs, _ := ReadConflicts(cacheB); len(cs) == 1 && cs[0].Name == "f" {
			break
		}
		if time.Now().After(deadline) {
			cs, _ := ReadConflicts(cacheB)
			t.Fatalf("conflicts of the remount: %+v; want one, f's UNLINK", cs)
		}
	}
}
