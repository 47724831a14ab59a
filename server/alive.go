package server

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// The server's last moment alive (docs/protocol.md section 7.3, "Changes
// made while the server was down"). A process on the server machine may
// change an exported file while no server runs: no notifier sees it, and a
// client that reclaims its cache of the file after the restart would serve
// the old data for good. The server marks the time it is alive in its state
// directory (the file alive's modification time, touched every aliveEvery);
// a restarted server reads the mark before touching it again, and a file
// reclaimed with a change time after the mark (less aliveSlack) is taken as
// changed by a local process: its clients' caches are called back as for a
// change the notifier reports.

const (
	aliveEvery = time.Second
	aliveSlack = 2 * time.Second
)

// aliveMark keeps the alive file touched; prev is the mark the previous
// server left (zero: none, as from a state directory made before the mark
// existed: every reclaimed file counts as changed).
type aliveMark struct {
	path string
	prev time.Time
	log  *slog.Logger
	stop chan struct{} // closed by end
	done chan struct{} // closed when the toucher has stopped
}

// startAlive reads the previous mark in stateDir and starts touching it
// (none without a state directory: nothing is reclaimed then).
func startAlive(stateDir string, log *slog.Logger) *aliveMark {
	if stateDir == "" {
		return nil
	}
	a := &aliveMark{path: filepath.Join(stateDir, "alive"), log: log, stop: make(chan struct{}), done: make(chan struct{})}
	if st, err := os.Stat(a.path); err == nil {
		a.prev = st.ModTime()
	} else if !errors.Is(err, fs.ErrNotExist) {
		log.Warn("reading the alive mark (every reclaimed file counts as changed while the server was down)", "err", err)
	}
	a.touch()
	go func() {
		defer close(a.done)
		t := time.NewTicker(aliveEvery)
		defer t.Stop()
		for {
			select {
			case <-a.stop:
				return
			case <-t.C:
				a.touch()
			}
		}
	}()
	return a
}

// touch sets the mark to now (the kernel's clock, as the files' ctimes).
func (a *aliveMark) touch() {
	f, err := os.OpenFile(a.path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err == nil {
		err = unix.UtimesNanoAt(int(f.Fd()), "", []unix.Timespec{{Nsec: unix.UTIME_NOW}, {Nsec: unix.UTIME_NOW}}, unix.AT_EMPTY_PATH)
		f.Close()
	}
	if err != nil {
		a.log.Warn("touching the alive mark", "err", err)
	}
}

// end stops the toucher, the mark set to now (a clean stop).
func (a *aliveMark) end() {
	if a == nil {
		return
	}
	close(a.stop)
	<-a.done
	a.touch()
}

// changedWhileDown reports whether a file whose change time is ctime may
// have been changed after the previous server's last mark.
func (a *aliveMark) changedWhileDown(ctime unix.Timespec) bool {
	if a == nil {
		return false
	}
	if a.prev.IsZero() {
		return true
	}
	return time.Unix(ctime.Unix()).After(a.prev.Add(-aliveSlack))
}
