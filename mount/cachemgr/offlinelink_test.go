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

// TestOfflineLinkMadeOffline: offline, a file made offline gets two more
// names (hard links), then loses one of them and its first: the name left
// reports one link and reads the data, and back online the export holds
// the file under that name alone.
func TestOfflineLinkMadeOffline(t *testing.T) {
	addr, exp := testServer(t)
	ctx := context.Background()
	c := vfs.Cred{UID: uint32(syscall.Getuid()), GID: uint32(syscall.Getgid())}
	if err := os.Mkdir(filepath.Join(exp, "d"), 0o777); err != nil {
		t.Fatal(err)
	}
	a, err := OpenSNFS(ctx, SNFSMountConfig{Addr: addr, Export: exp, Name: "A",
		CacheDir: t.TempDir(), WriteBackDelay: time.Hour, Disconnected: true, DisconnectAfter: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
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
	e, w, err := a.Create(ctx, d.Inode, c, "f", 0o644, true, syscall.O_WRONLY)
	if err != nil {
		t.Fatalf("create offline: %v", err)
	}
	if _, err := a.Write(ctx, w, 0, []byte("data")); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(ctx, w); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, w); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"g", "h"} {
		if _, err := a.Link(ctx, e.Inode, d.Inode, c, n); err != nil {
			t.Fatalf("link offline of a file made offline: %v", err)
		}
	}
	// The offline copy's entries (served after the kernel forgets the
	// inode) count every name.
	sn := a.Ops().(*snfsFS)
	copyNlink := func(name string) uint32 {
		sn.names.mu.Lock()
		defer sn.names.mu.Unlock()
		cp := sn.names.offl[string(d.Inode.FH)]
		if cp == nil {
			return 0
		}
		k, ok := cp.index[name]
		if !ok {
			return 0
		}
		return cp.ents[k].attr.Nlink
	}
	for _, n := range []string{"f", "g", "h"} {
		if got := copyNlink(n); got != 3 {
			t.Fatalf("the offline copy's %s: nlink %d; want 3", n, got)
		}
	}
	for _, n := range []string{"h", "f"} {
		if err := a.Remove(ctx, d.Inode, c, n, e.Inode); err != nil {
			t.Fatalf("remove %s offline: %v", n, err)
		}
	}
	if got := copyNlink("g"); got != 1 {
		t.Fatalf("the offline copy's g after two of its names went: nlink %d; want 1", got)
	}
	g, err := a.Lookup(ctx, d.Inode, c, "g")
	if err != nil || g.Attr.Nlink != 1 {
		t.Fatalf("lookup of g offline: nlink %d, %v; want 1", g.Attr.Nlink, err)
	}
	r, _, err := a.Open(ctx, g.Inode, c, syscall.O_RDONLY)
	if err != nil {
		t.Fatalf("open of g offline: %v", err)
	}
	buf := make([]byte, 16)
	n, err := a.Read(ctx, r, 0, buf)
	if err != nil || string(buf[:n]) != "data" {
		t.Fatalf("read of g offline: %q, %v", buf[:n], err)
	}
	a.Release(ctx, r)
	if err := SetDisconnected(a, false); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile(filepath.Join(exp, "d", "g"))
		ents, _ := os.ReadDir(filepath.Join(exp, "d"))
		if err == nil && string(b) == "data" && len(ents) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the export's d after reconnection: g %q (%v), %d names; want g alone with the data", b, err, len(ents))
		}
	}
}
