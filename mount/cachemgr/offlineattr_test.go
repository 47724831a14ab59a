package cachemgr

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"snfs/mount/vfs"
)

// TestOfflineSetattrServerObjects: offline, a chmod of a file the server
// made is made on its cached attributes and its base kept in the bases
// file; a set-ID bit, a size of a file not open, and a chmod of a file
// whose cached data is dirty are not (ErrDisconnected). Back online the
// chmod is on the server; that of a file a process on the server changed
// meanwhile is a conflict, and the server's mode stays.
func TestOfflineSetattrServerObjects(t *testing.T) {
	addr, exp := testServer(t)
	for _, n := range []string{"f", "g", "dirty"} {
		if err := os.WriteFile(filepath.Join(exp, n), []byte("the server's "+n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a := openOffline(t, addr, exp, nil)
	ctx, c, cacheDir := a.ctx, a.c, a.cacheDir
	if _, err := a.ReadDir(ctx, a.Root(), c); err != nil {
		t.Fatal(err)
	}
	ents := map[string]vfs.Entry{}
	for _, n := range []string{"f", "g", "dirty"} {
		e, err := a.Lookup(ctx, a.Root(), c, n)
		if err != nil {
			t.Fatal(err)
		}
		ents[n] = e
	}
	w, _, err := a.Open(ctx, ents["dirty"].Inode, c, syscall.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write(ctx, w, 0, []byte("mine")); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(ctx, w); err != nil {
		t.Fatal(err)
	}
	a.Release(ctx, w)
	a.setOffline(true)
	mode := func(m uint32) vfs.SetAttr { return vfs.SetAttr{Mode: &m} }
	got, _, err := a.Setattr(ctx, ents["f"].Inode, c, mode(0o755))
	if err != nil || got.Mode&0o7777 != 0o755 {
		t.Fatalf("chmod offline: mode %o, %v; want 0755", got.Mode, err)
	}
	if _, _, err := a.Setattr(ctx, ents["g"].Inode, c, mode(0o600)); err != nil {
		t.Fatalf("chmod offline: %v", err)
	}
	if _, _, err := a.Setattr(ctx, ents["g"].Inode, c, mode(0o4755)); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("chmod u+s offline: %v; want ErrDisconnected", err)
	}
	size := uint64(0)
	if _, _, err := a.Setattr(ctx, ents["g"].Inode, c, vfs.SetAttr{Size: &size}); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("truncate offline of a file not open: %v; want ErrDisconnected", err)
	}
	if _, _, err := a.Setattr(ctx, ents["dirty"].Inode, c, mode(0o700)); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("chmod offline of a dirty file: %v; want ErrDisconnected", err)
	}
	b, err := os.ReadFile(filepath.Join(cacheDir, "offline", "bases"))
	if err != nil || strings.Count(string(b), `"kind":"attr"`) != 2 {
		t.Fatalf("the bases file: %q, %v; want the two files' attribute bases", b, err)
	}
	time.Sleep(20 * time.Millisecond)
	if err := os.Chmod(filepath.Join(exp, "g"), 0o640); err != nil { // a process on the server, meanwhile
		t.Fatal(err)
	}
	if err := SetDisconnected(a.FS, false); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		cs, _ := ReadConflicts(cacheDir)
		fi, err1 := os.Stat(filepath.Join(exp, "f"))
		gi, err2 := os.Stat(filepath.Join(exp, "g"))
		if err1 == nil && err2 == nil && fi.Mode().Perm() == 0o755 && gi.Mode().Perm() == 0o640 &&
			len(cs) == 1 && cs[0].Name == "g" && strings.Contains(cs[0].Reason, "SETATTR") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after reconnection: f %v (%v), g %v (%v), conflicts %+v; want f 0755, g the server's 0640, one conflict of g",
				fi.Mode(), err1, gi.Mode(), err2, cs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
