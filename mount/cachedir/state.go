package cachedir

import (
	"fmt"
	"io"
	"slices"
)

// Size is the file's size as the cache knows it (the local size while a
// write-back is pending).
func (f *File) Size() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.e.size
}

// NeedsWriteBack reports whether the file has data or a size change not yet
// written back.
func (f *File) NeedsWriteBack() bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return !f.removed && f.e.needsWriteBack()
}

// Holds reports whether the cache holds anything of the file: data (clean or
// dirty) or a size change to write back.
func (f *File) Holds() bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return !f.removed && (len(f.e.valid) > 0 || f.e.needsWriteBack())
}

// Relabel records that the clean data, cached at its current version, is
// still valid at version (the consistency protocol's OPEN answered the
// cached version as its old_cache_version or cache_version). Unlike
// SetVersion it keeps the data.
func (f *File) Relabel(version uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(); err != nil {
		return err
	}
	if f.e.version != version {
		f.e.version = version
		f.idxUnsynced = true
	}
	return nil
}

// SetBase records the server's change attributes of the file as seen in
// sync with the cache (an OPEN with nothing to write back, a finished
// write-back). It is committed with the record (Sync, Flush, Close).
func (f *File) SetBase(b Base) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(); err != nil {
		return err
	}
	if !f.e.hasBase || f.e.base != b {
		f.e.hasBase, f.e.base = true, b
		f.idxUnsynced = true
	}
	return nil
}

// SetWriter records the identity the file's dirty data is being written as
// (Writer): recorded with the next index commit, as the dirty ranges are.
// More than MaxWriterGroups groups keep the first ones, as AUTH_SYS does.
func (f *File) SetWriter(w Writer) error {
	if len(w.Groups) > MaxWriterGroups {
		w.Groups = w.Groups[:MaxWriterGroups]
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(); err != nil {
		return err
	}
	if !f.e.hasWriter || !f.e.writer.equal(w) {
		f.e.hasWriter, f.e.writer = true, Writer{UID: w.UID, GID: w.GID, Groups: slices.Clone(w.Groups)}
		f.idxUnsynced = true
	}
	return nil
}

// SetRemoving records that the mount is about to remove the file's last
// link (on) or that the removal did not happen (off). On is durable when it
// returns (the REMOVE may reach the server and the mount die before the
// record is dropped: the restarted mount must know the file's absence is
// its own doing); off is committed with the next Sync, Flush or Close.
func (f *File) SetRemoving(on bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(); err != nil {
		return err
	}
	if f.e.removing != on {
		f.e.removing = on
		f.idxUnsynced = true
	}
	if !on {
		return nil
	}
	return f.persistLocked(false)
}

// Removing reports whether SetRemoving(true) is the last the record says.
func (f *File) Removing() bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.e.removing
}

// Writer returns what SetWriter recorded; ok is false if nothing was.
func (f *File) Writer() (w Writer, ok bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return Writer{UID: f.e.writer.UID, GID: f.e.writer.GID, Groups: slices.Clone(f.e.writer.Groups)}, f.e.hasWriter
}

// Base returns what SetBase recorded; ok is false if nothing was.
func (f *File) Base() (b Base, ok bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.e.base, f.e.hasBase
}

// SetOrigin records where the file was last seen: its parent directory's
// handle and its name there (where a conflict copy of it is made).
func (f *File) SetOrigin(parent []byte, name string) error {
	if len(parent) > MaxHandle || len(name) > maxName {
		return nil // not recordable; reintegration falls back to the root
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(); err != nil {
		return err
	}
	if string(f.e.parent) != string(parent) || f.e.name != name {
		f.e.parent, f.e.name = append([]byte(nil), parent...), name
		if len(parent) == 0 {
			f.e.parent = nil
		}
		f.idxUnsynced = true
	}
	return nil
}

// Origin returns what SetOrigin recorded (nil and "" if nothing).
func (f *File) Origin() (parent []byte, name string) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return append([]byte(nil), f.e.parent...), f.e.name
}

// ReadKnown reads up to len(p) bytes at off of the file as the cache knows
// it, whether all present or not: bytes the cache does not hold read as
// zeros and are counted in unknown. It returns io.EOF at the cached size.
func (f *File) ReadKnown(p []byte, off int64) (n int, unknown int64, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(); err != nil {
		return 0, 0, err
	}
	if off < 0 {
		return 0, 0, fmt.Errorf("cachedir: negative offset %d", off)
	}
	if off >= f.e.size {
		return 0, 0, io.EOF
	}
	want := Range{off, min(int64(len(p)), f.e.size-off)}
	clear(p[:want.Len])
	for _, r := range f.e.valid.within(want) {
		if err := f.openLocked(); err != nil {
			return 0, 0, err
		}
		k, err := f.fd.ReadAt(p[r.Off-off:r.End()-off], r.Off)
		if err != nil && err != io.EOF {
			return 0, 0, fmt.Errorf("cachedir: read data file: %w", err)
		}
		_ = k // short: the rest is a hole of the data file, zeros
	}
	for _, r := range f.e.valid.missing(want) {
		unknown += r.Len
	}
	return int(want.Len), unknown, nil
}
