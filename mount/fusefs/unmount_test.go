package fusefs_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"snfs/mount/fusefs"
	"snfs/mount/vfs"
)

// TestUnmountWaitsOutBusy: a descriptor open on the mount for a moment (as a
// forked child holds a copy until it execs) makes the unmount wait, not
// detach the mount and abort its connection: once the descriptor is closed
// the normal unmount succeeds.
func TestUnmountWaitsOutBusy(t *testing.T) {
	m := newTestMount(t, "nfs", vfs.Config{})
	f, err := os.Create(filepath.Join(m.dir, "held"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- fusefs.Unmount(m.dir, m.srv, 10*time.Second) }()
	time.Sleep(time.Second) // longer than go-fuse's own retries of EBUSY
	select {
	case err := <-done:
		f.Close()
		t.Fatalf("unmount returned while a file was open: %v", err)
	default:
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("unmount after the file was closed: %v (want a normal unmount)", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("unmount did not return")
	}
}
