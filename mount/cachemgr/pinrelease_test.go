package cachemgr

import (
	"bytes"
	"context"
	"syscall"
	"testing"
	"time"

	"snfs/mount/vfs"
)

// TestPinnedReleaseSyncFailureKeepsData: the pinned holder's last
// passthrough writer is released while what its kernel wrote since the last
// write-back is not sent yet, and the release's send fails (as on a
// transport error, or the mount's end cutting it short). The unsent bytes
// must stay this client's dirty data: its CLOSE says dirty, the server keeps
// it pinned (docs/protocol.md 10.1), and the callback another client's READ
// waits for sends them. They used to be forgotten with the pinned file
// (pinForget) and the CLOSE said clean: the server unpinned A, and B read
// the server's older bytes.
func TestPinnedReleaseSyncFailureKeepsData(t *testing.T) {
	ctx := context.Background()
	old := []byte("the server's bytes, before A's")
	a, b, ia, ib := twoSNFS(t, 0, old)
	mgrOf(a).EnablePassthrough()
	if mgrOf(a).pin.w == nil {
		t.Fatal("no watch of passthrough cache files: the test needs fanotify pre-content events (Linux 6.14+, root)")
	}
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
	if fsnOf(w).pt == nil || !fsnOf(w).ptWrite {
		t.Fatal("A's write open of the file it alone has does not pass through")
	}
	// B's open calls A back: A's kernel goes on writing, A is pinned.
	fb, _, err := b.Open(ctx, ib, vfs.Cred{}, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx, fb)
	if mgrOf(a).pinnedOf(ia) == nil {
		t.Fatal("A is not the file's pinned holder after B's open")
	}
	fresh := []byte("A's bytes, written by its kernel while pinned")
	if _, err := fsnOf(w).pt.WriteAt(fresh, 0); err != nil {
		t.Fatal(err)
	}
	mgrOf(a).pinSendFails.Store(true)
	err = a.Release(ctx, w)
	mgrOf(a).pinSendFails.Store(false)
	if err == nil {
		t.Error("A's release reported no error; its send failed")
	}
	done := make(chan []byte, 1)
	go func() { done <- readAll(t, b, fb) }()
	select {
	case got := <-done:
		want := append([]byte{}, fresh...)
		if len(old) > len(fresh) {
			want = append(want, old[len(fresh):]...)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("B reads %q; want A's %q (its unsent bytes were forgotten at its release)", got, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("B's read did not end within 30 s")
	}
}
