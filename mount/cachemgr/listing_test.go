package cachemgr

import (
	"context"
	"slices"
	"syscall"
	"testing"

	"snfs/mount/vfs"
)

func names(ents []vfs.DirEntry) []string {
	var out []string
	for _, e := range ents {
		if e.Name != "." && e.Name != ".." {
			out = append(out, e.Name)
		}
	}
	slices.Sort(out)
	return out
}

// TestListedDirKept: in snfs mode a directory's listing is the name cache's
// (names.go): the first open lists it with LISTDIR (the kernel's own copy
// dropped), later opens by the same credentials let the kernel keep its
// copy, and when the kernel asks for the listing after all (Linux did, now
// and then, in the warm `ls -lR` of the benchmark) the cached listing
// answers, names only, without a call; after this client's own create the
// cached listing has the new name (applied, not read again); credentials
// that never listed it read it (the server checks them).
func TestListedDirKept(t *testing.T) {
	ctx := context.Background()
	v, _, _, f := restartTestFile(t)
	if err := v.Release(ctx, f); err != nil {
		t.Fatal(err)
	}
	root := v.Root()
	nc := mgrOf(v).names
	ents, cached, err := v.OpenDirCached(ctx, root, vfs.Cred{})
	if err != nil || cached {
		t.Fatalf("first open: cached %v, %v; want the listing read, the kernel's copy dropped", cached, err)
	}
	if got := names(ents); !slices.Equal(got, []string{"f"}) {
		t.Fatalf("first listing %v; want [f]", got)
	}
	fills := nc.Stats().Fills
	if ents, cached, err = v.OpenDirCached(ctx, root, vfs.Cred{}); err != nil || !cached || ents != nil {
		t.Fatalf("second open: cached %v, %d entries, %v; want the kernel let keep its copy", cached, len(ents), err)
	}
	kept := v.Stats().ListingsKept.Load()
	again, err := v.ListedDir(ctx, root, vfs.Cred{})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(again); !slices.Equal(got, []string{"f"}) {
		t.Errorf("listing asked again %v; want [f]", got)
	}
	if n := v.Stats().ListingsKept.Load() - kept; n != 1 {
		t.Errorf("%d listings answered from the cache; want 1 (no LISTDIR)", n)
	}
	for _, e := range again {
		if e.Entry != nil {
			t.Errorf("kept entry %q carries attributes; want none (lookups go to the name cache)", e.Name)
		}
	}

	// Changed by this client: applied to the cached listing.
	_, g, err := v.Create(ctx, root, vfs.Cred{}, "g", 0o644, false, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	after, err := v.ListedDir(ctx, root, vfs.Cred{})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(after); !slices.Equal(got, []string{"f", "g"}) {
		t.Errorf("listing after a create %v; want [f g]", got)
	}
	if n := nc.Stats().Fills - fills; n != 0 {
		t.Errorf("%d LISTDIRs after this client's own create; want 0 (the create applied to the cache)", n)
	}
	// Other credentials never listed it: read for them (the server checks).
	kept = v.Stats().ListingsKept.Load()
	if _, err := v.ListedDir(ctx, root, vfs.Cred{UID: 1000, GID: 1000}); err != nil {
		t.Fatal(err)
	}
	if n := v.Stats().ListingsKept.Load() - kept; n != 0 {
		t.Errorf("credentials that never listed the directory got the kept copy")
	}
}
