package cachemgr

import (
	"context"
	"strings"
	"syscall"
	"testing"

	"snfs/mount/vfs"
)

// TestPermitsSillyRenameOfLocalCreate: a file made locally under a permit
// (a provisional object), removed while open, is hidden under a new name
// (the removal goes through the server: the object is reintegrated first).
// The directory's listing and a lookup of the hidden name then name the
// real file, not the provisional handle; the hidden name goes at the last
// release.
func TestPermitsSillyRenameOfLocalCreate(t *testing.T) {
	s := newServer(t, true)
	v, sn, d := permitsMount(t, s, "permits-silly")
	holdPermit(t, sn, d)
	ctx := context.Background()
	if _, err := v.ReadDir(ctx, d, vfs.Cred{}); err != nil {
		t.Fatal(err)
	}
	e, f, err := v.Create(ctx, d, vfs.Cred{}, "p", 0o644, false, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	if !isProvFH(e.Inode.FH) {
		t.Fatalf("the create was not made locally (handle %x)", e.Inode.FH)
	}
	if err := v.Remove(ctx, d, vfs.Cred{}, "p", e.Inode); err != nil {
		t.Fatal(err)
	}
	ents, err := v.ReadDir(ctx, d, vfs.Cred{})
	if err != nil {
		t.Fatal(err)
	}
	hidden := ""
	for _, de := range ents {
		if de.Name == "p" {
			t.Error("the removed name is still listed")
		}
		if strings.HasPrefix(de.Name, ".snfs") {
			hidden = de.Name
			if de.Entry != nil && isProvFH(de.Entry.Inode.FH) {
				t.Errorf("the hidden name %s is listed with the provisional handle", de.Name)
			}
		}
	}
	if hidden == "" {
		t.Fatal("no hidden name listed")
	}
	if cd := sn.names.usable(ctx, d); cd != nil {
		if ce, ok := sn.names.cachedEntry(cd, hidden); ok && isProvFH(ce.fh) {
			t.Errorf("the name cache lists the hidden name %s with the provisional handle", hidden)
		}
	} else {
		t.Log("no cached listing of the directory")
	}
	le, err := v.Lookup(ctx, d, vfs.Cred{}, hidden)
	if err != nil {
		t.Fatalf("lookup of the hidden name %s: %v", hidden, err)
	}
	if isProvFH(le.Inode.FH) {
		t.Errorf("a lookup of the hidden name %s answers the provisional handle", hidden)
	}
	if err := v.Release(ctx, f); err != nil {
		t.Fatal(err)
	}
	ents, err = v.ReadDir(ctx, d, vfs.Cred{})
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range ents {
		if de.Name == hidden {
			t.Errorf("the hidden name %s is listed after the last release", hidden)
		}
	}
}
