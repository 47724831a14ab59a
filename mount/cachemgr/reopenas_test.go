package cachemgr

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"snfs/mount/vfs"
	"snfs/state"
)

// Under root_squash, a user's write open across a server restart that
// refuses the reclaim is OPENed again (reopen) as the mount's root.
func TestReopenAsUserRootSquash(t *testing.T) {
	s := newRestartableServer(t)
	s.opts = "rw,root_squash"
	s.restart()
	ctx := context.Background()
	p := filepath.Join(s.export, "f")
	if err := os.WriteFile(p, []byte("the server's"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chown(p, 1001, 1001)
	user := vfs.Cred{UID: 1001, GID: 1001}
	a := s.mount("A")
	ea, err := a.Lookup(ctx, a.Root(), user, "f")
	if err != nil {
		t.Fatal(err)
	}
	ia := ea.Inode
	f, _, err := a.Open(ctx, ia, user, syscall.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx, f)
	reopened := make(chan struct{})
	mgrOf(a).afterReopen.set(func(*vfs.Inode) { close(reopened) })
	t.Cleanup(func() { mgrOf(a).afterReopen.set(nil) })
	s.restart()
	if _, _, err := a.Getattr(ctx, ia, user); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reopened:
	case <-time.After(30 * time.Second):
		t.Fatal("the refused reclaim's handler did not end within 30 s")
	}
	ia.Mu.Lock()
	forgot := stOf(ia).Forgotten(state.Write)
	ia.Mu.Unlock()
	if forgot != 0 {
		t.Errorf("after the refused reclaim, %d of the user's write opens were not OPENed again (OPEN sent as the mount's squashed root)", forgot)
	}
	b := s.mount("B")
	eb, err := b.Lookup(ctx, b.Root(), user, "f")
	if err != nil {
		t.Fatal(err)
	}
	w, _, err := b.Open(ctx, eb.Inode, user, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx, w)
	if !w.DirectIO {
		t.Error("B's OPEN_WRITE was granted caching while A has the file open for writing (the server forgot A's open)")
	}
}
