package cachedir

import (
	"fmt"
	"os"
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

// Pin returns a new read-only descriptor of the data file, for the kernel to
// read directly, if the cache holds every byte of the file (clean or dirty);
// ok is false (and nothing is pinned) otherwise. The data file's length is
// made the cached size first, so that the kernel reads exactly the file's
// bytes. Each successful Pin needs one Unpin; the caller closes the
// descriptor.
func (f *File) Pin() (fd *os.File, ok bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(); err != nil {
		return nil, false, err
	}
	if f.e.size > 0 && len(f.e.valid.missing(Range{0, f.e.size})) > 0 {
		return nil, false, nil
	}
	if err := f.openLocked(); err != nil {
		return nil, false, err
	}
	st, err := f.fd.Stat()
	if err != nil {
		return nil, false, fmt.Errorf("cachedir: stat data file: %w", err)
	}
	if st.Size() != f.e.size {
		// Longer: bytes past the size that no range claims. Shorter: the
		// rest is valid as zeros (an extension nothing wrote).
		if err := f.fd.Truncate(f.e.size); err != nil {
			return nil, false, fmt.Errorf("cachedir: size data file: %w", err)
		}
		f.dataUnsynced = true
	}
	fd, err = os.Open(f.path)
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

// OpenData opens the data file for writing, past the cache's bookkeeping:
// for the mount to lay bytes written through to the server over a pinned
// file that has no claimed range there any more (its clean data was
// invalidated), so that the kernel's direct readers see them.
func (f *File) OpenData() (*os.File, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if err := f.usable(); err != nil {
		return nil, err
	}
	fd, err := os.OpenFile(f.path, os.O_WRONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("cachedir: open data file: %w", err)
	}
	return fd, nil
}
