package cachemgr

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"snfs/mount/vfs"
)

// TestOfflineCheckedKilled: offline, the mount makes d/n and removes d/f;
// a process on the server rewrites d/f meanwhile. At reconnection the
// check of the names poisons f (its UNLINK is kept as a conflict, not
// sent). The mount is killed right after the check (its cache directory
// copied there): the remount from that copy must not send the UNLINK
// either (what the check found is kept with the log), though nothing it
// could check again tells it so (n was made by then, the LSN moved past
// it).
func TestOfflineCheckedKilled(t *testing.T) {
	addr, exp := testServer(t)
	ctx := context.Background()
	c := vfs.Cred{UID: uint32(syscall.Getuid()), GID: uint32(syscall.Getgid())}
	if err := os.Mkdir(filepath.Join(exp, "d"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(exp, "d", "f"), []byte("the server's f"), 0o644); err != nil {
		t.Fatal(err)
	}
	cacheA, cacheB := t.TempDir(), t.TempDir()
	cfg := SNFSMountConfig{Addr: addr, Export: exp, Name: "offcheck",
		CacheDir: cacheA, WriteBackDelay: time.Hour, Disconnected: true, DisconnectAfter: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	a, err := OpenSNFS(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	d, err := a.Lookup(ctx, a.Root(), c, "d")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.ReadDir(ctx, d.Inode, c); err != nil {
		t.Fatal(err)
	}
	f, err := a.Lookup(ctx, d.Inode, c, "f")
	if err != nil {
		t.Fatal(err)
	}
	if err := SetDisconnected(a, true); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, off := DisconnectedSince(a); off {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("not offline 20 s after the request")
		}
	}
	_, h, err := a.Create(ctx, d.Inode, c, "n", 0o644, true, syscall.O_RDWR)
	if err != nil {
		t.Fatalf("create offline: %v", err)
	}
	if _, err := a.Write(ctx, h, 0, []byte("made offline")); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(ctx, h); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	if err := a.Remove(ctx, d.Inode, c, "f", f.Inode); err != nil {
		t.Fatalf("remove offline: %v", err)
	}
	theirs := []byte("a process on the server wrote f meanwhile")
	if err := os.WriteFile(filepath.Join(exp, "d", "f"), theirs, 0o644); err != nil {
		t.Fatal(err)
	}

	copied := make(chan struct{})
	mgrOf(a).afterOffCheck.set(func(*vfs.Inode) {
		select {
		case <-copied:
		default:
			copyDir(t, cacheA, cacheB) // the kill
			close(copied)
		}
	})
	if err := SetDisconnected(a, false); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile(filepath.Join(exp, "d", "n"))
		if err == nil && string(b) == "made offline" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the export's d/n after reconnection: %q, %v", b, err)
		}
	}
	select {
	case <-copied:
	default:
		t.Fatal("the reconnection did not check the names")
	}
	mgrOf(a).afterOffCheck.set(nil)
	if cs, _ := ReadConflicts(cacheA); len(cs) != 1 || cs[0].Name != "f" {
		t.Fatalf("conflicts of the mount that checked: %+v; want one, f's UNLINK", cs)
	}
	// a is not closed before the remount: a kill sends no UNREGISTER, and
	// the server keeps the last LSN it applied for the name (a clean end
	// would forget it, and the remount would send the CREATE again).
	if err := SetDisconnected(a, true); err != nil {
		t.Fatal(err)
	}

	cfg.CacheDir = cacheB
	b, err := OpenSNFS(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Sync(ctx); err != nil {
		t.Logf("sync of the remount: %v", err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got, err := os.ReadFile(filepath.Join(exp, "d", "f"))
		if err != nil || string(got) != string(theirs) {
			t.Fatalf("the export's d/f after the remount: %q, %v; want the server process's change kept", got, err)
		}
		if cs, _ := ReadConflicts(cacheB); len(cs) == 1 && cs[0].Name == "f" {
			break
		}
		if time.Now().After(deadline) {
			cs, _ := ReadConflicts(cacheB)
			t.Fatalf("conflicts of the remount: %+v; want one, f's UNLINK", cs)
		}
	}
}
