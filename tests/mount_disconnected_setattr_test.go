package tests

import (
	"errors"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestMountDisconnectedSetattr: offline, a chmod +x of a file the server
// made, a utimes of another (cp -p, tar) and a chmod of a directory the
// server made (after a file made in it) are made on the cached attributes (stat shows them) and
// logged; back online they are on the server, and a second mount sees
// them, with no conflict recorded (nothing changed them meanwhile). A
// chmod offline of a file whose mode a second mount changed meanwhile is a
// real conflict: `snfs conflicts` lists it, and the other mount's mode
// stays; so is a utimes of a file the second mount wrote meanwhile.
func TestMountDisconnectedSetattr(t *testing.T) {
	t.Parallel()
	s := newServeProc(t, "--grace", "2s")
	if err := os.Mkdir(s.path("work"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(s.path("work/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"script", "stamp", "theirs", "edited"} {
		if err := os.WriteFile(s.path("work/"+name), []byte("the server's "+name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m := startMount(t, s, "", "", "--disconnected=auto", "--disconnect-after=2s", "--log-level=debug")
	m2 := startMount(t, s, "", "", "--writeback-delay=0")
	for _, mm := range []*mntProc{m, m2} {
		if _, err := os.ReadDir(mm.path("work")); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"script", "stamp", "theirs", "edited", "sub"} { // their attributes, kept offline
			if _, err := os.Stat(mm.path("work/" + name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := os.ReadDir(m.path("work/sub")); err != nil { // listed: changed offline
		t.Fatal(err)
	}
	goOfflineReq(t, m)
	if err := os.Chmod(m.path("work/script"), 0o755); err != nil {
		t.Fatalf("chmod offline: %v\n%s", err, tail(m.logPath, 30))
	}
	when := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	if err := os.Chtimes(m.path("work/stamp"), when, when); err != nil {
		t.Fatalf("utimes offline: %v", err)
	}
	// tar x into a directory the server made, then its mode and times.
	if err := os.WriteFile(m.path("work/sub/new"), []byte("made offline"), 0o644); err != nil {
		t.Fatalf("create offline: %v", err)
	}
	if err := os.Chmod(m.path("work/sub"), 0o700); err != nil {
		t.Fatalf("chmod of a directory offline: %v", err)
	}
	if err := os.Chmod(m.path("work/theirs"), 0o600); err != nil {
		t.Fatalf("chmod offline: %v", err)
	}
	if err := os.Chmod(m.path("work/theirs"), os.ModeSetuid|0o755); !errors.Is(err, syscall.EHOSTDOWN) {
		t.Fatalf("chmod u+s offline: %v; want EHOSTDOWN (a set-ID bit is the server's to give)", err)
	}
	if st, err := os.Stat(m.path("work/script")); err != nil || st.Mode().Perm() != 0o755 {
		t.Fatalf("offline stat of script: %v, %v; want 0755", st.Mode(), err)
	}
	if st, err := os.Stat(m.path("work/stamp")); err != nil || !st.ModTime().Equal(when) {
		t.Fatalf("offline stat of stamp: mtime %v, %v; want %v", st.ModTime(), err, when)
	}
	if err := os.Chtimes(m.path("work/edited"), when, when); err != nil {
		t.Fatalf("utimes offline: %v", err)
	}
	// Other clients' changes meanwhile: a mode, and data.
	if err := os.Chmod(m2.path("work/theirs"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m2.path("work/edited"), []byte("the other client's edit"), 0o644); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); string(mustRead(t, s.path("work/edited"))) != "the other client's edit"; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the second mount's write is not on the export")
		}
	}
	goOnlineReq(t, m)
	waitConflictListed(t, m.cacheDir, time.Now().Add(60*time.Second), "theirs", "SETATTR")
	waitConflictListed(t, m.cacheDir, time.Now().Add(60*time.Second), "edited", "SETATTR")
	want := map[string]os.FileMode{"script": 0o755, "sub": 0o700, "theirs": 0o640, "stamp": 0o644}
	deadline := time.Now().Add(60 * time.Second)
	for name, mode := range want {
		for {
			st, err := os.Stat(s.path("work/" + name))
			if err == nil && st.Mode().Perm() == mode {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the export's %s after reconnection: %v, %v; want mode %v\n%s", name, st.Mode(), err, mode, tail(m.logPath, 60))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitExport(t, m, s.path("work/sub"), map[string][]byte{"new": []byte("made offline")}, 60*time.Second)
	if st, err := os.Stat(s.path("work/stamp")); err != nil || !st.ModTime().Equal(when) {
		t.Fatalf("the export's stamp: mtime %v, %v; want %v", st.ModTime(), err, when)
	}
	// The second mount sees them (its cached attributes expire).
	for name, mode := range want {
		for {
			st, err := os.Stat(m2.path("work/" + name))
			if err == nil && st.Mode().Perm() == mode {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the second mount's %s: %v, %v; want mode %v", name, st.Mode(), err, mode)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if st, err := os.Stat(m2.path("work/stamp")); err != nil || !st.ModTime().Equal(when) {
		t.Fatalf("the second mount's stamp: mtime %v, %v; want %v", st.ModTime(), err, when)
	}
	if got := mustRead(t, m2.path("work/script")); string(got) != "the server's script" {
		t.Fatalf("the second mount reads script: %q", got)
	}
	if c := conflictLines(m); len(c) != 2 {
		t.Fatalf("conflicts recorded: %q; want two, the SETATTRs of theirs and edited", c)
	}
	if st, err := os.Stat(s.path("work/edited")); err != nil || st.ModTime().Equal(when) || string(mustRead(t, s.path("work/edited"))) != "the other client's edit" {
		t.Fatalf("the export's edited: %v, %v; want the other client's data and mtime", st.ModTime(), err)
	}
	// The first mount's view is the server's again.
	for {
		st, err := os.Stat(m.path("work/theirs"))
		if err == nil && st.Mode().Perm() == 0o640 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the mount's theirs after the conflict: %v, %v; want the server's 0640", st.Mode(), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestMountDisconnectedSetattrKilled: the offline chmods of two files the
// server made, and the mount killed (kill -9) before reconnecting; a
// process on the server changes the second's mode meanwhile. The remount
// (same cache directory) sends the first's, and keeps the second's as a
// conflict: the base logged before the kill is checked.
func TestMountDisconnectedSetattrKilled(t *testing.T) {
	t.Parallel()
	s := newServeProc(t, "--grace", "2s")
	if err := os.Mkdir(s.path("work"), 0o777); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"script", "theirs"} {
		if err := os.WriteFile(s.path("work/"+name), []byte("the server's "+name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m := startMount(t, s, "", "", "--disconnected=auto", "--disconnect-after=2s", "--log-level=debug")
	if _, err := os.ReadDir(m.path("work")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"script", "theirs"} {
		if _, err := os.Stat(m.path("work/" + name)); err != nil {
			t.Fatal(err)
		}
	}
	goOfflineReq(t, m)
	if err := os.Chmod(m.path("work/script"), 0o755); err != nil {
		t.Fatalf("chmod offline: %v\n%s", err, tail(m.logPath, 30))
	}
	if err := os.Chmod(m.path("work/theirs"), 0o600); err != nil {
		t.Fatalf("chmod offline: %v", err)
	}
	m.kill9()
	time.Sleep(20 * time.Millisecond) // a ctime of another tick
	if err := os.Chmod(s.path("work/theirs"), 0o640); err != nil {
		t.Fatal(err)
	}
	m2 := startMount(t, s, "", m.cacheDir, "--disconnected=auto", "--disconnect-after=2s", "--log-level=debug")
	waitConflictListed(t, m2.cacheDir, time.Now().Add(60*time.Second), "theirs", "SETATTR")
	deadline := time.Now().Add(60 * time.Second)
	for name, mode := range map[string]os.FileMode{"script": 0o755, "theirs": 0o640} {
		for {
			st, err := os.Stat(s.path("work/" + name))
			if err == nil && st.Mode().Perm() == mode {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the export's %s after the remount: %v, %v; want mode %v\n%s", name, st.Mode(), err, mode, tail(m2.logPath, 60))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if c := conflictLines(m2); len(c) != 1 {
		t.Fatalf("conflicts recorded: %q; want one, the SETATTR of theirs", c)
	}
}
