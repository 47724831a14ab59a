package cachemgr

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"snfs/mount/vfs"
)

// TestOfflineChangeDuringCheck: offline, the mount removes d/f, then an
// application removes d/g just as the mount reconnects: the removal was
// found offline, and its base is noted and its record logged after the
// reconnection's check took the bases it checks; a process on the server
// rewrote g meanwhile. g's base is checked before its UNLINK is sent: the
// UNLINK is kept as a conflict and the server process's g stays; f's
// removal reaches the server.
func TestOfflineChangeDuringCheck(t *testing.T) {
	addr, exp := testServer(t)
	if err := os.Mkdir(filepath.Join(exp, "d"), 0o777); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"f", "g"} {
		if err := os.WriteFile(filepath.Join(exp, "d", n), []byte("the server's "+n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a := openOffline(t, addr, exp, nil)
	ctx, c := a.ctx, a.c
	d := a.lookup(nil, "d")
	a.listed(d.Inode)
	f, g := a.lookup(d.Inode, "f"), a.lookup(d.Inode, "g")
	a.setOffline(true)
	if err := a.Remove(ctx, d.Inode, c, "f", f.Inode); err != nil {
		t.Fatalf("remove offline: %v", err)
	}
	theirs := []byte("a process on the server wrote g meanwhile")
	taken := make(chan struct{})
	sn := mgrOf(a.FS)
	sn.offChecking.set(func(*vfs.Inode) {
		sn.offChecking.set(nil)
		close(taken)
	})
	sn.offRemoving.set(func(*vfs.Inode) {
		sn.offRemoving.set(nil)
		if err := os.WriteFile(filepath.Join(exp, "d", "g"), theirs, 0o644); err != nil {
			t.Error(err)
		}
		if err := SetDisconnected(a.FS, false); err != nil {
			t.Error(err)
		}
		select {
		case <-taken:
		case <-time.After(30 * time.Second):
			t.Error("the reconnection did not check the names")
		}
	})
	if err := a.Remove(ctx, d.Inode, c, "g", g.Inode); err != nil {
		t.Fatalf("remove offline racing the reconnection: %v", err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, ferr := os.Stat(filepath.Join(exp, "d", "f"))
		got, gerr := os.ReadFile(filepath.Join(exp, "d", "g"))
		if gerr != nil || string(got) != string(theirs) {
			t.Fatalf("the export's d/g: %q, %v; want the server process's change kept", got, gerr)
		}
		cs, _ := ReadConflicts(a.cacheDir)
		if os.IsNotExist(ferr) && len(cs) == 1 && cs[0].Name == "g" && sn.permits.log.Len() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after reconnection: f %v, conflicts %+v, log %d; want f removed, one conflict (g's UNLINK)", ferr, cs, sn.permits.log.Len())
		}
	}
}
