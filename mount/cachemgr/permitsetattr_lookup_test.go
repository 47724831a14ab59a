package cachemgr

import (
	"context"
	"testing"
	"time"

	"snfs/mount/vfs"
)

// A chmod of a directory made locally under its permit (CML_SETATTR in the
// log) is what a lookup of it from a parent not cached reports.
func TestLookupKeepsLocalDirAttr(t *testing.T) {
	s := newRestartableServer(t)
	v, sn, d := permitsMount(t, s, "rev-attr")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	holdPermit(t, sn, d)
	c := sessionCred()
	if _, err := v.ReadDir(ctx, d, c); err != nil {
		t.Fatal(err)
	}
	mode := uint32(0o700)
	if _, _, err := v.Setattr(ctx, d, c, vfs.SetAttr{Mode: &mode}); err != nil {
		t.Fatal(err)
	}
	if n := sn.permits.log.Len(); n != 1 {
		t.Fatalf("the chmod was not made locally (log %d records)", n)
	}
	nc := sn.names
	nc.mu.Lock()
	if r := nc.dirs[string(v.Root().FH)]; r != nil {
		nc.removeLocked(r) // the parent not cached (large, or another's permit)
	}
	nc.mu.Unlock()
	e, err := v.Lookup(ctx, v.Root(), c, "d")
	if err != nil {
		t.Fatal(err)
	}
	a, _, err := v.Getattr(ctx, d, c)
	if err != nil {
		t.Fatal(err)
	}
	if e.Attr.Mode&0o777 != 0o700 || a.Mode&0o777 != 0o700 {
		t.Fatalf("after a lookup from the parent: entry mode %o, getattr mode %o; want 700 (the chmod made here, log %d records)", e.Attr.Mode&0o777, a.Mode&0o777, sn.permits.log.Len())
	}
}
