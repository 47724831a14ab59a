package cachemgr

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestOfflineRemoveServerLink: offline, a name of a file the server made
// with two names is removed: the name left reports one link (its inode and
// the offline copy's entry, served after the kernel forgets the inode), as
// for a file made offline (TestOfflineLinkMadeOffline), and back online
// the export holds it under that name.
func TestOfflineRemoveServerLink(t *testing.T) {
	addr, exp := testServer(t)
	if err := os.Mkdir(filepath.Join(exp, "d"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(exp, "d", "f"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(exp, "d", "f"), filepath.Join(exp, "d", "g")); err != nil {
		t.Fatal(err)
	}
	a := openOffline(t, addr, exp, nil)
	ctx, c := a.ctx, a.c
	d := a.lookup(nil, "d")
	a.listed(d.Inode)
	f := a.lookup(d.Inode, "f")
	if f.Attr.Nlink != 2 {
		t.Fatalf("lookup of f: nlink %d; want 2", f.Attr.Nlink)
	}
	a.setOffline(true)
	if err := a.Remove(ctx, d.Inode, c, "f", f.Inode); err != nil {
		t.Fatalf("remove offline: %v", err)
	}
	copyNlink := a.copyNlink(d.Inode, "g")
	if copyNlink != 1 {
		t.Fatalf("the offline copy's g after f went: nlink %d; want 1", copyNlink)
	}
	g, err := a.Lookup(ctx, d.Inode, c, "g")
	if err != nil || g.Attr.Nlink != 1 {
		t.Fatalf("lookup of g offline: nlink %d, %v; want 1", g.Attr.Nlink, err)
	}
	a.setOffline(false)
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
