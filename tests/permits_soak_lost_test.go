package tests

import (
	"os"
	"strings"
	"syscall"
	"testing"
)

// A permit lost before its log is in (docs/mount.md "A permit lost before
// the log is in"): the holder's records of the names nobody else changed
// are applied as logged, and those of the names another client changed
// meanwhile are kept as conflicts, the other client's objects untouched.

// lostSetup makes s/NAME for each name on the server and starts two
// mounts with permits, both listing s.
func lostSetup(t *testing.T, s *srvProc, names ...string) (a, b *mntProc) {
	t.Helper()
	if err := os.Mkdir(s.path("s"), 0o777); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if err := os.WriteFile(s.path("s/"+n), []byte("server's "+n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	flags := []string{"--permits=on", "--permit-data=on"}
	a = startMount(t, s, "", "", flags...)
	b = startMount(t, s, "", "", flags...)
	for _, m := range []*mntProc{a, b} {
		if _, err := os.ReadDir(m.path("s")); err != nil {
			t.Fatal(err)
		}
	}
	return a, b
}

// replaceThrough makes path's name hold a new file with data, through
// mount m (written aside, renamed over it: another object), and sends m's
// log.
func replaceThrough(t *testing.T, m *mntProc, name string, data string) {
	t.Helper()
	if err := os.WriteFile(m.path("s/new-"+name), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(m.path("s/new-"+name), m.path("s/"+name)); err != nil {
		t.Fatal(err)
	}
}

// wantFile checks the server's s/NAME holds data ("": no such name).
func wantFile(t *testing.T, s *srvProc, name, data, why string) {
	t.Helper()
	got, err := os.ReadFile(s.path("s/" + name))
	switch {
	case data == "" && !os.IsNotExist(err):
		t.Errorf("the server's s/%s: %q (%v); want none: %s", name, got, err, why)
	case data != "" && (err != nil || string(got) != data):
		t.Errorf("the server's s/%s: %q (%v); want %q: %s", name, got, err, data, why)
	}
}

// TestPermitsRestartRealConflict: mount A removes s/gone and s/keep and
// renames s/from to s/to under its permit of s; the server is killed, and
// while it is down a process on the server machine puts its own file at
// s/gone and makes s/to (no server runs to notice it: docs/protocol.md
// section 7.3). The restarted server grants A its permit again
// (RECLAIM_PERMIT, section 21.9), and A checks its log's names before it
// sends it: its remove of s/gone and its rename to s/to are conflicts (the
// process's files stay, s/from stays), its remove of s/keep (nobody else
// touched it) is applied. (Another mount's changes after the restart no
// longer come first: they wait for A's log, TestPermitsRestartRefusedAgain.)
func TestPermitsRestartRealConflict(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	s := newServeProc(t, "--grace", "5s")
	a, _ := lostSetup(t, s, "gone", "keep", "from")
	for _, n := range []string{"gone", "keep"} {
		if err := os.Remove(a.path("s/" + n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Rename(a.path("s/from"), a.path("s/to")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(s.path("s/gone")); err != nil {
		t.Fatalf("s/gone left the server at once (%v): A's remove was not made under its permit", err)
	}
	if err := s.kill9(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.path("s/new-gone"), []byte("local gone"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(s.path("s/new-gone"), s.path("s/gone")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.path("s/to"), []byte("local to"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.start()
	syncDirErr(a.path("s")) // A's log: its conflicts are no error of the fsync
	wantFile(t, s, "gone", "local gone", "A's remove of s/gone met the local process's file there: a conflict")
	wantFile(t, s, "to", "local to", "A's rename to s/to met the local process's file there: a conflict")
	wantFile(t, s, "from", "server's from", "A's rename was not applied")
	wantFile(t, s, "keep", "", "A removed s/keep, which nobody else touched")
	l := conflictLines(a)
	if len(l) != 2 || !strings.Contains(strings.Join(l, "\n"), `"gone"`) || !strings.Contains(strings.Join(l, "\n"), `"from"`) {
		t.Errorf("A's conflicts: want the remove of gone and the rename of from:\n%s", strings.Join(l, "\n"))
	}
}

// TestPermitsRevokedNoFalseConflict: mount A removes s/gone and s/taken and
// renames s/from to s/to under its permit of s, then stops answering
// (SIGSTOP) past the callback timeout while mount B makes s/other (its
// change recalls A's permit: not answered, revoked) and puts its own file
// at s/taken. Running again, A sends its log: refused SNFS_ERR_NOPERMIT,
// the permit is asked again and the names checked: the remove of s/gone
// and the rename (names B did not touch) are applied, not kept as
// conflicts; the remove of s/taken, whose file B replaced, is the one
// conflict, and B's file stays.
func TestPermitsRevokedNoFalseConflict(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	// A callback timeout short enough for a quick revocation, long enough
	// for A's lease (half of it: docs/protocol.md section 21.4, "Lease")
	// to outlast its changes on a loaded machine: made through the server,
	// they would leave nothing to lose.
	s := newServeProc(t, "--callback-timeout", "4s")
	a, b := lostSetup(t, s, "gone", "taken", "from")
	for _, n := range []string{"gone", "taken"} {
		if err := os.Remove(a.path("s/" + n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Rename(a.path("s/from"), a.path("s/to")); err != nil {
		t.Fatal(err)
	}
	// Looked at with lstat(2) only: a read of a file updates its atime,
	// which the server takes for a local process's change of the directory
	// (its notifier's FAN_ATTRIB) and recalls A's permit.
	for _, n := range []string{"gone", "taken", "from"} {
		if _, err := os.Lstat(s.path("s/" + n)); err != nil {
			t.Fatalf("s/%s left the server at once (%v): A's change was not made under its permit", n, err)
		}
	}
	pid := a.pid()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	cont := func() { syscall.Kill(pid, syscall.SIGCONT) }
	t.Cleanup(cont)
	// B's first change of s recalls A's permit; A cannot answer: revoked
	// at the deadline, then B's change is made.
	if err := os.WriteFile(b.path("s/other"), []byte("B's other"), 0o644); err != nil {
		t.Fatal(err)
	}
	replaceThrough(t, b, "taken", "B's taken")
	syncDir(t, b.path("s"))
	wantFile(t, s, "taken", "B's taken", "B's fsync of s sent its log")
	wantFile(t, s, "gone", "server's gone", "A, stopped, sent nothing")
	cont()
	syncDirErr(a.path("s"))
	wantFile(t, s, "gone", "", "A removed s/gone, which nobody else touched")
	wantFile(t, s, "from", "", "A renamed s/from, which nobody else touched")
	wantFile(t, s, "to", "server's from", "A renamed s/from to s/to, which nobody else touched")
	wantFile(t, s, "other", "B's other", "B's file")
	wantFile(t, s, "taken", "B's taken", "A's remove of s/taken met B's file there: a conflict")
	l := conflictLines(a)
	if len(l) != 1 || !strings.Contains(l[0], `"taken"`) {
		t.Errorf("A's conflicts: want the remove of taken alone:\n%s", strings.Join(l, "\n"))
	}
}

// syncDirErr is an fsync of directory p, its error ignored (the log's
// conflicts are reported by `snfs conflicts`).
func syncDirErr(p string) {
	if d, err := os.Open(p); err == nil {
		d.Sync()
		d.Close()
	}
}

// TestPermitsKilledRestartBases: mount A removes s/gone and s/taken under
// its permit of s and is killed (SIGKILL: its log on its disk, the bases
// in it), the server restarts, and mount B puts its own file at s/taken
// and makes s/other. A mounted again on the same cache directory sends the
// log it left only after checking its names against the bases the log
// kept: the remove of s/gone is applied, that of s/taken (B's file now) is
// the one conflict.
func TestPermitsKilledRestartBases(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	// A short grace: A, killed, does not come back to end it early, and B's
	// reintegration is answered JUKEBOX until it ends.
	s := newServeProc(t, "--grace", "1s")
	a, b := lostSetup(t, s, "gone", "taken")
	for _, n := range []string{"gone", "taken"} {
		if err := os.Remove(a.path("s/" + n)); err != nil {
			t.Fatal(err)
		}
	}
	a.kill9()
	s.restart()
	if err := os.WriteFile(b.path("s/other"), []byte("B's other"), 0o644); err != nil {
		t.Fatal(err)
	}
	replaceThrough(t, b, "taken", "B's taken")
	syncDir(t, b.path("s"))
	wantFile(t, s, "gone", "server's gone", "A was killed before it sent its log")
	a2 := startMount(t, s, a.dir, a.cacheDir, "--permits=on", "--permit-data=on")
	syncDirErr(a2.path("s"))
	wantFile(t, s, "gone", "", "A removed s/gone, which nobody else touched")
	wantFile(t, s, "taken", "B's taken", "A's remove of s/taken met B's file there: a conflict")
	wantFile(t, s, "other", "B's other", "B's file")
	l := conflictLines(a2)
	if len(l) != 1 || !strings.Contains(l[0], `"taken"`) {
		t.Errorf("A's conflicts: want the remove of taken alone:\n%s", strings.Join(l, "\n"))
	}
}
