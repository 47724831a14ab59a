package cachemgr

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"syscall"
	"testing"
	"time"

	"snfs/mount/vfs"
	"snfs/nfs3"
)

// TestOfflineListingCopies: the offline copies of the name cache
// (disconnectednames.go). A (disconnected operation on) lists d and d2 and
// goes offline on request, its connection up: d's listing answers (names,
// a miss is ENOENT); B's create in d2 breaks A's promise of d2 and that
// copy goes (offline, d2's listing then fails: it is known stale). Back
// online, the copies are not used: the listing of d2 shows B's name, read
// anew.
func TestOfflineListingCopies(t *testing.T) {
	addr, exp := testServer(t)
	ctx := context.Background()
	var c vfs.Cred
	open := func(name string, disc bool) *vfs.FS {
		v, err := OpenSNFS(ctx, SNFSMountConfig{Addr: addr, Export: exp, Name: name,
			CacheDir: t.TempDir(), WriteBackDelay: time.Hour, Disconnected: disc, DisconnectAfter: time.Second,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := v.Close(); err != nil {
				t.Error(err)
			}
		})
		return v
	}
	a, b := open("A", true), open("B", false)
	dirs := map[string]*vfs.Inode{}
	for _, name := range []string{"d", "d2"} {
		e, err := b.Mkdir(ctx, b.Root(), c, name, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		dirs[name] = e.Inode
		if _, err := b.Mkdir(ctx, e.Inode, c, "x", 0o755); err != nil {
			t.Fatal(err)
		}
	}
	inA := map[string]*vfs.Inode{}
	for _, name := range []string{"d", "d2"} {
		e, err := a.Lookup(ctx, a.Root(), c, name)
		if err != nil {
			t.Fatal(err)
		}
		inA[name] = e.Inode
		ents, err := a.ReadDir(ctx, e.Inode, c)
		if err != nil || !slices.Contains(names(ents), "x") {
			t.Fatalf("A lists %s online: %v, %v", name, names(ents), err)
		}
	}
	wait := func(off bool) {
		t.Helper()
		if err := SetDisconnected(a, off); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if _, o := DisconnectedSince(a); o == off {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("A not offline=%v after 20 s", off)
			}
		}
	}
	wait(true)
	if ents, err := a.ReadDir(ctx, inA["d"], c); err != nil || !slices.Equal(names(ents), []string{"x"}) {
		t.Fatalf("A lists d offline: %v, %v; want [x]", names(ents), err)
	}
	if _, err := a.Lookup(ctx, inA["d"], c, "x"); err != nil {
		t.Fatalf("A's lookup of d/x offline: %v", err)
	}
	if _, err := a.Lookup(ctx, inA["d"], c, "nope"); !errors.Is(err, nfs3.ErrNoEnt) {
		t.Fatalf("A's lookup of d/nope offline: %v; want ENOENT", err)
	}
	// B's change of d2 breaks A's promise (A's connection is up).
	_, f, err := b.Create(ctx, dirs["d2"], c, "y", 0o644, true, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, f); err != nil {
		t.Fatal(err)
	}
	if _, err := a.ReadDir(ctx, inA["d2"], c); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("A lists d2 offline after its break: %v; want ErrDisconnected (the copy is known stale)", err)
	}
	if _, err := a.Lookup(ctx, inA["d2"], c, "y"); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("A's lookup of d2/y offline after the break: %v; want ErrDisconnected", err)
	}
	wait(false)
	ents, err := a.ReadDir(ctx, inA["d2"], c)
	if err != nil || !slices.Equal(names(ents), []string{"x", "y"}) {
		t.Fatalf("A lists d2 back online: %v, %v; want [x y]", names(ents), err)
	}
	nc := mgrOf(a).names
	nc.mu.Lock()
	left := len(nc.offl)
	nc.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d offline copies kept online; want none", left)
	}
}
