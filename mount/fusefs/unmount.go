package fusefs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Unmount unmounts dir, served by srv (nil when served by another process),
// and waits for the serve loop to end. When a normal unmount does not succeed
// within timeout (files still open, a wedged request), it detaches the mount
// (MNT_DETACH) and aborts the FUSE connection through fusectl, so that nothing
// is left behind to hang later users of dir.
// A busy mount is tried again until timeout: a descriptor open on it is
// often brief (a child forked by a process of the mount holds a copy until
// it execs or exits).
func Unmount(dir string, srv *fuse.Server, timeout time.Duration) error {
	return unmount(dir, srv, timeout, timeout, nil)
}

// UnmountOrAbort is Unmount that calls aborted (if not nil) once the mount
// is detached and its connection aborted, before waiting for the serve loop:
// the caller cancels there what its handlers wait on (a server that is gone),
// since an aborted connection sends them no interrupt. It is the end of a
// mount that was told to stop (SIGTERM): a busy mount is tried again for
// busyGrace only, not until timeout, since what keeps it busy may be a
// request wedged on a server that is gone, whose caller waits for the
// abort.
func UnmountOrAbort(dir string, srv *fuse.Server, timeout time.Duration, aborted func()) error {
	return unmount(dir, srv, timeout, min(busyGrace, timeout), aborted)
}

// busyGrace is how long UnmountOrAbort tries a busy mount again.
const busyGrace = time.Second

func unmount(dir string, srv *fuse.Server, timeout, busyWait time.Duration, aborted func()) error {
	// The connection's number, for the abort, from the mount table: a
	// stat(2) of dir would ask the mount for its root's attributes, which a
	// mount whose server is gone may wait for without end.
	minor, devOK := mountMinor(dir)
	done := make(chan error, 1)
	deadline := time.Now().Add(busyWait)
	go func() {
		for {
			var err error
			if srv != nil {
				err = srv.Unmount()
			} else {
				err = syscall.Unmount(dir, 0)
			}
			if !isBusy(err) || time.Until(deadline) < 100*time.Millisecond {
				done <- err
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	select {
	case err := <-done:
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) && srv == nil {
			return err
		}
	case <-time.After(timeout):
	}
	derr := syscall.Unmount(dir, syscall.MNT_DETACH)
	if devOK {
		abort(minor)
	}
	if aborted != nil {
		aborted()
	}
	if srv != nil {
		w := make(chan struct{})
		go func() { srv.Wait(); close(w) }()
		select {
		case <-w:
		case <-time.After(timeout):
			return fmt.Errorf("unmount %s: serve loop still running after a forced unmount", dir)
		}
	}
	if derr != nil && !errors.Is(derr, syscall.EINVAL) {
		return fmt.Errorf("unmount %s (forced): %w", dir, derr)
	}
	return fmt.Errorf("unmount %s: busy, or not idle within %v: detached and aborted", dir, timeout)
}

// isBusy says whether an unmount failed because the mount is in use:
// umount(2)'s EBUSY, or fusermount's message for it (go-fuse's Server.Unmount
// runs fusermount unless the mount was made with mount(2) directly).
func isBusy(err error) bool {
	return errors.Is(err, syscall.EBUSY) || err != nil && strings.Contains(err.Error(), "busy")
}

// abort ends the FUSE connection of device dev (fusectl's abort file), mounting
// fusectl first if needed.
// mountMinor returns the minor device number of the file system mounted
// on dir (a FUSE mount's connection number in fusectl), from
// /proc/self/mountinfo (the last mount on dir).
func mountMinor(dir string) (uint64, bool) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return 0, false
	}
	var minor uint64
	found := false
	for _, l := range strings.Split(string(b), "\n") {
		// ID PARENT MAJOR:MINOR ROOT MOUNTPOINT ...
		f := strings.Fields(l)
		if len(f) < 5 || unescapeMountinfo(f[4]) != dir {
			continue
		}
		var major, m uint64
		if _, err := fmt.Sscanf(f[2], "%d:%d", &major, &m); err == nil {
			minor, found = m, true
		}
	}
	return minor, found
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var out []byte
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%o", &v); err == nil {
				out = append(out, v)
				i += 3
				continue
			}
		}
		out = append(out, s[i])
	}
	return string(out)
}

func abort(minor uint64) {
	const ctl = "/sys/fs/fuse/connections"
	p := fmt.Sprintf("%s/%d/abort", ctl, minor)
	if _, err := os.Stat(p); err != nil {
		syscall.Mount("fusectl", ctl, "fusectl", 0, "")
	}
	os.WriteFile(p, []byte("1"), 0)
}

// FusermountPath finds the set-user-ID fusermount3 (Debian's fuse3), or an
// older fusermount, as go-fuse does when mount(2) is not allowed (a mount as
// a user other than root).
func FusermountPath() (string, error) {
	var err error
	for _, name := range []string{"fusermount3", "/bin/fusermount3", "fusermount", "/bin/fusermount"} {
		var p string
		if p, err = exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", err
}

// UserUnmount unmounts a user's own mount on dir with fusermount3 -u (-z:
// lazily, detaching it even if busy), which umount(2) refuses that user.
func UserUnmount(dir string, lazy bool) error {
	bin, err := FusermountPath()
	if err != nil {
		return fmt.Errorf("unmount %s: %w (a user's mount is unmounted with fusermount3)", dir, err)
	}
	args := []string{"-u"}
	if lazy {
		args = append(args, "-z")
	}
	var stderr bytes.Buffer
	cmd := exec.Command(bin, append(args, "--", dir)...)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return fmt.Errorf("unmount %s: %s: %w", dir, msg, err)
		}
		return fmt.Errorf("unmount %s: %s: %w", dir, bin, err)
	}
	return nil
}
