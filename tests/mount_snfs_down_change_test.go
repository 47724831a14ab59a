package tests

import (
	"bytes"
	"os"
	"slices"
	"testing"
	"time"
)

// TestMountSNFSLocalChangeWhileServerDown: a process on the server machine
// rewrites a file (and adds a name to a directory) while no server runs; a
// mount that cached the file and listed the directory before the crash sees
// the new data and the new name once the restarted server has its reclaim:
// no notifier saw the change, so the server takes a reclaimed file changed
// after its previous instance's last moment alive as changed (server/alive.go)
// and calls back the caches. Before, the mount served the old data for good.
func TestMountSNFSLocalChangeWhileServerDown(t *testing.T) {
	t.Parallel()
	s := newServeProc(t)
	old := bytes.Repeat([]byte("o"), 6804)
	if err := os.WriteFile(s.path("f"), old, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(s.path("d"), 0o777); err != nil {
		t.Fatal(err)
	}
	a := startMount(t, s, "", "")
	for range 3 {
		if got, err := os.ReadFile(a.path("f")); err != nil || !bytes.Equal(got, old) {
			t.Fatalf("read before the crash: %d bytes, %v", len(got), err)
		}
		if _, err := os.ReadDir(a.path("d")); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.kill9(); err != nil {
		t.Fatal(err)
	}
	neu := bytes.Repeat([]byte("n"), 13317)
	if err := os.WriteFile(s.path("f"), neu, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.path("d/new"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s.start()
	// The mount finds the restart at its next call or keepalive and
	// reclaims; the bound is a failure bound, not a speed.
	var got []byte
	var names []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var err error
		got, err = os.ReadFile(a.path("f"))
		if err != nil {
			t.Fatal(err)
		}
		es, err := os.ReadDir(a.path("d"))
		if err != nil {
			t.Fatal(err)
		}
		names = names[:0]
		for _, e := range es {
			names = append(names, e.Name())
		}
		if bytes.Equal(got, neu) && slices.Contains(names, "new") || time.Now().After(deadline) {
			break
		}
	}
	if !bytes.Equal(got, neu) {
		t.Errorf("after a local change while the server was down: the mount reads %d bytes (%q...), want the new %d", len(got), got[:min(1, len(got))], len(neu))
	}
	if !slices.Contains(names, "new") {
		t.Errorf("after a local create while the server was down: the mount lists %v, want new in it", names)
	}
}
