package tests

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// TestMountRefusedMessage: `snfs mount` of a port where no server listens
// fails (exit 1) with one message that names the failed dial once (not
// "dial tcp ...: dial tcp ...") and says what to check, in every mode,
// detached (the message comes back from the mount process) or not.
func TestMountRefusedMessage(t *testing.T) {
	port := freePort(t) // free: nothing listens there
	dir := diskTempDir(t, "snfs-mnt-")
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for _, c := range [][]string{
		{"--mode=nfs"}, {"--mode=snfs"}, {"--mode=auto"}, {"--mode=nfs", "--foreground"},
		{"--mode=snfs", "--foreground", "--cache-dir", diskTempDir(t, "snfs-cache-")},
	} {
		args := append([]string{"mount", "--nfs-port", strconv.Itoa(port), "--mount-port", strconv.Itoa(port)}, c...)
		args = append(args, "127.0.0.1:/srv/share", dir)
		cmd := exec.Command(snfsBinary(t), args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("snfs %s: %v (want exit status 1)\nstderr: %s", strings.Join(args, " "), err, stderr.String())
		}
		msg := stderr.String()
		if n := strings.Count(msg, "dial tcp"); n != 1 {
			t.Errorf("snfs %s: \"dial tcp\" %d times in %q; want once", strings.Join(c, " "), n, msg)
		}
		want := "snfs: dial tcp " + addr + ": connect: connection refused: is `snfs serve` running at " + addr + "?"
		if !strings.HasPrefix(msg, want) || strings.Count(msg, "\n") != 1 {
			t.Errorf("snfs %s: message %q; want one line starting %q", strings.Join(c, " "), msg, want)
		}
		if stdout.Len() != 0 {
			t.Errorf("snfs %s: standard output %q; want nothing", strings.Join(c, " "), stdout.String())
		}
	}
}
