package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"snfs/mount/fusefs"
)

// A mount point as mount(8) takes it: relative to the working directory,
// with trailing slashes, through symbolic links. It is resolved once, in the
// command the user ran, to the path the kernel will list in
// /proc/self/mountinfo, before the mount process detaches (and changes to
// /); `snfs umount` resolves its argument the same way, so that both name
// the same mount (and the same pid file) whichever spelling was used.

// resolveMountPoint is p made absolute and free of symbolic links. A dead
// FUSE mount at p (its process gone: ENOTCONN), or one whose root the server
// no longer knows (its export removed: ESTALE), cannot be looked through, so
// for it only the parent is resolved.
func resolveMountPoint(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err == nil {
		return real, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		// mount(8)'s "mount point does not exist", not EvalSymlinks'
		// "lstat PATH: ...".
		return "", &fs.PathError{Op: "mount point", Path: abs, Err: syscall.ENOENT}
	}
	if !errors.Is(err, syscall.ENOTCONN) && !errors.Is(err, syscall.ESTALE) || abs == "/" {
		return "", err
	}
	parent, perr := filepath.EvalSymlinks(filepath.Dir(abs))
	if perr != nil {
		return "", err
	}
	return filepath.Join(parent, filepath.Base(abs)), nil
}

// mountEntry is one line of /proc/self/mountinfo (proc(5)).
type mountEntry struct {
	dir, fsType, source string
}

// mountsAt lists the mounts on dir, bottom first (mountinfo lists a mount
// after the one it covers).
func mountsAt(dir string) ([]mountEntry, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseMountinfo(f, dir)
}

func parseMountinfo(r io.Reader, dir string) ([]mountEntry, error) {
	var out []mountEntry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - TYPE SOURCE SUPER
		f := strings.Fields(sc.Text())
		if len(f) < 5 || unescapeMountinfo(f[4]) != dir {
			continue
		}
		e := mountEntry{dir: dir}
		for k := 5; k < len(f); k++ {
			if f[k] == "-" {
				if k+1 < len(f) {
					e.fsType = f[k+1]
				}
				if k+2 < len(f) {
					e.source = unescapeMountinfo(f[k+2])
				}
				break
			}
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// unescapeMountinfo undoes mountinfo's octal escapes of space, tab, newline
// and backslash ("\040").
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// checkMountPoint refuses a mount point whose contents the mount would hide:
// an existing mount (the same `snfs mount` run twice would stack a second
// one) or a non-empty directory, unless allowNonEmpty (--allow-non-empty, -o
// nonempty), as sshfs and rclone do. A dead FUSE mount there (its process
// killed: "transport endpoint is not connected") is detached first; the
// returned note says so, for the user.
func checkMountPoint(dir string, allowNonEmpty bool) (note string, err error) {
	for range 8 { // dead mounts can be stacked
		ms, err := mountsAt(dir)
		if err != nil {
			return note, err
		}
		if len(ms) == 0 {
			break
		}
		top := ms[len(ms)-1]
		if !strings.HasPrefix(top.fsType, "fuse") || mountProcessAlive(dir) {
			break
		}
		// A dead FUSE connection fails every request at once with
		// ENOTCONN; STATFS is never answered from the kernel's caches (a
		// stat of the root may be, for a while after the process died).
		var sfs syscall.Statfs_t
		if err := syscall.Statfs(dir, &sfs); !errors.Is(err, syscall.ENOTCONN) {
			break
		}
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			return note, fmt.Errorf("%s is a dead mount of %s (its mount process is gone: transport endpoint is not connected), "+
				"and detaching it failed: %w; run `umount -l %s` (or `fusermount3 -uz %s`) and mount again", dir, top.source, err, dir, dir)
		}
		note += fmt.Sprintf("snfs: %s: detached the dead mount of %s left there (its mount process was gone)\n", dir, top.source)
	}
	if allowNonEmpty {
		return note, nil
	}
	ms, err := mountsAt(dir)
	if err != nil {
		return note, err
	}
	if len(ms) > 0 {
		top := ms[len(ms)-1]
		return note, fmt.Errorf("%s is already a mount point (%s %s): unmount it first (snfs umount %s), "+
			"or pass --allow-non-empty (-o nonempty) to mount over it", dir, top.fsType, top.source, dir)
	}
	d, err := os.Open(dir)
	if err != nil {
		return note, err
	}
	defer d.Close()
	names, err := d.Readdirnames(1)
	if err != nil && !errors.Is(err, io.EOF) {
		return note, fmt.Errorf("%s: %w", dir, err)
	}
	if len(names) > 0 {
		return note, fmt.Errorf("%s is not empty: the mount would hide what is in it; "+
			"pass --allow-non-empty (-o nonempty) to mount over it anyway", dir)
	}
	return note, nil
}

// mountProcessAlive says whether the pid file of dir (runDir) names a
// running process: the mount is live, and is not probed (a probe of a live
// mount whose server is gone would wait for the server).
func mountProcessAlive(dir string) bool {
	b, err := os.ReadFile(pidFile(dir))
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return err == nil && pid > 0 && processAlive(pid)
}

// processAlive says whether process pid runs: a zombie does not (it is as
// dead as its FUSE connection, though kill(pid, 0) still finds it until its
// parent reaps it).
func processAlive(pid int) bool {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// "PID (COMM) STATE ..."
	i := strings.LastIndexByte(string(st), ')')
	return i < 0 || i+2 >= len(st) || (st[i+2] != 'Z' && st[i+2] != 'X')
}

// checkUserMount says plainly why a mount as a user other than root cannot
// work, before fusermount3 fails with less to say (and says it to a
// detached mount process's /dev/null).
func checkUserMount(dir string) error {
	if _, err := fusefs.FusermountPath(); err != nil {
		return errors.New("snfs mount needs root, or fusermount3 to mount as another user (Debian: apt-get install fuse3)")
	}
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("snfs mount needs root, or read and write access to /dev/fuse to mount as another user "+
			"(open /dev/fuse: %w; distributions make it mode 0666: chmod 0666 /dev/fuse)", err)
	}
	unix.Close(fd)
	if err := unix.Access(dir, unix.W_OK); err != nil {
		return fmt.Errorf("%s: a user other than root mounts only on a directory it may write to (%w)", dir, err)
	}
	return nil
}
