package tests

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Reproducers of what TestPermitsSoak found (permits_soak_test.go), each
// without kills, as small as it could be made.

// TestPermitsHandOverSeen: mount B holds the permit of its directory b
// (files made there locally, the listing cached); mount A moves a file it
// made in its own directory a (under a's permit) into b. Once A's rename
// returned, B must find the file under its new name and read A's bytes
// (docs/protocol.md section 21.4: the rename recalls B's permit, and B drops
// the names it kept before it answers), and unlink it.
func TestPermitsHandOverSeen(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	s := newServeProc(t)
	for _, d := range []string{"a", "b"} {
		if err := os.Mkdir(s.path(d), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	flags := []string{"--permits=on", "--permit-data=on"}
	a := startMount(t, s, "", "", flags...)
	b := startMount(t, s, "", "", flags...)
	for _, m := range []*mntProc{a, b} {
		if _, err := os.ReadDir(m.path(".")); err != nil {
			t.Fatal(err)
		}
	}
	bad := 0
	for i := range 30 {
		// B changes b (its permit, its names kept by the kernel).
		if err := os.WriteFile(b.path(fmt.Sprintf("b/own%d", i)), []byte("b's"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := os.ReadDir(b.path("b")); err != nil {
			t.Fatal(err)
		}
		data := []byte(fmt.Sprintf("A's file %d", i))
		src, dst := fmt.Sprintf("a/f%d", i), fmt.Sprintf("b/moved%d", i)
		if err := os.WriteFile(a.path(src), data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(a.path(src), a.path(dst)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(b.path(dst))
		switch {
		case err != nil:
			bad++
			t.Errorf("round %d: B after A's rename into b: %v", i, err)
		case !bytes.Equal(got, data):
			bad++
			t.Errorf("round %d: B reads %q, want %q", i, got, data)
		}
		if err := os.Remove(b.path(dst)); err != nil {
			t.Errorf("round %d: B's unlink of %s: %v", i, dst, err)
		}
		if bad > 3 {
			t.FailNow()
		}
	}
}

// TestPermitsRestartRefusedAgain: mount A removes and renames names in a
// directory under its permit (records in its log), the server is killed
// and restarted (every permit gone), and mount B makes a change in the
// directory first, which gives B the directory's permit. A's log, sent
// next, is refused SNFS_ERR_NOPERMIT; the permits were lost to a restart,
// so A must ask for the permit again (which recalls B's) and send its
// records under it (docs/mount.md "Refused records"): the remove and the
// rename A's application was told were made must be on the server, and
// nothing be kept as a conflict.
//
// Found by TestPermitsSoak (s39): the GET_PERMIT asked again was refused
// (B held the permit), the records were refused SNFS_ERR_NOPERMIT again and
// kept as conflicts: A's acknowledged remove and rename were lost. Now a
// read of the directory between GET_PERMITs recalls B's permit, and the
// names A's records change are checked against their bases before they are
// sent (mount/cachemgr/permitlost.go).
func TestPermitsRestartRefusedAgain(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	s := newServeProc(t, "--grace", "5s")
	if err := os.Mkdir(s.path("s"), 0o777); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"gone", "from"} {
		if err := os.WriteFile(s.path("s/"+n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	flags := []string{"--permits=on", "--permit-data=on"}
	a := startMount(t, s, "", "", flags...)
	b := startMount(t, s, "", "", flags...)
	for _, m := range []*mntProc{a, b} {
		if _, err := os.ReadDir(m.path("s")); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(a.path("s/gone")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(a.path("s/from"), a.path("s/to")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.path("s/gone")); err != nil {
		t.Fatalf("s/gone left the server at once (%v): the remove was not made under a permit", err)
	}
	s.restart()
	// B changes s first: its permit.
	if err := os.WriteFile(b.path("s/b"), []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b.path("s/b2"), []byte("b2"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A sends its log.
	d, err := os.Open(a.path("s"))
	if err != nil {
		t.Fatal(err)
	}
	d.Sync()
	d.Close()
	if _, err := os.Stat(s.path("s/gone")); !os.IsNotExist(err) {
		t.Errorf("s/gone on the server after A's log was sent: %v; A removed it", err)
	}
	if _, err := os.Stat(s.path("s/to")); err != nil {
		t.Errorf("s/to on the server after A's log was sent: %v; A renamed s/from to it", err)
	}
	if l := conflictLines(a); len(l) > 0 {
		t.Errorf("A kept conflicts (none was made):\n%s", strings.Join(l, "\n"))
	}
}

// TestPermitsKilledWriterRead: mount A writes a file the server made (its
// data dirty in A's cache, acknowledged by close), A is killed with
// SIGKILL, mount B reads the file while A is down (the server cannot call A
// back), then A is mounted again and writes its data back. Nobody but A
// wrote the file: the server must end with A's bytes and no conflict copy.
func TestPermitsKilledWriterRead(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	s := newServeProc(t)
	if err := os.Mkdir(s.path("a"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.path("a/f"), []byte("the server's first bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--permits=on", "--permit-data=on"}
	a := startMount(t, s, "", "", flags...)
	b := startMount(t, s, "", "", flags...)
	want := bytes.Repeat([]byte("A's acknowledged bytes "), 500)
	if err := os.WriteFile(a.path("a/f"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	a.kill9()
	got, err := os.ReadFile(b.path("a/f"))
	t.Logf("B read %d bytes while A was down (%v)", len(got), err)
	a2 := startMount(t, s, a.dir, a.cacheDir, flags...)
	if got, err := os.ReadFile(s.path("a/f")); err != nil || !bytes.Equal(got, want) {
		t.Errorf("the server after A's remount: %d bytes, %v; want A's %d", len(got), err, len(want))
	}
	copies, _ := filepath.Glob(s.path("a/*.snfs-conflict-*"))
	if len(copies) > 0 || len(conflictLines(a2)) > 0 {
		t.Errorf("conflict copies %v, conflicts %q; nobody else wrote the file", copies, conflictLines(a2))
	}
}

// TestPermitsTruncLocal: a file made locally under a permit with its data
// local (--permit-data=on), closed, then at once opened again with O_TRUNC
// and written shorter (or not at all), while reintegrations of the
// directory run (another file made and the directory fsynced, in a loop):
// the mount, and after the directory's fsync the server, have the shorter
// file.
//
// Found by TestPermitsSoak (s39): the reintegration logged the file's data
// as a CML_STORE (permitstore.go) and the O_TRUNC open that came next
// dropped the mark, so the file was pushed after the reply over what the
// STORE wrote; the push only WROTE the local bytes (nothing for an empty
// file) and never set the size: the STORE's longer content kept its tail.
// The push now cuts the server's file to the local size (permitdata.go
// writeData).
func TestPermitsTruncLocal(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	s := newServeProc(t)
	if err := os.Mkdir(s.path("a"), 0o777); err != nil {
		t.Fatal(err)
	}
	a := startMount(t, s, "", "", "--permits=on", "--permit-data=on")
	if _, err := os.ReadDir(a.path("a")); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for k := 0; ; k++ {
			select {
			case <-stop:
				return
			default:
			}
			os.WriteFile(a.path(fmt.Sprintf("a/other%d", k)), []byte("other"), 0o644)
			if d, err := os.Open(a.path("a")); err == nil {
				d.Sync()
				d.Close()
			}
		}
	}()
	defer func() { close(stop); <-done }()
	const n = 200
	want := map[string][]byte{}
	for i := range n {
		name := fmt.Sprintf("a/f%d", i)
		p := a.path(name)
		long, short := randBytes(uint64(i), 1+i*97%16000), randBytes(uint64(100+i), i%3*3000)
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_TRUNC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.Write(long)
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if f, err = os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0); err != nil {
			t.Fatal(err)
		}
		f.Write(short)
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		want[name] = short
		if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, short) {
			t.Errorf("round %d: the mount reads %s (%v) after the O_TRUNC rewrite", i, soakDiff(got, short), err)
		}
	}
	syncDir(t, a.path("a"))
	for name, w := range want {
		if got, err := os.ReadFile(s.path(name)); err != nil || !bytes.Equal(got, w) {
			t.Errorf("the server's %s: %s (%v)", name, soakDiff(got, w), err)
		}
	}
}
