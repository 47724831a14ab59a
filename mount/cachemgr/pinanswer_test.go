package cachemgr

import (
	"context"
	"sync/atomic"
	"syscall"
	"testing"

	"snfs/mount/vfs"
	"snfs/state"
)

// TestPinnedAnswerNeedsWriter: a callback that starts the pinned mode of a
// file whose passthrough writer closes before the entry ends (a reader
// stays) is not answered CB_PINNED: the pinned holder is a client whose
// kernel goes on writing the file (docs/protocol.md 10.1), and the server
// records one only while it counts a write open of it. The mount answered
// CB_PINNED whenever the entry began with writers: had a new write open of
// the file been counted by then, the server would have recorded as the
// pinned holder a client that is not one (found by state's both-ends model,
// state/clientfile). Here A's write open passes through (the kernel's writes
// are the test's, on the descriptor handed to the kernel), a read open
// joins it, and the writer is released while the callback's entry is in
// progress.
func TestPinnedAnswerNeedsWriter(t *testing.T) {
	ctx := context.Background()
	a, _, ia, _ := twoSNFS(t, 0, []byte("old"))
	mgrOf(a).EnablePassthrough()
	if mgrOf(a).pin.w == nil {
		t.Fatal("no watch of passthrough cache files: the test needs fanotify pre-content events (Linux 6.14+, root)")
	}
	// A reads the file whole first: only a complete cache file passes
	// through.
	r, _, err := a.Open(ctx, ia, vfs.Cred{}, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, a, r)
	if err := a.Release(ctx, r); err != nil {
		t.Fatal(err)
	}
	w, _, err := a.Open(ctx, ia, vfs.Cred{}, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	if !snfsCaching(ia) || fsnOf(w).pt == nil || !fsnOf(w).ptWrite {
		t.Fatal("A's write open of the file it alone has does not pass through")
	}
	r, _, err = a.Open(ctx, ia, vfs.Cred{}, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx, r)
	if fsnOf(r).pt == nil {
		t.Fatal("A's read open does not join the passthrough open")
	}
	if _, err := fsnOf(w).pt.WriteAt([]byte("A's, written by the kernel through passthrough"), 0); err != nil {
		t.Fatal(err)
	}
	var released atomic.Bool
	mgrOf(a).beforeCallbackEnd.set(func(i *vfs.Inode) {
		if i != ia || !released.CompareAndSwap(false, true) {
			return
		}
		if err := a.Release(ctx, w); err != nil {
			t.Error(err)
		}
	})
	out := mgrOf(a).Callback(ctx, ia.FH, state.WritebackInvalidate, nil)
	mgrOf(a).beforeCallbackEnd.set(nil)
	if !released.Load() {
		t.Fatal("the callback's hook did not run")
	}
	if out != state.OK {
		t.Errorf("callback answered %v with a passthrough reader and no writer left; want CB_OK", out)
	}
}
