package cachemgr

import (
	"bytes"
	"context"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"snfs/mount/vfs"
)

// TestConcurrentOpenKeepsNoStalePages (adversarial review of issue 25 item
// 2): whether the kernel may keep its pages at an open is the version rule
// applied to the version its pages belong to when the OPEN was answered.
// Here A read the file (its kernel's pages are of that version) and closed
// it; B rewrote it (A held nothing: no callback). Two opens of A's then run
// at once: X's answer is applied first, Y's is answered while X applies it,
// and X sets the pages' version to the new one (telling its kernel, in its
// reply, to drop them) before Y applies its own. Y must not tell its kernel
// to keep the pages: until X's reply has been acted on they are still the
// old version's, and Y's reader would read the old bytes. The mount before
// the wiring read the pages' version as Y's answer arrived (false); the
// machine's OpenCached reads it at Y's end, after X moved it (true).
func TestConcurrentOpenKeepsNoStalePages(t *testing.T) {
	ctx := context.Background()
	old, next := bytes.Repeat([]byte("old version; "), 300), bytes.Repeat([]byte("B's new version. "), 200)
	a, b, ia, ib := twoSNFS(t, 0, old)
	if got := openRead(t, a, ia); !bytes.Equal(got, old) {
		t.Fatalf("A's first read: %d bytes; want %d", len(got), len(old))
	}
	fb, _, err := b.Open(ctx, ib, vfs.Cred{}, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Write(ctx, fb, 0, next); err != nil {
		t.Fatal(err)
	}
	if err := b.Fsync(ctx, fb); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, fb); err != nil {
		t.Fatal(err)
	}

	xAnswered, yApplied, xDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	mgrOf(a).afterOpen = func(in *vfs.Inode) {
		if in != ia {
			return
		}
		switch calls.Add(1) {
		case 1: // X, answered: wait for Y's answer to be applied
			close(xAnswered)
			select {
			case <-yApplied:
			case <-time.After(20 * time.Second):
				t.Error("Y's OPEN answer never applied")
			}
		case 2: // Y, answered and applied: X ends first
			close(yApplied)
			select {
			case <-xDone:
			case <-time.After(20 * time.Second):
				t.Error("X never ended")
			}
		}
	}
	t.Cleanup(func() { mgrOf(a).afterOpen = nil })
	type res struct {
		f    *vfs.File
		keep bool
		err  error
	}
	xc, yc := make(chan res, 1), make(chan res, 1)
	go func() {
		f, keep, err := a.Open(ctx, ia, vfs.Cred{}, syscall.O_RDONLY)
		xc <- res{f, keep, err}
	}()
	<-xAnswered
	go func() {
		f, keep, err := a.Open(ctx, ia, vfs.Cred{}, syscall.O_RDONLY)
		yc <- res{f, keep, err}
	}()
	x := <-xc
	close(xDone)
	y := <-yc
	for _, r := range []res{x, y} {
		if r.err != nil {
			t.Fatal(r.err)
		}
		defer a.Release(ctx, r.f)
	}
	if x.keep {
		t.Fatal("X, the first open after B's rewrite, keeps the kernel's pages of the old version: the test's premise fails")
	}
	if y.keep {
		t.Error("Y keeps the kernel's pages: they are the old version's until X's reply is acted on (the pages' version was read after X moved it, not at Y's answer)")
	}
	want := append(append([]byte{}, next...), old[len(next):]...) // B wrote over the start
	if got := readAll(t, a, y.f); !bytes.Equal(got, want) {
		t.Errorf("Y reads %d bytes through the mount (B's start: %v); want %d", len(got), bytes.HasPrefix(got, next), len(want))
	}
}
