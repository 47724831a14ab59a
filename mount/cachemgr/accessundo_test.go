package cachemgr

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/state"
	"snfs/state/clientfile"
)

// A refused open served by a kept (or shared) write open of another mode
// must give back the open it took, not one of its own mode.
func TestRefusedReadOnKeptWrite(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(map[bool]string{false: "kept", true: "shared"}[shared], func(t *testing.T) {
			addr, exp := testServer(t)
			ctx := context.Background()
			a, b := quietMount(t, addr, exp, "A", clientfile.UntilRecalled), quietMount(t, addr, exp, "B", clientfile.UntilRecalled)
			p := filepath.Join(exp, "f")
			if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			os.Chown(p, 1001, 1001)
			owner, other := vfs.Cred{UID: 1001, GID: 1001}, vfs.Cred{UID: 1002, GID: 1002}
			ea, err := a.Lookup(ctx, a.Root(), owner, "f")
			if err != nil {
				t.Fatal(err)
			}
			ia := ea.Inode
			w, _, err := a.Open(ctx, ia, owner, syscall.O_WRONLY)
			if err != nil {
				t.Fatal(err)
			}
			if !shared {
				a.Release(ctx, w) // kept for writing
			}
			if g, _, err := a.Open(ctx, ia, other, syscall.O_RDONLY); !errors.Is(err, nfs3.ErrAcces) {
				if err == nil {
					a.Release(ctx, g)
				}
				t.Fatalf("another user's read open of a 0600 file: %v; want EACCES", err)
			}
			if shared {
				a.Release(ctx, w)
			}
			ia.Mu.Lock()
			apps, kept := stOf(ia).Opens(state.Write)+stOf(ia).Opens(state.Read), stOf(ia).Kept(state.Write)
			ia.Mu.Unlock()
			if apps != 0 {
				t.Errorf("A counts %d application opens with none open (kept write opens: %d)", apps, kept)
			}
			eb, err := b.Lookup(ctx, b.Root(), owner, "f")
			if err != nil {
				t.Fatal(err)
			}
			g, _, err := b.Open(ctx, eb.Inode, owner, syscall.O_RDWR)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Release(ctx, g)
			if g.DirectIO {
				t.Error("B's OPEN_WRITE was refused caching: the server still counts an open of A's nobody holds")
			}
		})
	}
}

// A refused open served by a kept open keeps it kept (an undo CLOSEd it, so
// that offline its owner could not open the file again) and back on the
// delayed list, whose timer, bound and unmount CLOSE it: off the list it
// was counted at the server for good.
func TestRefusedOpenKeepsKeptOpenListed(t *testing.T) {
	addr, exp := testServer(t)
	ctx := context.Background()
	a := quietMount(t, addr, exp, "A", clientfile.UntilRecalled)
	p := filepath.Join(exp, "f")
	if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chown(p, 1001, 1001)
	owner, other := vfs.Cred{UID: 1001, GID: 1001}, vfs.Cred{UID: 1002, GID: 1002}
	ea, err := a.Lookup(ctx, a.Root(), owner, "f")
	if err != nil {
		t.Fatal(err)
	}
	ia := ea.Inode
	w, _, err := a.Open(ctx, ia, owner, syscall.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	a.Release(ctx, w) // kept for writing
	if g, _, err := a.Open(ctx, ia, other, syscall.O_WRONLY); !errors.Is(err, nfs3.ErrAcces) {
		if err == nil {
			a.Release(ctx, g)
		}
		t.Fatalf("another user's write open of a 0600 file: %v; want EACCES", err)
	}
	sn := mgrOf(a)
	ia.Mu.Lock()
	kept := stOf(ia).Kept(state.Write)
	ia.Mu.Unlock()
	sn.delayed.mu.Lock()
	_, listed := sn.delayed.inodes[ia]
	sn.delayed.mu.Unlock()
	if kept != 1 || !listed {
		t.Fatalf("after a refused open: %d kept write opens, on the delayed list %v; want 1, true", kept, listed)
	}
}
