package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"snfs/internal/rotlog"
)

// mountLogEnv names, for a detached mount process, the file it logs to when
// it was given no log-file (its standard error is /dev/null).
const mountLogEnv = "SNFS_MOUNT_LOG"

// mountLogName is the default log of a detached mount, in its cache directory.
const mountLogName = "snfs-mount.log"

// mountLogLimit bounds the default log: past it the file becomes NAME.1 (the
// previous NAME.1 is dropped), so at most twice this is on disk.
const mountLogLimit = 10 << 20

// journalStderr reports whether standard error is the systemd journal: under a
// systemd unit, JOURNAL_STREAM holds the device and inode of the stream it
// connected stderr to (systemd.exec(5)), and they are stderr's still.
func journalStderr() bool {
	dev, ino, ok := strings.Cut(os.Getenv("JOURNAL_STREAM"), ":")
	if !ok {
		return false
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(2, &st); err != nil {
		return false
	}
	return strconv.FormatUint(st.Dev, 10) == dev && strconv.FormatUint(st.Ino, 10) == ino
}

// detachedLog decides where a mount that detaches logs when no log-file is
// given: the journal when standard error is the journal (journal true: the
// mount process keeps this stderr), else the returned file in the mount's
// cache directory (created here, so that a failure is said before detaching).
// With a log-file, neither.
func detachedLog(f mountFlags, host, export string) (journal bool, path string, err error) {
	if f.logFile != "" {
		return false, "", nil
	}
	if journalStderr() {
		return true, "", nil
	}
	dir := f.cacheDir
	if dir == "" {
		dir = defaultCacheDir(host, export)
	}
	path = filepath.Join(dir, mountLogName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, path, err
	}
	w, err := rotlog.Open(path, mountLogLimit)
	if err != nil {
		return false, path, err
	}
	return false, path, w.Close()
}

// dropEmptyLog removes the log file detachedLog made for a mount that failed
// without writing to it, and its directory if that is empty now: a mistyped
// command leaves nothing behind.
func dropEmptyLog(path string) {
	if path == "" {
		return
	}
	if fi, err := os.Stat(path); err == nil && fi.Size() == 0 {
		os.Remove(path)
		os.Remove(filepath.Dir(path)) // fails, harmlessly, unless empty
	}
}

// mountLog is where runMount logs: log-file, the file a detaching parent
// chose (mountLogEnv), or standard error.
func mountLog(f mountFlags) (io.Writer, func(), error) {
	if f.logFile != "" {
		w, err := os.OpenFile(f.logFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return nil, nil, fmt.Errorf("--log-file: %w", err)
		}
		return w, func() { w.Close() }, nil
	}
	if p := os.Getenv(mountLogEnv); p != "" {
		os.Unsetenv(mountLogEnv)
		w, err := rotlog.Open(p, mountLogLimit)
		if err != nil {
			return nil, nil, fmt.Errorf("the mount's log: %w", err)
		}
		return w, func() { w.Close() }, nil
	}
	return os.Stderr, func() {}, nil
}
