package cachemgr

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"snfs/mount/vfs"
)

// TestOfflineSetattrAgain: a chmod offline of a file the server made,
// sent at reconnection; then, offline again, another chmod of it, with no
// stat of it in between. Nobody else changed the file: the second chmod is
// no conflict. It may be refused (ErrDisconnected: the mount no longer
// knows the server's change time, to keep as its base); a chmod made
// offline must reach the server. Before, the base kept was the change time
// the mount gave the file for its first chmod, which the server never had:
// the second chmod was acknowledged, then refused at reconnection as
// another client's change, and lost. After a stat online it is made, and
// reaches the server.
func TestOfflineSetattrAgain(t *testing.T) {
	addr, exp := testServer(t)
	if err := os.WriteFile(filepath.Join(exp, "f"), []byte("the server's f"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := openOffline(t, addr, exp, nil)
	ctx, c, cacheDir := a.ctx, a.c, a.cacheDir
	if _, err := a.ReadDir(ctx, a.Root(), c); err != nil {
		t.Fatal(err)
	}
	e, err := a.Lookup(ctx, a.Root(), c, "f")
	if err != nil {
		t.Fatal(err)
	}
	offline := a.setOffline
	// chmodOffline makes a chmod offline, reports whether it was made, and
	// reconnects: a chmod made is on the server, no conflict recorded.
	chmodOffline := func(m uint32) bool {
		t.Helper()
		offline(true)
		_, _, err := a.Setattr(ctx, e.Inode, c, vfs.SetAttr{Mode: &m})
		if err != nil && !errors.Is(err, ErrDisconnected) {
			t.Fatalf("chmod %o offline: %v", m, err)
		}
		offline(false)
		for deadline := time.Now().Add(30 * time.Second); err == nil; time.Sleep(20 * time.Millisecond) {
			if cs, _ := ReadConflicts(cacheDir); len(cs) != 0 {
				t.Fatalf("conflicts after the chmod %o: %+v; want none (nobody else changed f)", m, cs)
			}
			fi, err := os.Stat(filepath.Join(exp, "f"))
			if err == nil && uint32(fi.Mode().Perm()) == m {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the export's f after reconnection: %v (%v); want %o", fi.Mode(), err, m)
			}
		}
		return err == nil
	}
	if !chmodOffline(0o755) {
		t.Fatal("chmod offline: ErrDisconnected; want it made")
	}
	time.Sleep(20 * time.Millisecond) // the server's ctime and this mount's are of other ticks
	chmodOffline(0o700)
	// Online (ls -l): the mount's attributes then are the server's.
	if _, _, err := a.Getattr(ctx, e.Inode, c); err != nil {
		t.Fatal(err)
	}
	if !chmodOffline(0o711) {
		t.Fatal("chmod offline after a stat online: ErrDisconnected; want it made")
	}
	time.Sleep(time.Second) // a conflict recorded late
	if cs, _ := ReadConflicts(cacheDir); len(cs) != 0 {
		t.Fatalf("conflicts: %+v; want none", cs)
	}
}

// TestOfflineSetattrAfterPermitSetattr: online, a chmod of a directory the
// server made, under its permit (logged, not sent); the mount goes offline
// before the log is sent, and the directory is chmod'ed again. Nobody else
// changed it: at reconnection neither chmod is a conflict, and the second
// is the server's mode. Before, the second chmod's base was the change time
// the mount gave the directory for the first (never the server's), its
// check refused both as another's change, and both were lost.
func TestOfflineSetattrAfterPermitSetattr(t *testing.T) {
	s := newServer(t, true)
	if err := os.Mkdir(filepath.Join(s.export, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	a := openOffline(t, s.addr, s.export, func(cfg *SNFSMountConfig) {
		cfg.Permits, cfg.PermitData = true, true
	})
	ctx, c, cacheDir := a.ctx, a.c, a.cacheDir
	e, err := a.Lookup(ctx, a.Root(), c, "d")
	if err != nil {
		t.Fatal(err)
	}
	d, sn := e.Inode, mgrOf(a.FS)
	holdPermit(t, sn, d)
	if _, err := a.ReadDir(ctx, d, c); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Getattr(ctx, d, c); err != nil {
		t.Fatal(err)
	}
	m1 := uint32(0o750)
	if _, _, err := a.Setattr(ctx, d, c, vfs.SetAttr{Mode: &m1}); err != nil {
		t.Fatal(err)
	}
	if sn.permits.log.Len() == 0 {
		t.Skip("the chmod under the permit was not logged: nothing to test")
	}
	a.setOffline(true)
	time.Sleep(20 * time.Millisecond)
	m2 := uint32(0o700)
	_, _, err = a.Setattr(ctx, d, c, vfs.SetAttr{Mode: &m2})
	if err != nil && !errors.Is(err, ErrDisconnected) {
		t.Fatalf("chmod offline: %v", err)
	}
	want := m2
	if err != nil {
		want = m1 // not made offline: the first stays
	}
	a.setOffline(false)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if cs, _ := ReadConflicts(cacheDir); len(cs) != 0 {
			t.Fatalf("conflicts: %+v; want none (nobody else changed d)", cs)
		}
		fi, err := os.Stat(filepath.Join(s.export, "d"))
		if err == nil && uint32(fi.Mode().Perm()) == want && sn.permits.log.Len() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the export's d after reconnection: %v (%v), log %d records; want %o", fi.Mode(), err, sn.permits.log.Len(), want)
		}
	}
}
