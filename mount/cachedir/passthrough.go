package cachedir

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Pinning for FUSE passthrough: the mount hands the kernel a descriptor of a
// file's data file, and the kernel then reads it without the mount, for as
// long as that open lasts. While a File is pinned (Pin, until Unpin) the
// cache therefore never changes the bytes the kernel reads behind its back:
// eviction skips it, Invalidate forgets its clean data (and bumps the
// generation) without punching holes in the data file, and a size change
// learned from the server does not extend the data file with zeros. Writes
// and truncations that go through the cache (WriteAt, Truncate, Fill) change
// the data file as always; the kernel sees them, as a second descriptor of a
// local file would.

// Pin returns a new descriptor of the data file (read-write: Linux shares one
// backing file between all passthrough opens of an inode, writers too), for
// the kernel to use directly, if the cache holds every byte of the file
// (clean or dirty) or whole is false; ok is false (and nothing is pinned)
// otherwise. The data file's length is
// made the cached size first, so that the kernel reads exactly the file's
// bytes. Each successful Pin needs one Unpin; the caller closes the
// descriptor.
func (f *File) Pin(whole bool) (fd *os.File, ok bool, err error) {
	return f.PinWith(whole, func(path string, flags int) (*os.File, error) { return os.OpenFile(path, flags, 0) })
}

// PinWith is Pin with the data file's descriptor opened by open (through
// another mount of its file system, say).
func (f *File) PinWith(whole bool, open func(path string, flags int) (*os.File, error)) (fd *os.File, ok bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(); err != nil {
		return nil, false, err
	}
	if whole && f.e.size > 0 && len(f.e.valid.missing(Range{0, f.e.size})) > 0 {
		return nil, false, nil
	}
	if err := f.openLocked(); err != nil {
		return nil, false, err
	}
	st, err := f.fd.Stat()
	if err != nil {
		return nil, false, fmt.Errorf("cachedir: stat data file: %w", err)
	}
	if whole && st.Size() != f.e.size {
		// Longer: bytes past the size that no range claims. Shorter: the
		// rest is valid as zeros (an extension nothing wrote).
		if err := f.fd.Truncate(f.e.size); err != nil {
			return nil, false, fmt.Errorf("cachedir: size data file: %w", err)
		}
		f.dataUnsynced = true
	}
	fd, err = open(f.path, os.O_RDWR)
	if err != nil {
		return nil, false, fmt.Errorf("cachedir: open data file for passthrough: %w", err)
	}
	f.pins++
	f.touch()
	return fd, true, nil
}

// Unpin ends one Pin.
func (f *File) Unpin() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pins > 0 {
		f.pins--
	}
}

// Pinned reports whether the kernel reads the data file directly.
func (f *File) Pinned() bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.pins > 0
}

// OpenData opens the data file for reading and writing, past the cache's
// bookkeeping: for the mount to lay bytes written through to the server over
// a pinned file that has no claimed range there any more (its clean data was
// invalidated), so that the kernel's direct readers see them, and to read
// what the kernel's direct writers wrote.
func (f *File) OpenData() (*os.File, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if err := f.usable(); err != nil {
		return nil, err
	}
	fd, err := os.OpenFile(f.path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("cachedir: open data file: %w", err)
	}
	return fd, nil
}

// External writes. A passthrough open that writes changes the data file
// without the cache seeing it. Between BeginExternal and the matching
// EndExternal, the index records committed for the file claim only its dirty
// bytes (a crash then never takes bytes the kernel may have changed for the
// server's), and NoteExternal, called before anything that needs the truth
// (a close, an fsync, a write-back), takes the data file as it is: if its
// size or change time moved since the last look, all of it becomes dirty.
// The change times are fine-grained once looked at (Linux 6.13+ multigrain
// timestamps on ext4, xfs, btrfs, tmpfs): a write after a look always moves
// them.

type extStat struct {
	size         int64
	mtime, ctime unix.Timespec
}

func (f *File) statLocked() (extStat, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.fd.Fd()), &st); err != nil {
		return extStat{}, fmt.Errorf("cachedir: stat data file: %w", err)
	}
	return extStat{size: st.Size, mtime: st.Mtim, ctime: st.Ctim}, nil
}

// BeginExternal starts a period in which the data file may be written
// behind the cache's back (Pin first). When it returns, the committed record
// no longer claims the file's clean bytes.
func (f *File) BeginExternal() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(); err != nil {
		return err
	}
	if err := f.openLocked(); err != nil {
		return err
	}
	if f.ext == 0 {
		st, err := f.statLocked()
		if err != nil {
			return err
		}
		f.extSeen = st
	}
	if f.d != nil {
		if err := f.retractLocked(f.d.valid.subtract(f.d.dirty)); err != nil {
			return err
		}
	}
	f.ext++
	return nil
}

// EndExternal ends one BeginExternal (after a last NoteExternal).
func (f *File) EndExternal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ext > 0 {
		f.ext--
	}
}

// NoteExternal takes in what was written to the data file behind the cache's
// back since the last look: it reports whether anything was, and then all of
// the file is dirty data (not yet durable: Sync).
func (f *File) NoteExternal() (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(); err != nil || f.ext == 0 || f.fd == nil {
		return false, err
	}
	st, err := f.statLocked()
	if err != nil {
		return false, err
	}
	if st == f.extSeen {
		return false, nil
	}
	f.extSeen = st
	all := Range{0, st.size}
	if st.size < f.e.size {
		f.e.dirty = f.e.dirty.clip(st.size)
	}
	var v rangeSet
	if all.Len > 0 {
		v = rangeSet{all}
	}
	f.setValid(v)
	f.e.dirty = rangeSet(v.clone())
	f.e.size = st.size
	f.dataUnsynced, f.idxUnsynced = true, true
	if f.wb != nil && all.Len > 0 {
		f.wb.since = f.wb.since.add(all)
	}
	f.touch()
	return true, nil
}

// DataSize is the data file's size and change time as the kernel sees them
// if external writes changed it since the last look (then they are newer
// than Size's); ok is false otherwise.
func (f *File) DataSize() (size int64, mtime time.Time, ok bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.fd == nil || f.removed {
		return 0, time.Time{}, false
	}
	st, err := f.statLocked()
	if err != nil || f.ext > 0 && st == f.extSeen {
		return 0, time.Time{}, false
	}
	return st.size, time.Unix(st.mtime.Unix()), true
}

// Missing returns what the cache lacks of the file's bytes, or nil.
func (f *File) Missing() *MissingError {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.e.size == 0 {
		return nil
	}
	if miss := f.e.valid.missing(Range{0, f.e.size}); len(miss) > 0 {
		return &MissingError{Ranges: miss, Gen: f.e.gen}
	}
	return nil
}
