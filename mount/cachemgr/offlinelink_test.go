package cachemgr

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestOfflineLinkMadeOffline: offline, a file made offline gets two more
// names (hard links), then loses one of them and its first: the name left
// reports one link and reads the data, and back online the export holds
// the file under that name alone.
func TestOfflineLinkMadeOffline(t *testing.T) {
	addr, exp := testServer(t)
	if err := os.Mkdir(filepath.Join(exp, "d"), 0o777); err != nil {
		t.Fatal(err)
	}
	a := openOffline(t, addr, exp, nil)
	ctx, c := a.ctx, a.c
	d := a.lookup(nil, "d")
	a.listed(d.Inode)
	a.setOffline(true)
	e := a.writeNew(d.Inode, "f", []byte("data"))
	for _, n := range []string{"g", "h"} {
		if _, err := a.Link(ctx, e.Inode, d.Inode, c, n); err != nil {
			t.Fatalf("link offline of a file made offline: %v", err)
		}
	}
	// The offline copy's entries (served after the kernel forgets the
	// inode) count every name.
	copyNlink := func(name string) uint32 { return a.copyNlink(d.Inode, name) }
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
	a.setOffline(false)
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
