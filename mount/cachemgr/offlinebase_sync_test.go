package cachemgr

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// TestOfflineBasesFlushedWithLog: the base an offline change writes to the
// bases file is flushed when the log's records are (the close of a file
// written offline flushes the log, offSync): a crash of the machine that
// keeps the change's record keeps its base, without which the reconnection
// could not tell the change from another's.
func TestOfflineBasesFlushedWithLog(t *testing.T) {
	var syncs atomic.Int64
	old := syncBasesFile
	syncBasesFile = func(f *os.File) error { syncs.Add(1); return old(f) }
	t.Cleanup(func() { syncBasesFile = old })
	addr, exp := testServer(t)
	if err := os.Mkdir(filepath.Join(exp, "d"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(exp, "d", "f"), []byte("the server's f"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := openOffline(t, addr, exp, func(cfg *SNFSMountConfig) { cfg.Name = "offbasesync" })
	d := a.lookup(nil, "d")
	a.listed(d.Inode)
	f := a.lookup(d.Inode, "f")
	a.setOffline(true)
	if err := a.Remove(a.ctx, d.Inode, a.c, "f", f.Inode); err != nil {
		t.Fatalf("remove offline: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(a.cacheDir, "offline", "bases")); err != nil || len(b) == 0 {
		t.Fatalf("no base written for the offline remove: %q %v", b, err)
	}
	before := syncs.Load()
	a.writeNew(d.Inode, "g", []byte("written offline"))
	if syncs.Load() == before {
		t.Fatal("the close of a file written offline flushed the log but not the bases file")
	}
	// Nothing written since: the next flush of the log does not flush it again.
	before = syncs.Load()
	if err := mgrOf(a.FS).permits.syncLog(); err != nil {
		t.Fatal(err)
	}
	if n := syncs.Load() - before; n != 0 {
		t.Errorf("the bases file, unchanged, was flushed %d more times", n)
	}
}
