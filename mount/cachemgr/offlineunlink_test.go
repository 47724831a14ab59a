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

// TestOfflineRemoveServerLink: offline, a name of a file the server made
// with two names is removed: the name left reports one link (its inode and
// the offline copy's entry, served after the kernel forgets the inode), as
// for a file made offline (TestOfflineLinkMadeOffline), and back online
// the export holds it under that name.
func TestOfflineRemoveServerLink(t *testing.T) {
	addr, exp := testServer(t)
	ctx := context.Background()
	c := vfs.Cred{UID: uint32(syscall.Getuid()), GID: uint32(syscall.Getgid())}
	if err := os.Mkdir(filepath.Join(exp, "d"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(exp, "d", "f"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(exp, "d", "f"), filepath.Join(exp, "d", "g")); err != nil {
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
	f, err := a.Lookup(ctx, d.Inode, c, "f")
	if err != nil || f.Attr.Nlink != 2 {
		t.Fatalf("lookup of f: nlink %d, %v; want 2", f.Attr.Nlink, err)
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
	if err := a.Remove(ctx, d.Inode, c, "f", f.Inode); err != nil {
		t.Fatalf("remove offline: %v", err)
	}
	sn := a.Ops().(*snfsFS)
	sn.names.mu.Lock()
	var copyNlink uint32
	if cp := sn.names.offl[string(d.Inode.FH)]; cp != nil {
		if k, ok := cp.index["g"]; ok {
			copyNlink = cp.ents[k].attr.Nlink
		}
	}
	sn.names.mu.Unlock()
	if copyNlink != 1 {
		t.Fatalf("the offline copy's g after f went: nlink %d; want 1", copyNlink)
	}
	g, err := a.Lookup(ctx, d.Inode, c, "g")
	if err != nil || g.Attr.Nlink != 1 {
		t.Fatalf("lookup of g offline: nlink %d, %v; want 1", g.Attr.Nlink, err)
	}
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
			t.Fatalf("the export's d after reconnection: g %q (%v), %d names; want g alone", b, err, len(ents))
		}
	}
}
