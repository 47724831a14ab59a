package tests

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestMountDisconnectedSetattrThenWrite: offline, a utimes of a cached
// file the server made (touch -d), then an append to it (its data dirty in
// the cache). Nobody else touched the file. Back online the log's SETATTR
// goes first and moves the server's mtime; the write-back that follows
// must not take that, this mount's own change, for another client's: the
// export holds the appended data, and no conflict is recorded.
func TestMountDisconnectedSetattrThenWrite(t *testing.T) {
	t.Parallel()
	s := newServeProc(t, "--grace", "2s")
	if err := os.Mkdir(s.path("work"), 0o777); err != nil {
		t.Fatal(err)
	}
	m := startMount(t, s, "", "", "--disconnected=auto", "--disconnect-after=2s", "--log-level=debug")
	if _, err := os.ReadDir(m.path("work")); err != nil {
		t.Fatal(err)
	}
	// Written through the mount and fsynced (on the server), then closed:
	// cached, its open kept past the close (an open offline needs one).
	orig := []byte("written online\n")
	f, err := os.OpenFile(m.path("work/log"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(orig); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	// Not read on the server: a local process's open would call the
	// mount back and take its kept open.
	goOfflineReq(t, m)
	when := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	if err := os.Chtimes(m.path("work/log"), when, when); err != nil {
		t.Fatalf("utimes offline: %v\n%s", err, tail(m.logPath, 30))
	}
	f, err = os.OpenFile(m.path("work/log"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatalf("open for append offline: %v", err)
	}
	more := []byte("appended offline\n")
	if _, err := f.Write(more); err != nil {
		t.Fatalf("append offline: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close offline: %v", err)
	}
	want := append(append([]byte(nil), orig...), more...)
	goOnlineReq(t, m)
	waitExport(t, m, s.path("work"), map[string][]byte{"log": want}, 60*time.Second)
	time.Sleep(2 * time.Second) // a conflict recorded late
	if c := conflictLines(m); len(c) != 0 {
		t.Fatalf("conflicts recorded: %q; want none (nobody else changed the file)\n%s", c, tail(m.logPath, 40))
	}
	if got, _ := exportFiles(s.path("work")); len(got) != 1 {
		names := []string{}
		for n := range got {
			names = append(names, n)
		}
		t.Fatalf("the export's files: %s; want log alone (no conflict copy)", strings.Join(names, " "))
	}
}

// TestMountDisconnectedSetattrThenWriteKilled: as
// TestMountDisconnectedSetattrThenWrite, the mount killed (kill -9) before
// reconnecting: the remount sends the log and reintegrates the dirty data,
// with no conflict (nobody else changed the file).
func TestMountDisconnectedSetattrThenWriteKilled(t *testing.T) {
	t.Parallel()
	s := newServeProc(t, "--grace", "2s")
	if err := os.Mkdir(s.path("work"), 0o777); err != nil {
		t.Fatal(err)
	}
	m := startMount(t, s, "", "", "--disconnected=auto", "--disconnect-after=2s", "--log-level=debug")
	if _, err := os.ReadDir(m.path("work")); err != nil {
		t.Fatal(err)
	}
	orig := []byte("written online\n")
	f, err := os.OpenFile(m.path("work/log"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(orig); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	goOfflineReq(t, m)
	when := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	if err := os.Chmod(m.path("work/log"), 0o600); err != nil {
		t.Fatalf("chmod offline: %v\n%s", err, tail(m.logPath, 30))
	}
	if err := os.Chtimes(m.path("work/log"), when, when); err != nil {
		t.Fatalf("utimes offline: %v\n%s", err, tail(m.logPath, 30))
	}
	f, err = os.OpenFile(m.path("work/log"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatalf("open for append offline: %v", err)
	}
	more := []byte("appended offline\n")
	if _, err := f.Write(more); err != nil {
		t.Fatalf("append offline: %v", err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync offline: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close offline: %v", err)
	}
	want := append(append([]byte(nil), orig...), more...)
	m.kill9()
	m2 := startMount(t, s, "", m.cacheDir, "--disconnected=auto", "--disconnect-after=2s", "--log-level=debug")
	waitExport(t, m2, s.path("work"), map[string][]byte{"log": want}, 60*time.Second)
	time.Sleep(2 * time.Second) // a conflict recorded late
	if c := conflictLines(m2); len(c) != 0 {
		t.Fatalf("conflicts recorded: %q; want none (nobody else changed the file)\n%s", c, tail(m2.logPath, 40))
	}
	if st, err := os.Stat(s.path("work/log")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the export's log: %v, %v; want mode 0600", st.Mode(), err)
	}
}
