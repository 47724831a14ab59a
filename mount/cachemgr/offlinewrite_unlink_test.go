package cachemgr

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"snfs/state/clientfile"
)

// TestOfflineWriteOpenUnlinked: offline, a file the mount had only read is
// appended to through an open granted offline, closed, and removed
// (logged): back online the file is gone from the server and no conflict
// is recorded (its dirty data went with its name).
func TestOfflineWriteOpenUnlinked(t *testing.T) {
	addr, exp := testServer(t)
	first := bytes.Repeat([]byte("0123456789abcdef"), 1000)
	if err := os.WriteFile(filepath.Join(exp, "gone"), first, 0o644); err != nil {
		t.Fatal(err)
	}
	a := openOffline(t, addr, exp, func(cfg *SNFSMountConfig) {
		cfg.CloseDelay = clientfile.UntilRecalled
		cfg.KeptOpens = 100
	})
	ctx, c, cacheDir := a.ctx, a.c, a.cacheDir
	if _, err := a.ReadDir(ctx, a.Root(), c); err != nil {
		t.Fatal(err)
	}
	e, err := a.Lookup(ctx, a.Root(), c, "gone")
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := a.Open(ctx, e.Inode, c, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(first)+10)
	if _, err := a.Read(ctx, r, 0, buf); err != nil {
		t.Fatal(err)
	}
	a.Flush(ctx, r)
	a.Release(ctx, r)
	a.setOffline(true)
	w, _, err := a.Open(ctx, e.Inode, c, syscall.O_WRONLY|syscall.O_APPEND)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Append(ctx, w, []byte("more")); err != nil {
		t.Fatal(err)
	}
	a.Flush(ctx, w)
	a.Release(ctx, w)
	if err := a.Remove(ctx, a.Root(), c, "gone", e.Inode); err != nil {
		t.Fatalf("unlink offline: %v", err)
	}
	SetDisconnected(a.FS, false)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, err := os.Stat(filepath.Join(exp, "gone"))
		if _, off := DisconnectedSince(a.FS); !off && os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gone still on the server: %v", err)
		}
	}
	time.Sleep(2 * time.Second) // a conflict copy would be made by now
	if b, err := os.ReadFile(filepath.Join(cacheDir, ConflictsFile)); err == nil && len(bytes.TrimSpace(b)) > 0 {
		t.Fatalf("conflicts recorded: %s", b)
	}
	if ents, err := os.ReadDir(exp); err != nil || len(ents) != 0 {
		t.Fatalf("the export holds %d names (%v); want none (no conflict copy)", len(ents), err)
	}
}
