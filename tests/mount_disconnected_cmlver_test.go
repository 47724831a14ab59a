package tests

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestMountDisconnectedEditConflict: offline, the mount removes one file
// the server made and renames another over a second; meanwhile a process
// on the server appends to the removed file and to the one renamed over
// (the same files, edited in place: the names still hold the objects they
// held as the mount went offline). The versions say they changed: the
// REMOVE and the RENAME are kept as conflicts, not sent, and the server's
// files keep the appended bytes (the renamed file stays under its old
// name). A file removed offline that nobody touched is removed, without a
// conflict.
func TestMountDisconnectedEditConflict(t *testing.T) {
	t.Parallel()
	s := newServeProc(t, "--grace", "2s")
	if err := os.Mkdir(s.path("work"), 0o777); err != nil {
		t.Fatal(err)
	}
	first := map[string][]byte{}
	for k, n := range []string{"edited", "over", "src", "untouched"} {
		first[n] = randBytes(uint64(3741+k), 5000+1000*k)
		if err := os.WriteFile(s.path("work/"+n), first[n], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m := startMount(t, s, "", "", "--disconnected=auto", "--disconnect-after=2s", "--log-level=debug")
	if _, err := os.ReadDir(m.path("work")); err != nil {
		t.Fatal(err)
	}
	goOfflineReq(t, m)
	for _, n := range []string{"edited", "untouched"} {
		if err := os.Remove(m.path("work/" + n)); err != nil {
			t.Fatalf("remove %s offline: %v", n, err)
		}
	}
	if err := os.Rename(m.path("work/src"), m.path("work/over")); err != nil {
		t.Fatalf("rename over offline: %v", err)
	}
	// Meanwhile, on the server: edited and over are appended to in place.
	want := map[string][]byte{"src": first["src"]}
	for k, n := range []string{"edited", "over"} {
		more := randBytes(uint64(3751+k), 3000)
		f, err := os.OpenFile(s.path("work/"+n), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(more); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		want[n] = append(append([]byte(nil), first[n]...), more...)
	}
	goOnlineReq(t, m)
	waitExport(t, m, s.path("work"), want, 60*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for len(conflictLines(m)) < 2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	c := conflictLines(m)
	all := strings.Join(c, "\n")
	if len(c) != 2 || !strings.Contains(all, "RENAME") || !strings.Contains(all, "UNLINK") {
		t.Fatalf("conflicts recorded: %q; want two: the UNLINK of edited and the RENAME over over", c)
	}
	if strings.Contains(all, "untouched") {
		t.Fatalf("a conflict for the untouched file: %q", c)
	}
}
