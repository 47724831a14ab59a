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
	"snfs/state"
	"snfs/state/clientfile"
)

// TestOfflineWriteOpen: offline, an open for writing of a file the mount
// had only read (its read open kept) is granted locally, and its appends
// are read back; one of a file whose data was never read fails
// ErrDisconnected. A second file is opened for writing offline and held
// across the reconnection: back online, the first file's data is
// reintegrated (nobody changed it: no conflict), the held open is OPENed
// again, and what is written through it after the reconnection reaches the
// server too.
func TestOfflineWriteOpen(t *testing.T) {
	addr, exp := testServer(t)
	first := bytes.Repeat([]byte("0123456789abcdef"), 1000)
	for _, n := range []string{"app", "held", "unread", "ro"} {
		if err := os.WriteFile(filepath.Join(exp, n), first, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(exp, "ro"), 0o444); err != nil {
		t.Fatal(err)
	}
	a := openOffline(t, addr, exp, func(cfg *SNFSMountConfig) {
		cfg.CloseDelay = clientfile.UntilRecalled
		cfg.KeptOpens = 100
	})
	ctx, c, cacheDir := a.ctx, a.c, a.cacheDir
	ino := map[string]*vfs.Inode{}
	for _, n := range []string{"app", "held", "unread", "ro"} {
		e, err := a.Lookup(ctx, a.Root(), c, n)
		if err != nil {
			t.Fatal(err)
		}
		ino[n] = e.Inode
		if n == "unread" {
			continue
		}
		r, _, err := a.Open(ctx, e.Inode, c, syscall.O_RDONLY)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len(first)+10)
		if k, err := a.Read(ctx, r, 0, buf); err != nil || k != len(first) {
			t.Fatalf("read %s: %d, %v", n, k, err)
		}
		a.Flush(ctx, r)
		if err := a.Release(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	a.setOffline(true)

	if _, _, err := a.Open(ctx, ino["unread"], c, syscall.O_WRONLY); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("open for writing offline of a file never read: %v; want ErrDisconnected", err)
	}
	// Root's open for writing of a file the mode bits let nobody write
	// (the server, which may squash root, cannot be asked): refused after
	// its grant, which is given back with no CLOSE owed for it.
	if c.UID == 0 {
		if _, _, err := a.Open(ctx, ino["ro"], c, syscall.O_WRONLY); !errors.Is(err, ErrDisconnected) {
			t.Fatalf("root's open for writing offline of a mode 0444 file: %v; want ErrDisconnected", err)
		}
		sn := a.Ops().(*snfsFS)
		sn.disc.mu.Lock()
		owed := len(sn.disc.owed)
		sn.disc.mu.Unlock()
		i := ino["ro"]
		i.Mu.Lock()
		w, kept := stOf(i).Opens(state.Write), stOf(i).Kept(state.Read)
		i.Mu.Unlock()
		if owed != 0 || w != 0 || kept != 1 {
			t.Fatalf("after a refused open granted offline: %d CLOSEs owed, %d write opens, %d kept read opens; want 0, 0, 1", owed, w, kept)
		}
	}
	w, _, err := a.Open(ctx, ino["app"], c, syscall.O_WRONLY|syscall.O_APPEND)
	if err != nil {
		t.Fatalf("open for appending offline of a file only read: %v", err)
	}
	if _, _, err := a.Append(ctx, w, []byte("appended offline")); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(ctx, w); err != nil {
		t.Fatalf("close offline: %v", err)
	}
	if err := a.Release(ctx, w); err != nil {
		t.Fatal(err)
	}
	wantApp := append(append([]byte(nil), first...), "appended offline"...)
	r, _, err := a.Open(ctx, ino["app"], c, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(wantApp)+10)
	if k, err := a.Read(ctx, r, 0, buf); err != nil || !bytes.Equal(buf[:k], wantApp) {
		t.Fatalf("offline read back: %d bytes, %v; want %d", k, err, len(wantApp))
	}
	a.Flush(ctx, r)
	a.Release(ctx, r)

	h, _, err := a.Open(ctx, ino["held"], c, syscall.O_RDWR)
	if err != nil {
		t.Fatalf("open for writing offline of a file only read: %v", err)
	}
	if _, err := a.Write(ctx, h, 0, []byte("OFFLINE")); err != nil {
		t.Fatal(err)
	}
	if err := SetDisconnected(a.FS, false); err != nil {
		t.Fatal(err)
	}
	wantHeld := append([]byte("OFFLINE"), first[7:]...)
	wantHeld = append(wantHeld, "ONLINE"...)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, off := DisconnectedSince(a.FS); !off {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("not online 30 s after the request")
		}
	}
	i := ino["held"]
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got, _ := os.ReadFile(filepath.Join(exp, "app"))
		i.Mu.Lock()
		forgot := stOf(i).Forgotten(state.Write)
		i.Mu.Unlock()
		if bytes.Equal(got, wantApp) && forgot == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after reconnection: the server's app has %d bytes (want %d); opens granted offline the server does not count yet: %d",
				len(got), len(wantApp), forgot)
		}
	}
	if _, err := a.Write(ctx, h, uint64(len(first)), []byte("ONLINE")); err != nil {
		t.Fatal(err)
	}
	if err := a.Fsync(ctx, h); err != nil {
		t.Fatalf("fsync online of the open granted offline: %v", err)
	}
	a.Flush(ctx, h)
	if err := a.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(exp, "held")); !bytes.Equal(got, wantHeld) {
		t.Fatalf("the server's held: %d bytes (%q...); want %d", len(got), got[:min(len(got), 12)], len(wantHeld))
	}
	if b, err := os.ReadFile(filepath.Join(cacheDir, ConflictsFile)); err == nil && len(bytes.TrimSpace(b)) > 0 {
		t.Fatalf("conflicts recorded: %s", b)
	}
}
