package cachemgr

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"snfs/mount/vfs"
	"snfs/state/clientfile"
)

// TestOfflineTruncatePath: offline, truncate(2) of a file the mount had
// read whole (no open of it held by an application) is made, as through an
// open for writing granted offline: the new size is served, and back
// online it is the server's, with no conflict. That of a file never read
// fails ErrDisconnected, as before.
func TestOfflineTruncatePath(t *testing.T) {
	addr, exp := testServer(t)
	first := bytes.Repeat([]byte("0123456789abcdef"), 1000)
	for _, n := range []string{"t", "unread"} {
		if err := os.WriteFile(filepath.Join(exp, n), first, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a := openOffline(t, addr, exp, func(cfg *SNFSMountConfig) {
		cfg.CloseDelay = clientfile.UntilRecalled
		cfg.KeptOpens = 100
	})
	ctx, c := a.ctx, a.c
	a.listed(nil)
	tr, un := a.lookup(nil, "t"), a.lookup(nil, "unread")
	r, _, err := a.Open(ctx, tr.Inode, c, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(first)+10)
	if k, err := a.Read(ctx, r, 0, buf); err != nil || k != len(first) {
		t.Fatalf("read: %d, %v", k, err)
	}
	a.Flush(ctx, r)
	if err := a.Release(ctx, r); err != nil {
		t.Fatal(err)
	}
	a.setOffline(true)

	size := uint64(100)
	at, _, err := a.Setattr(ctx, tr.Inode, c, vfs.SetAttr{Size: &size})
	if err != nil || at.Size != size {
		t.Fatalf("truncate offline of a file read whole: size %d, %v; want %d", at.Size, err, size)
	}
	if _, _, err := a.Setattr(ctx, un.Inode, c, vfs.SetAttr{Size: &size}); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("truncate offline of a file never read: %v; want ErrDisconnected", err)
	}
	r, _, err = a.Open(ctx, tr.Inode, c, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	k, err := a.Read(ctx, r, 0, buf)
	if err != nil || !bytes.Equal(buf[:k], first[:size]) {
		t.Fatalf("read offline after the truncation: %d bytes, %v; want the first %d", k, err, size)
	}
	a.Flush(ctx, r)
	a.Release(ctx, r)

	a.setOffline(false)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile(filepath.Join(exp, "t"))
		if err == nil && bytes.Equal(b, first[:size]) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the export's t after reconnection: %d bytes, %v; want %d", len(b), err, size)
		}
	}
	if cs, _ := ReadConflicts(a.cacheDir); len(cs) != 0 {
		t.Fatalf("conflicts: %+v; want none (nobody else changed t)", cs)
	}
}
