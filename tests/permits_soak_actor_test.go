package tests

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// This file is TestPermitsSoak's workload (permits_soak_test.go): the actors,
// their operations and the model of the tree they build.

// soakSlot is where an actor reaches its file system: a mount's root (an
// os.Root of the mount point, so that an operation of a killed mount fails
// ENOTCONN instead of landing in the bare mount point below it) or the
// export's, for the process on the server machine. It is nil while the
// mount is down.
type soakSlot struct {
	mu    sync.Mutex
	root  *os.Root // guarded by mu
	epoch int      // guarded by mu; counts the kills of this mount
}

// get waits, at most d, for the slot's root; it also returns the slot's
// epoch.
func (sl *soakSlot) get(d time.Duration) (*os.Root, int, error) {
	end := time.Now().Add(d)
	for {
		sl.mu.Lock()
		r, e := sl.root, sl.epoch
		sl.mu.Unlock()
		if r != nil {
			return r, e, nil
		}
		if time.Now().After(end) {
			return nil, e, errors.New("the mount stayed down")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// peek is the slot's root now, nil while down.
func (sl *soakSlot) peek() *os.Root {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return sl.root
}

// peekEpoch is the slot's root now (nil while down) and its epoch.
func (sl *soakSlot) peekEpoch() (*os.Root, int) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return sl.root, sl.epoch
}

// same says the slot is up in epoch e still.
func (sl *soakSlot) same(e int) bool {
	r, now := sl.peekEpoch()
	return r != nil && now == e
}

// down takes the root away before a kill (the kill counts as a new epoch
// from here: an operation failing from now on is explained by it).
func (sl *soakSlot) down() *os.Root {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	r := sl.root
	sl.root = nil
	sl.epoch++
	return r
}

func (sl *soakSlot) up(r *os.Root) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	sl.root = r
	sl.epoch++
}

// soakFile is a file of the model: its last acknowledged content, its owner
// (the only actor that changes it, until it renames it into another
// actor's home directory), and every acknowledged content its names had.
type soakFile struct {
	data    []byte
	owner   int
	writer  string    // the actor whose acknowledged change made data
	ackedAt time.Time // when
	handed  time.Time // when it was last handed over to its owner
	history []string  // what happened to it, for a finding's report
}

// soakModel is the tree as the acknowledged operations made it.
type soakModel struct {
	mu    sync.Mutex
	files map[string]*soakFile // guarded by mu; by path from the export's root
	dirs  map[string]int       // guarded by mu; every directory, its owner (-1: shared)
	lost  map[string]*soakFile // guarded by mu; files given up (quarantine), not compared
}

// owned lists, sorted, the files and the removable directories of actor id
// (directories: its own, without files or directories in them).
func (m *soakModel) owned(id int) (files, emptyDirs, dirs []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	busy := map[string]bool{}
	for p, f := range m.files {
		busy[path.Dir(p)] = true
		if f.owner == id {
			files = append(files, p)
		}
	}
	for d, o := range m.dirs {
		busy[path.Dir(d)] = true
		if o == id || o == -1 {
			dirs = append(dirs, d)
		}
	}
	for d, o := range m.dirs {
		if o == id && strings.Contains(d, "/") && !busy[d] {
			emptyDirs = append(emptyDirs, d)
		}
	}
	sort.Strings(files)
	sort.Strings(emptyDirs)
	sort.Strings(dirs)
	return files, emptyDirs, dirs
}

func (m *soakModel) get(p string) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.files[p].data
}

func (m *soakModel) set(p string, data []byte, owner int, who, what string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.files[p]
	if f == nil {
		f = &soakFile{owner: owner}
		m.files[p] = f
	}
	f.data, f.writer, f.ackedAt = data, who, time.Now()
	f.history = append(f.history, fmt.Sprintf("%s %s %s: %d bytes", time.Now().Format("15:04:05.000"), who, what, len(data)))
}

func (m *soakModel) move(from, to string, owner int, who string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.files[from]
	delete(m.files, from)
	if f.owner != owner {
		f.handed = time.Now()
	}
	f.owner = owner
	f.history = append(f.history, fmt.Sprintf("%s %s renamed %s to %s", time.Now().Format("15:04:05.000"), who, from, to))
	m.files[to] = f
}

func (m *soakModel) remove(p string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.files, p)
}

// quarantine takes p out of the model: an operation on it failed for no
// reason the test knows, so what it holds is not known (reported apart).
func (m *soakModel) quarantine(p string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.files[p]
	if f == nil {
		f = &soakFile{}
	}
	m.lost[p] = f
	delete(m.files, p)
}

// handedSince says p was handed over to its owner less than d ago.
func (m *soakModel) handedSince(p string, d time.Duration) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.files[p]
	return f != nil && time.Since(f.handed) < d
}

// isLost says p was given up (quarantine).
func (m *soakModel) isLost(p string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.lost[p]
	return ok
}

func (m *soakModel) setDir(p string, owner int, exists bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if exists {
		m.dirs[p] = owner
	} else {
		delete(m.dirs, p)
	}
}

// describe is what the model knows of p, for a finding.
func (m *soakModel) describe(p string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.files[p]
	if f == nil {
		f = m.lost[p]
	}
	if f == nil {
		return "(not in the model)"
	}
	return fmt.Sprintf("last acknowledged by %s at %s; its history:\n  %s", f.writer, f.ackedAt.Format("15:04:05.000"), strings.Join(f.history, "\n  "))
}

// soakActor is one party changing the tree: a mount's user, or the process
// on the server machine. It owns its home directory's files, the
// directories it makes under its home, and the files it makes in the
// shared directory "s"; it changes nothing else, except that it renames
// its own files into another actor's home directory (handing them over).
type soakActor struct {
	sk    *soak
	id    int
	name  string
	home  string
	slot  *soakSlot
	mount bool
	rng   *rand.Rand
	ops   map[string]int // acknowledged operations by kind
}

// soakOpTimeout bounds one operation, its retries included: a mount is back
// within seconds of its kill, the server too.
const soakOpTimeout = 2 * time.Minute

// soakSeenBound bounds how long a change made under another client's permit
// may stay unseen: another mount's read recalls the permit (docs/protocol.md
// section 21.4), so it sees the change at once; a local process reads the
// server's directory, which has the change once its maker reintegrates, at
// the latest when its oldest record is 5 s old (checked every second:
// docs/mount.md "Reintegration"); a local process's change is seen within
// the server's notifier bound (about 100 ms).
const soakSeenBound = 20 * time.Second

// soakGiveUp bounds the retries of an operation that fails with no kill to
// explain it.
const soakGiveUp = 10 * time.Second

// do runs f until it succeeds; false if it did not. tried tells f that an
// earlier attempt failed because of a kill (it may have taken effect, its
// answer lost with the mount). An error no kill of the actor's mount or of
// the server explains is a finding (reported once per operation, with the
// model's history of paths); such an operation is tried again as it was
// (an unlink's ENOENT is not taken for done) for soakGiveUp, then given up:
// its paths leave the model (they are reported, not compared), and the
// actor goes on. One that hangs, or fails for soakOpTimeout, stops the run.
func (a *soakActor) do(what string, paths []string, f func(r *os.Root, tried bool) error) bool {
	deadline := time.Now().Add(soakOpTimeout)
	tried := false
	var firstBad error
	var badSince time.Time
	var exportFirst string // the export's view of paths at the first unexplained failure
	bad := 0
	defer func() {
		if bad > 0 {
			var h strings.Builder
			for _, p := range paths {
				fmt.Fprintf(&h, "\n%s: %s", p, a.sk.model.describe(p))
			}
			a.sk.finding("%s: %s: %v (no kill of its mount or of the server while it ran; %d failed attempts over %v; at the first:%s at the last:%s)%s",
				a.name, what, firstBad, bad, time.Since(badSince).Round(time.Millisecond), exportFirst, a.sk.onExport(paths), h.String())
		}
	}()
	for {
		srvBefore := a.sk.serverEpoch.Load()
		r, epoch, err := a.slot.get(time.Until(deadline))
		if err == nil {
			done := make(chan error, 1)
			go func() { done <- f(r, tried) }()
			select {
			case err = <-done:
			case <-time.After(time.Until(deadline)):
				a.sk.hang(a, what)
				return false
			}
		}
		if err == nil {
			if bad > 0 {
				a.sk.note("%s: %s succeeded after %d unexplained failures", a.name, what, bad)
			}
			return true
		}
		if len(paths) > 0 && errors.Is(err, fs.ErrNotExist) && a.sk.model.handedSince(paths[0], soakSeenBound) {
			// Handed over by a rename its maker made under a permit
			// (or by the local process): seen here once reintegrated.
			a.sk.countErr("ENOENT of a file just handed over (not yet seen)")
		} else if a.sk.appError(err, epoch, a.slot, srvBefore) {
			tried = true
		} else {
			if bad == 0 {
				firstBad, badSince = err, time.Now()
				exportFirst = a.sk.onExport(paths)
			}
			bad++
			if time.Since(badSince) > soakGiveUp {
				for _, p := range paths {
					a.sk.model.quarantine(p)
				}
				a.sk.gaveUp.Add(1)
				return false
			}
		}
		if time.Now().After(deadline) || a.sk.hung.Load() {
			a.sk.t.Errorf("%s: %s failed for %v: %v", a.name, what, soakOpTimeout, err)
			a.sk.hung.Store(true)
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// writeWhole opens p with flags, writes data, fsyncs if asked, closes.
func writeWhole(r *os.Root, p string, data []byte, flags int, sync bool) error {
	f, err := r.OpenFile(p, os.O_WRONLY|flags, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if sync {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// size is a file's size: mostly small (a CML_STORE in the batch), some
// larger than snfs1.StoreMax (pushed by WRITE after the reintegration).
func (a *soakActor) size() int {
	switch k := a.rng.IntN(20); {
	case k == 0:
		return 0
	case k < 16:
		return 1 + a.rng.IntN(16<<10)
	default:
		return 64<<10 + a.rng.IntN(128<<10)
	}
}

// step runs one operation chosen by the actor's generator; false to stop.
func (a *soakActor) step() bool {
	sk := a.sk
	files, empty, dirs := sk.model.owned(a.id)
	k := a.rng.IntN(100)
	pick := func(l []string) string { return l[a.rng.IntN(len(l))] }
	switch {
	case len(files) < 4 || k < 18 && len(files) < 40: // create
		dir := pick(dirs)
		p := path.Join(dir, fmt.Sprintf("f%d", sk.next.Add(1)))
		data := randBytes(a.rng.Uint64(), a.size())
		sync := a.rng.IntN(4) == 0
		if !a.do("create "+p, []string{p}, func(r *os.Root, tried bool) error {
			fl := os.O_CREATE | os.O_TRUNC
			if !tried {
				fl |= os.O_EXCL // a fresh name: EEXIST is a replay
			}
			return writeWhole(r, p, data, fl, sync)
		}) {
			return !sk.hung.Load()
		}
		sk.model.set(p, data, a.id, a.name, "create")
		a.ops["create"]++
	case k < 28: // append
		p := pick(files)
		old := sk.model.get(p)
		add := randBytes(a.rng.Uint64(), 1+a.rng.IntN(8<<10))
		want := append(append([]byte{}, old...), add...)
		if !a.do("append "+p, []string{p}, func(r *os.Root, tried bool) error {
			if tried { // the append may have been made: write the whole
				return writeWhole(r, p, want, os.O_TRUNC, false)
			}
			return writeWhole(r, p, add, os.O_APPEND, false)
		}) {
			return !sk.hung.Load()
		}
		sk.model.set(p, want, a.id, a.name, "append")
		a.ops["append"]++
	case k < 38: // rewrite
		p := pick(files)
		data := randBytes(a.rng.Uint64(), a.size())
		if !a.do("rewrite "+p, []string{p}, func(r *os.Root, _ bool) error {
			return writeWhole(r, p, data, os.O_TRUNC, false)
		}) {
			return !sk.hung.Load()
		}
		sk.model.set(p, data, a.id, a.name, "rewrite")
		a.ops["rewrite"]++
	case k < 48: // in-place write, fsync
		p := pick(files)
		old := sk.model.get(p)
		off := a.rng.IntN(len(old) + 1)
		data := randBytes(a.rng.Uint64(), 1+a.rng.IntN(8<<10))
		want := append([]byte{}, old...)
		if end := off + len(data); end > len(want) {
			want = append(want, make([]byte, end-len(want))...)
		}
		copy(want[off:], data)
		if !a.do(fmt.Sprintf("patch %s at %d", p, off), []string{p}, func(r *os.Root, _ bool) error {
			f, err := r.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				return err
			}
			if _, err := f.WriteAt(data, int64(off)); err != nil {
				f.Close()
				return err
			}
			if err := f.Sync(); err != nil {
				f.Close()
				return err
			}
			return f.Close()
		}) {
			return !sk.hung.Load()
		}
		sk.model.set(p, want, a.id, a.name, "patch+fsync")
		a.ops["patch"]++
	case k < 64: // rename: in its directory, to another of its own, or handed over
		p := pick(files)
		dir, owner, kind := path.Dir(p), a.id, "rename"
		switch j := a.rng.IntN(10); {
		case j < 4:
			dir = pick(dirs)
			kind = "rename-across"
		case j < 6:
			o := sk.actors[a.rng.IntN(len(sk.actors))]
			if o.id != a.id {
				dir, owner, kind = o.home, o.id, "hand-over to "+o.name
			}
		}
		to := path.Join(dir, fmt.Sprintf("f%d", sk.next.Add(1)))
		handOver := owner != a.id && a.mount
		if !a.do(kind+" "+p+" "+to, []string{p, to}, func(r *os.Root, tried bool) error {
			if handOver && !tried {
				// The data goes to the server first (the file's fsync
				// writes back a file the server made; its directory's
				// fsync makes a file made here and pushes its data), so
				// that the new owner's view does not depend on this
				// mount living: acknowledged data a killed mount alone
				// holds is not the server's until the remount.
				if err := syncPath(r, p); err != nil {
					return err
				}
				if err := syncPath(r, path.Dir(p)); err != nil {
					return err
				}
			}
			err := r.Rename(p, to)
			if tried && errors.Is(err, fs.ErrNotExist) {
				if _, e := r.Lstat(to); e == nil {
					return nil // made by the attempt that failed
				}
			}
			return err
		}) {
			return !sk.hung.Load()
		}
		sk.model.move(p, to, owner, a.name)
		a.ops[strings.Fields(kind)[0]]++
		sk.checkRename(a, p, to)
	case k < 70: // mkdir
		if len(dirs) > 8 {
			return a.fsyncDir(pick(dirs))
		}
		parent := pick(dirs)
		if parent == "s" {
			parent = a.home
		}
		p := path.Join(parent, fmt.Sprintf("d%d", sk.next.Add(1)))
		if !a.do("mkdir "+p, nil, func(r *os.Root, tried bool) error {
			err := r.Mkdir(p, 0o777)
			if tried && errors.Is(err, fs.ErrExist) {
				return nil
			}
			return err
		}) {
			return !sk.hung.Load()
		}
		sk.model.setDir(p, a.id, true)
		a.ops["mkdir"]++
	case k < 74: // rmdir
		if len(empty) == 0 {
			return a.fsyncDir(pick(dirs))
		}
		p := pick(empty)
		if !a.do("rmdir "+p, nil, func(r *os.Root, tried bool) error {
			err := r.Remove(p)
			if tried && errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}) {
			return !sk.hung.Load()
		}
		sk.model.setDir(p, a.id, false)
		a.ops["rmdir"]++
	case k < 84: // unlink
		p := pick(files)
		if !a.do("unlink "+p, []string{p}, func(r *os.Root, tried bool) error {
			err := r.Remove(p)
			if tried && errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}) {
			return !sk.hung.Load()
		}
		sk.model.remove(p)
		a.ops["unlink"]++
	case k < 90:
		return a.fsyncDir(pick(dirs))
	default: // read back through its own view
		p := pick(files)
		want := sk.model.get(p)
		var got []byte
		if !a.do("read "+p, []string{p}, func(r *os.Root, _ bool) error {
			var err error
			got, err = r.ReadFile(p)
			return err
		}) {
			return !sk.hung.Load()
		}
		a.ops["read"]++
		if !bytes.Equal(got, want) {
			sk.finding("%s reads %s wrong: %s\n%s", a.name, p, soakDiff(got, want), sk.model.describe(p))
		}
	}
	return true
}

// syncPath fsyncs the file or directory p.
func syncPath(r *os.Root, p string) error {
	f, err := r.Open(p)
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// fsyncDir fsyncs a directory (a reintegration, under a permit).
func (a *soakActor) fsyncDir(d string) bool {
	if !a.do("fsync dir "+d, nil, func(r *os.Root, _ bool) error { return syncPath(r, d) }) {
		return !a.sk.hung.Load()
	}
	a.ops["fsync-dir"]++
	return true
}

// soakDiff says how got differs from want.
func soakDiff(got, want []byte) string {
	first := 0
	for first < len(got) && first < len(want) && got[first] == want[first] {
		first++
	}
	zeros := ""
	if len(got) > 0 && bytes.Count(got, []byte{0}) == len(got) {
		zeros = " (all zeros)"
	}
	return fmt.Sprintf("%d bytes%s, want %d; first difference at byte %d", len(got), zeros, len(want), first)
}

// errnoOf names err's errno, or its text.
func errnoOf(err error) string {
	var en syscall.Errno
	if errors.As(err, &en) {
		return en.Error()
	}
	if errors.Is(err, os.ErrClosed) {
		return "closed root (a kill)"
	}
	return err.Error()
}

// soakCounts are the run's figures besides each actor's operations.
type soakCounts struct {
	mountKills, serverKills atomic.Int64
	// Renames looked up through another mount at once, by a mount's
	// actor [0] or the local process [1]: how many, how many of their new
	// names were not seen at once, of their old names still seen, the
	// longest wait for a new name (ms), reads of the content skipped
	// because the renamer's mount was killed meanwhile, contents seen
	// late (the local process's: within the server's notifier bound).
	renameChecks, renameLate, renameOldSeen, renameMaxMs, readsKilled, contentLate [2]atomic.Int64
}
