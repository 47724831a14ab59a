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

// TestListedDirKept: when the kernel, told to keep a directory's listing,
// asks for it again (Linux did, now and then, in the warm `ls -lR` of the
// benchmark: one READDIRPLUS in a thousand directories), the mount answers
// from the listing it kept while the directory is unchanged, and reads it
// again once it changed.
func TestListedDirKept(t *testing.T) {
	ctx := context.Background()
	v, _, _, f := restartTestFile(t)
	if err := v.Release(ctx, f); err != nil {
		t.Fatal(err)
	}
	root := v.Root()
	ents, cached, err := v.OpenDirCached(ctx, root, vfs.Cred{})
	if err != nil || !cached {
		t.Fatalf("first open: cached %v, %v; want the kernel let cache it", cached, err)
	}
	if got := names(ents); !slices.Equal(got, []string{"f"}) {
		t.Fatalf("first listing %v; want [f]", got)
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
		t.Errorf("%d listings answered from the kept copy; want 1 (no READDIRPLUS)", n)
	}
	for _, e := range again {
		if e.Entry != nil {
			t.Errorf("kept entry %q carries attributes; want none (lookups go the usual way)", e.Name)
		}
	}

	// Changed by this client: read again.
	_, g, err := v.Create(ctx, root, vfs.Cred{}, "g", 0o644, false, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	kept = v.Stats().ListingsKept.Load()
	after, err := v.ListedDir(ctx, root, vfs.Cred{})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(after); !slices.Equal(got, []string{"f", "g"}) {
		t.Errorf("listing after a create %v; want [f g]", got)
	}
	if n := v.Stats().ListingsKept.Load() - kept; n != 0 {
		t.Errorf("a changed directory's listing came from the kept copy")
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
