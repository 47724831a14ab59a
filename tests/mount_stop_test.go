package tests

import (
	"bytes"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMountStopServerGone: a mount whose server is gone still stops on
// SIGTERM (cmd/snfs/mount_end.go). The mount is busy (an open file) and a
// request is wedged on the dead server, so the unmount is forced: the
// wedged request fails instead of hanging its caller, and the serve loop
// ends. The write-back that follows cannot reach the server; a second
// SIGTERM abandons it and the process exits. In snfs mode what was closed
// is still in the cache directory, and the next mount with it writes it back
// once the server is up again: nothing acknowledged is lost.
func TestMountStopServerGone(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	for mode, flags := range map[string][]string{"snfs": {"--mode=snfs"}, "nfs": {"--mode=nfs"},
		"snfs-permits": {"--mode=snfs", "--permits=on", "--permit-data=on"}} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel() // each its own server and mount processes
			s := newServeProc(t)
			if err := os.WriteFile(s.path("uncached"), []byte("on the server only"), 0o644); err != nil {
				t.Fatal(err)
			}
			a := startMount(t, s, "", "", flags...)
			want := randBytes(67, 300000)
			writeDurable(t, a.path("precious"), want)
			busy, err := os.Open(a.path("precious"))
			if err != nil {
				t.Fatal(err)
			}
			defer busy.Close()
			if err := s.kill9(); err != nil {
				t.Fatal(err)
			}
			wedged := make(chan error, 1)
			go func() {
				_, err := os.ReadFile(a.path("uncached"))
				wedged <- err
			}()
			select {
			case err := <-wedged:
				t.Fatalf("a read of a file the mount never had returned (%v) with the server gone", err)
			case <-time.After(500 * time.Millisecond):
			}

			a.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-wedged:
				if err == nil {
					t.Error("the wedged read succeeded after the forced unmount")
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the wedged read still hangs 20 s after SIGTERM")
			}
			waitFileHas(t, a.logPath, "detached it, aborted its FUSE connection", 20*time.Second)
			select {
			case <-a.exited:
			case <-time.After(time.Second):
				// The write-back cannot reach the server: abandon it.
				a.cmd.Process.Signal(syscall.SIGTERM)
			}
			select {
			case <-a.exited:
			case <-time.After(20 * time.Second):
				t.Fatalf("snfs mount still runs 20 s after a second SIGTERM\n%s", tail(a.logPath, 20))
			}
			if isMounted(a.dir) {
				t.Errorf("%s is still mounted after the mount process exited", a.dir)
			}
			if mode != "nfs" && !strings.Contains(tail(a.logPath, 20), "write-back at unmount abandoned") {
				t.Errorf("the log does not say the write-back was abandoned:\n%s", tail(a.logPath, 20))
			}

			s.start()
			if mode != "nfs" {
				// Under a permit the file itself is not there yet either.
				if n := exportHas(t, s.path("precious")); n != 0 {
					t.Fatalf("the export has %d bytes of precious before the remount; want none (delayed write-back)", n)
				}
				startMount(t, s, a.dir, a.cacheDir, flags...)
			}
			if got := mustRead(t, s.path("precious")); !bytes.Equal(got, want) {
				t.Fatalf("the export has %d bytes of precious; want the %d closed before the server died", len(got), len(want))
			}
		})
	}
}

// waitFileHas waits until the file at p contains s.
func waitFileHas(t *testing.T, p, s string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		b, _ := os.ReadFile(p)
		if bytes.Contains(b, []byte(s)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q not in %s after %v:\n%s", s, p, timeout, tail(p, 20))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
