package tests

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// TestMountSNFSLocalNameWhileDown: a mount holding a directory's write-back
// permit with changes logged under it (not yet reintegrated) when the server
// is killed; while no server runs, a process on the server machine renames a
// file into that directory, a name the mount looked up before (no notifier runs to see it); the server starts
// again and the mount reclaims the permit. The mount must find the new name
// within a second, as it finds a local process's change at any other time.
func TestMountSNFSLocalNameWhileDown(t *testing.T) {
	t.Parallel()
	s := newServeProc(t, "--grace", "5s")
	if err := os.Mkdir(s.path("l"), 0o777); err != nil {
		t.Fatal(err)
	}
	m := startMount(t, s, "", "", "--permits=on", "--permit-data=on")
	if _, err := os.ReadDir(m.path("l")); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := os.WriteFile(m.path(fmt.Sprintf("l/mine%d", i)), []byte("mine"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(m.path("l/theirs")); !os.IsNotExist(err) {
		t.Fatalf("l/theirs before it is made: %v", err)
	}
	if err := os.WriteFile(s.path("theirs"), []byte("made while the server was down"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.kill9(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(s.path("theirs"), s.path("l/theirs")); err != nil {
		t.Fatal(err)
	}
	s.start()
	start := time.Now()
	var err error
	for {
		if _, err = os.Stat(m.path("l/theirs")); err == nil || time.Since(start) > 5*time.Second {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil || time.Since(start) > time.Second {
		t.Fatalf("the mount found the name made while the server was down after %v (%v); want within a second", time.Since(start).Round(time.Millisecond), err)
	}
	for i := range 5 {
		if _, err := os.Stat(s.path(fmt.Sprintf("l/mine%d", i))); err != nil {
			t.Errorf("the mount's file on the server: %v", err)
		}
	}
}
