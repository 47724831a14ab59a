package cachemgr

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"snfs/mount/cml"
	"snfs/snfs1"
)

// TestPermitsLostDirGone: records logged under a permit since lost,
// and the directory removed on the server meanwhile (docs/mount.md: "A
// directory answered NFS3ERR_STALE is gone: its records go as they are,
// and are refused"): the log drains (its records conflicts) instead of
// failing every reintegration on the LOOKUP of its names (the reviewer's
// reproducer; baseChanged took the LOOKUP's NFS3ERR_STALE for an error).
func TestPermitsLostDirGone(t *testing.T) {
	s := newServer(t, true)
	_, sn, d := permitsMount(t, s, "permits-gone")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dir := filepath.Join(s.export, "d")
	base := serverFileBase(t, dir, sn, d, "u0")
	holdPermit(t, sn, d)
	rec := snfs1.CMLRecord{Op: snfs1.CMLUnlink, Dir: snfs1.ObjRef{FH: d.FH}, Name: "u0"}
	if _, err := sn.permits.log.AppendLazyBased(rec, []cml.Base{base}); err != nil {
		t.Fatal(err)
	}
	if err := sn.sess.PermitRelease(ctx, sn.permits.refs()); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	var err error
	for range 3 {
		if err = sn.SyncDir(ctx, d); err == nil {
			break
		}
		t.Logf("SyncDir: %v", err)
	}
	if n := sn.permits.log.Len(); n != 0 {
		t.Errorf("%d records left in the log (last SyncDir: %v)", n, err)
	}
}
