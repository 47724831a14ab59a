package tests

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestMountForegroundSIGHUP: closing the terminal of `snfs mount
// --foreground` (SIGHUP) unmounts cleanly, as SIGTERM does: the process
// exits 0, nothing is left mounted, and what was written is on the server.
// Under nohup (SIGHUP ignored) the mount stays. Through the real binary, in
// both modes. Before, SIGHUP's default action ended the process at once,
// leaving a dead mount ("transport endpoint is not connected").
func TestMountForegroundSIGHUP(t *testing.T) {
	t.Parallel()
	requireFUSE(t)
	bin := snfsBinary(t)
	e := newEnv(t, "rw,no_root_squash")
	port := fmt.Sprint(e.port())
	for _, mode := range []string{"nfs", "snfs"} {
		for _, nohup := range []bool{false, true} {
			dir := cliMountDir(t, "snfs-hup-")
			detachAll(t, dir)
			args := []string{"mount", "--foreground", "--mode", mode, "--cache-dir", cliMountDir(t, "snfs-hup-cache-"),
				"--nfs-port", port, "--mount-port", port, "127.0.0.1:" + e.dir, dir}
			cmd := command(bin, args...)
			if nohup {
				// An ignored signal stays ignored across exec, as nohup(1) relies on.
				cmd = command("sh", append([]string{"-c", `trap "" HUP; exec "$0" "$@"`, bin}, args...)...)
			}
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			for i := 0; mountsOn(t, dir) == 0; i++ {
				if i == 200 {
					cmd.Process.Kill()
					<-exited
					t.Fatalf("%s mode: not mounted after 20 s:\n%s", mode, out.String())
				}
				time.Sleep(100 * time.Millisecond)
			}
			name := fmt.Sprintf("hup-%s-%v", mode, nohup)
			if err := os.WriteFile(filepath.Join(dir, name), []byte(name), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			if nohup {
				select {
				case err := <-exited:
					t.Fatalf("%s mode under nohup: SIGHUP ended the mount (%v):\n%s", mode, err, out.String())
				case <-time.After(time.Second):
				}
				if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != name {
					t.Fatalf("%s mode under nohup: after SIGHUP the mount reads %q, %v", mode, b, err)
				}
				cmd.Process.Signal(syscall.SIGTERM)
			}
			select {
			case err := <-exited:
				if err != nil {
					t.Fatalf("%s mode (nohup %v): the mount process ended with %v:\n%s", mode, nohup, err, out.String())
				}
			case <-time.After(60 * time.Second):
				cmd.Process.Kill()
				<-exited
				t.Fatalf("%s mode: the mount process still runs 60 s after the signal:\n%s", mode, out.String())
			}
			if n := mountsOn(t, dir); n != 0 {
				t.Fatalf("%s mode (nohup %v): %d mounts left on %s after the signal", mode, nohup, n, dir)
			}
			if b, err := os.ReadFile(e.path(name)); err != nil || string(b) != name {
				t.Fatalf("%s mode (nohup %v): the server has %q, %v; want %q", mode, nohup, b, err, name)
			}
		}
	}
}
