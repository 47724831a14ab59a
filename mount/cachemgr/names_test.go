package cachemgr

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"snfs/mount/vfs"
	"snfs/nfs3"
)

// TestNamesFillRacingBreak: the generation rule (docs/protocol.md section
// 20.2). A's lookup in a directory lists it (LISTDIR, promised); after the
// reply and before the listing is installed, B creates a name there: the
// server breaks the promise that LISTDIR recorded, and A's fill, overtaken,
// must install nothing (else the listing without the new name would answer
// A's lookups of it, negatively, until the next break). A's lookup then
// finds the name, and so do the lookups after it.
func TestNamesFillRacingBreak(t *testing.T) {
	a, b, _, _ := twoSNFS(t, 0, []byte("old"))
	ctx := context.Background()
	var c vfs.Cred
	dirB, err := b.Mkdir(ctx, b.Root(), c, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	dA, err := a.Lookup(ctx, a.Root(), c, "d")
	if err != nil {
		t.Fatal(err)
	}
	nc := mgrOf(a).names
	listed, goOn := make(chan struct{}), make(chan struct{})
	first := true
	nc.afterList.set(func(dir *vfs.Inode) {
		if dir != dA.Inode || !first {
			return
		}
		first = false
		close(listed)
		<-goOn
	})
	defer nc.afterList.set(nil)
	type result struct {
		e   vfs.Entry
		err error
	}
	done := make(chan result, 1)
	go func() {
		e, err := a.Lookup(ctx, dA.Inode, c, "x")
		done <- result{e, err}
	}()
	select {
	case <-listed:
	case <-time.After(20 * time.Second):
		t.Fatal("A's lookup did not list the directory")
	}
	breaks := nc.Stats().Breaks
	_, f, err := b.Create(ctx, dirB.Inode, c, "x", 0o644, true, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, f); err != nil {
		t.Fatal(err)
	}
	if n := nc.Stats().Breaks - breaks; n != 1 {
		t.Errorf("B's create broke %d of A's promises before it returned; want 1", n)
	}
	close(goOn)
	r := <-done
	if r.err != nil {
		t.Fatalf("A's lookup racing B's create: %v; want the new name found", r.err)
	}
	for k := range 3 {
		if _, err := a.Lookup(ctx, dA.Inode, c, "x"); err != nil {
			t.Fatalf("A's lookup %d after the race: %v; want the new name found", k, err)
		}
	}
}

// TestNamesOwnChanges: this mount's own changes in a cached directory are
// applied to its listing (the server does not break the changer's promise):
// no LISTDIR after them, and lookups and listings show each change.
func TestNamesOwnChanges(t *testing.T) {
	a, _, _, _ := twoSNFS(t, 0, []byte("old"))
	ctx := context.Background()
	var c vfs.Cred
	d, err := a.Mkdir(ctx, a.Root(), c, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	dir := d.Inode
	nc := mgrOf(a).names
	if _, err := a.Lookup(ctx, dir, c, "nothing"); !errors.Is(err, nfs3.ErrNoEnt) {
		t.Fatalf("lookup in an empty directory: %v", err)
	}
	fills := nc.Stats().Fills
	if fills == 0 {
		t.Fatal("the lookup listed nothing")
	}
	lookup := func(name string, want error) {
		t.Helper()
		_, err := a.Lookup(ctx, dir, c, name)
		if want == nil && err != nil || want != nil && !errors.Is(err, want) {
			t.Errorf("lookup %q: %v; want %v", name, err, want)
		}
	}
	_, f, err := a.Create(ctx, dir, c, "f", 0o644, true, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	a.Release(ctx, f)
	lookup("f", nil)
	if _, err := a.Mkdir(ctx, dir, c, "sub", 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Symlink(ctx, dir, c, "ln", "f"); err != nil {
		t.Fatal(err)
	}
	ef, err := a.Lookup(ctx, dir, c, "f")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Link(ctx, ef.Inode, dir, c, "hard"); err != nil {
		t.Fatal(err)
	}
	if err := a.Rename(ctx, dir, "f", dir, "g", c, nil, ef.Inode, false); err != nil {
		t.Fatal(err)
	}
	lookup("f", nfs3.ErrNoEnt)
	lookup("g", nil)
	if err := a.Remove(ctx, dir, c, "hard", ef.Inode); err != nil {
		t.Fatal(err)
	}
	if err := a.Rmdir(ctx, dir, c, "sub"); err != nil {
		t.Fatal(err)
	}
	lookup("hard", nfs3.ErrNoEnt)
	lookup("sub", nfs3.ErrNoEnt)
	ents, err := a.ReadDir(ctx, dir, c)
	if err != nil {
		t.Fatal(err)
	}
	got := names(ents)
	if want := []string{"g", "ln"}; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("listing after the changes %v; want %v", got, want)
	}
	if n := nc.Stats().Fills - fills; n != 0 {
		t.Errorf("%d LISTDIRs after this mount's own changes; want 0", n)
	}
}

// TestNamesServerRestart: promises are not kept across a server restart
// (docs/protocol.md section 20.5): the new server breaks none, so a mount
// that cached a directory before the restart must not answer from it after.
// B creates a name in it on the restarted server; A's lookup finds it.
func TestNamesServerRestart(t *testing.T) {
	s := newRestartableServer(t)
	ctx := context.Background()
	var c vfs.Cred
	a := s.mount("A")
	d, err := a.Mkdir(ctx, a.Root(), c, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Lookup(ctx, d.Inode, c, "y"); !errors.Is(err, nfs3.ErrNoEnt) {
		t.Fatalf("lookup of y before: %v", err)
	}
	if _, err := a.Lookup(ctx, d.Inode, c, "y"); !errors.Is(err, nfs3.ErrNoEnt) {
		t.Fatalf("lookup of y before: %v", err)
	}
	if mgrOf(a).names.Stats().Misses == 0 {
		t.Fatal("A's negative lookups were not answered from its cache")
	}
	s.restart()
	b := s.mount("B")
	db, err := b.Lookup(ctx, b.Root(), c, "d")
	if err != nil {
		t.Fatal(err)
	}
	_, f, err := b.Create(ctx, db.Inode, c, "y", 0o644, true, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, f); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Lookup(ctx, d.Inode, c, "y"); err != nil {
		t.Fatalf("A's lookup of y after the restart and B's create: %v; want it found", err)
	}
}
