package cachemgr

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"snfs/consist"
	"snfs/mount/vfs"
)

// TestReclaimDuringOpenGrant: the server restarts between an OPEN's answer
// granting caching (from the old server) and the moment the mount applies the
// grant (OpenCached, after settling the attributes and relabelling the cache:
// the afterOpen hook), and this client reclaims in between. The reclaim can
// only report the open as written through (the grant is not applied yet), so
// the new server records a writer that does not cache and may hold nothing
// dirty. The grant must then not be applied: the open writes through. It used
// to be applied: A cached its writes, its CLOSE said dirty to a server that
// did not record it as the last writer, and B's OPEN, calling nobody back,
// read the server's old bytes (the stale read of the official CI's
// TestCrashCyclesMountsAndServer, seed 1795730749319049573: a server kill
// while mount2's rewrite was being opened).
func TestReclaimDuringOpenGrant(t *testing.T) {
	s := newRestartableServer(t)
	ctx := context.Background()
	old := []byte("the server's bytes, older than A's write")
	if err := os.WriteFile(filepath.Join(s.export, "f"), old, 0o644); err != nil {
		t.Fatal(err)
	}
	a, b := s.mount("A"), s.mount("B")
	ea, err := a.Lookup(ctx, a.Root(), vfs.Cred{}, "f")
	if err != nil {
		t.Fatal(err)
	}
	ia := ea.Inode
	eb, err := b.Lookup(ctx, b.Root(), vfs.Cred{}, "f")
	if err != nil {
		t.Fatal(err)
	}
	// The next start has a grace period: both mounts reclaim (their
	// sessions reconnect on their own), and it ends once both did.
	s.grace = 30 * time.Second
	restarted := false
	mgrOf(a).afterOpen = func(in *vfs.Inode) {
		if in != ia || restarted {
			return
		}
		restarted = true
		s.restart()
		select {
		case <-s.srv.GraceOver():
		case <-time.After(30 * time.Second):
			t.Error("the restarted server's grace period did not end within 30 s")
			return
		}
		if r := s.srv.Grace(); r.Reason != consist.GraceAllReclaimed || r.Reclaimed < 1 {
			t.Errorf("grace period %+v; want both mounts back, A reclaiming", r)
		}
	}
	fa, _, err := a.Open(ctx, ia, vfs.Cred{}, syscall.O_WRONLY)
	mgrOf(a).afterOpen = nil
	if err != nil {
		t.Fatal(err)
	}
	if !restarted {
		t.Fatal("the server did not restart in A's OPEN")
	}
	fresh := []byte("A's write, after the restart, acknowledged at its close")
	if _, err := a.Write(ctx, fa, 0, fresh); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(ctx, fa); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, fa); err != nil {
		t.Fatal(err)
	}
	fb, _, err := b.Open(ctx, eb.Inode, vfs.Cred{}, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx, fb)
	if got := readAll(t, b, fb); !bytes.Equal(got, fresh) {
		t.Errorf("B reads %q after A's close; want A's %q (stale: the server did not know A held it dirty)", got, fresh)
	}
}
