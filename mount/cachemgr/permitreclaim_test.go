package cachemgr

import (
	"bytes"
	"context"
	"errors"
	"syscall"
	"testing"

	"snfs/mount/vfs"
	"snfs/snfs1"
)

// TestPermitDataPushReclaimed: a file made locally whose CREATE the server
// applied but whose data could not be written yet (its push failed) is
// reclaimed after a server restart as this client's closed dirty file, so
// that the restarted server calls this client back for the push before it
// lets another client open the file (without it, the crash cycles with the
// permits on: another mount's acknowledged rewrite overwritten by the push
// retried later). Once pushed, it is reclaimed no more.
func TestPermitDataPushReclaimed(t *testing.T) {
	ff := &failingFlush{}
	s := newServerSync(t, true, ff.sync)
	v, sn, d := permitsMountData(t, s, "permits-data-reclaim", true)
	holdPermit(t, sn, d)
	ctx := context.Background()
	if _, err := v.ReadDir(ctx, d, vfs.Cred{}); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("r"), snfs1.StoreMax+1) // pushed by WRITE, not stored
	f, id := createLocal(t, v, sn, d, "big", data)
	if err := v.Release(ctx, f); err != nil {
		t.Fatal(err)
	}
	ff.fail.Store(1 << 40)
	if err := sn.SyncDir(ctx, d); !errors.Is(err, syscall.EIO) {
		t.Fatalf("the directory's fsync with the push failing: %v; want EIO", err)
	}
	fh, ok := sn.permits.log.Handle(id)
	if !ok || sn.permits.offDataOf(id) == nil {
		t.Fatalf("setup: CREATE applied %v, data still local %v; want both", ok, sn.permits.offDataOf(id) != nil)
	}
	found := false
	for _, it := range sn.reclaimItems(ctx) {
		if bytes.Equal(it.File, fh) {
			found = true
			if !it.Dirty || it.Readers+it.Writers != 0 {
				t.Errorf("the file's reclaim item %+v; want dirty and closed", it)
			}
		}
	}
	if !found {
		t.Fatal("a file made locally whose data is not written yet is not reclaimed")
	}
	ff.fail.Store(0)
	if err := sn.SyncDir(ctx, d); err != nil {
		t.Fatalf("the directory's fsync once the server flushes: %v", err)
	}
	for _, it := range sn.reclaimItems(ctx) {
		if bytes.Equal(it.File, fh) && it.Dirty && it.Readers+it.Writers == 0 {
			t.Errorf("reclaimed as dirty once its data is written: %+v", it)
		}
	}
}
