package cachemgr

import (
	"context"
	"errors"
	"syscall"
	"testing"

	"snfs/mount/vfs"
	"snfs/sunrpc"
)

// TestXattrAnswerRacingChange: a GETXATTR answered before this client's own
// SETXATTR of the attribute, but applied after it, is not cached over the
// change: the next read of the cached file's attribute is the new value.
func TestXattrAnswerRacingChange(t *testing.T) {
	a, _, ia, _ := twoSNFS(t, 0, []byte("data"))
	ctx := context.Background()
	f, _, err := a.Open(ctx, ia, vfs.Cred{}, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx, f)
	if err := a.SetXattr(ctx, ia, vfs.Cred{}, "user.v", []byte("old"), 0); err != nil {
		t.Fatal(err)
	}
	ia.Mu.Lock()
	cached := xattrsLocked(ia) != nil
	ia.Mu.Unlock()
	if !cached {
		t.Fatal("the file open here is not cached: the test tests nothing")
	}
	// The change cached user.v: drop it, so that the read goes to the server.
	ia.Mu.Lock()
	delete(snOf(ia).xattrs.values, "user.v")
	ia.Mu.Unlock()
	done := false
	mgrOf(a).xattrAnswered.set(func(i *vfs.Inode) {
		if i != ia || done {
			return
		}
		done = true
		if err := a.SetXattr(ctx, ia, vfs.Cred{}, "user.v", []byte("new"), 0); err != nil {
			t.Error(err)
		}
	})
	defer mgrOf(a).xattrAnswered.set(nil)
	if v, err := a.GetXattr(ctx, ia, vfs.Cred{}, "user.v"); err != nil || string(v) != "old" {
		t.Fatalf("the racing read: %q, %v; want the value before the change", v, err)
	}
	hits := mgrOf(a).stats.XattrHits.Load()
	v, err := a.GetXattr(ctx, ia, vfs.Cred{}, "user.v")
	if err != nil || string(v) != "new" {
		t.Fatalf("after the change: %q, %v (served from the cache: %v); want \"new\"", v, err, mgrOf(a).stats.XattrHits.Load() > hits)
	}
}

// TestXattrOlderServer: a server without the procedures (PROC_UNAVAIL, or
// PROG_UNAVAIL) means no extended attributes: ErrNotSupported (EOPNOTSUPP),
// not an I/O error.
func TestXattrOlderServer(t *testing.T) {
	for _, st := range []sunrpc.AcceptStat{sunrpc.ProcUnavail, sunrpc.ProgUnavail} {
		err := xattrErr("GETXATTR", &sunrpc.RPCError{Accept: st})
		if !errors.Is(err, vfs.ErrNotSupported) {
			t.Errorf("%v: %v, want ErrNotSupported", st, err)
		}
	}
	if err := xattrErr("GETXATTR", &sunrpc.RPCError{Accept: sunrpc.SystemErr}); errors.Is(err, vfs.ErrNotSupported) {
		t.Errorf("SYSTEM_ERR: %v", err)
	}
}
