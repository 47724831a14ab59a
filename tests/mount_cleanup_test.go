package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMountCleanupServerGone: a mount whose server is gone for good while a
// close is flushing to it (its WRITEs retried for ever on the mount's life
// context) is ended by the harness's cleanup within its bounds, with the
// failure reported: the cleanup once hung here for good in CI.
func TestMountCleanupServerGone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	m := newMount(t, e)
	f, err := os.Create(filepath.Join(m.dir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(randBytes(3, 1<<20)); err != nil {
		t.Fatal(err)
	}
	e.stop()
	closed := make(chan error, 1)
	go func() { closed <- f.Close() }()
	// The close's FLUSH is in the mount once it sends a WRITE.
	for deadline := time.Now().Add(30 * time.Second); m.v.Stats().Writes.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no WRITE 30 s after the close")
		}
	}
	const wait = 2 * time.Second
	start := time.Now()
	errs := m.end(wait)
	took := time.Since(start)
	// Unmount: wait, then wait for the serve loop at most; Finish: 2*wait,
	// then wait after the cancel; plus slack for a loaded machine.
	if bound := 5*wait + 10*time.Second; took > bound {
		t.Errorf("the cleanup took %v, over %v", took, bound)
	}
	var msgs []string
	for _, err := range errs {
		msgs = append(msgs, err.Error())
	}
	if !strings.Contains(strings.Join(msgs, "\n"), "cancelling the mount's context") {
		t.Errorf("the cleanup reported %q; want the stuck write-back reported", msgs)
	}
	select {
	case err := <-closed:
		if err == nil {
			t.Error("the close returned no error: its data never reached a server")
		}
	case <-time.After(10 * time.Second):
		t.Error("the close still blocked 10 s after the cleanup")
	}
}

// TestMountBusyReport: a mount with a file open is reported in use, naming
// the process and the descriptor; once it is closed, not in use (and the
// probe leaves it mounted).
func TestMountBusyReport(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rw,no_root_squash")
	m := newMount(t, e)
	p := filepath.Join(m.dir, "f")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	got := busyReport(m.dir, m.srv)
	if want := fmt.Sprintf("pid %d (", os.Getpid()); !strings.Contains(got, want) || !strings.Contains(got, "fd ") || !strings.Contains(got, p) {
		t.Errorf("with %s open: %q; want this process and its descriptor named", p, got)
	}
	f.Close()
	if got := busyReport(m.dir, m.srv); got != "" {
		t.Errorf("with nothing open: %q; want not in use", got)
	}
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatalf("after the probes: %v", err)
	}
}
