package cachedir

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Fill installs clean data fetched from the server at off. gen is the
// generation taken before the READ was sent (MissingError.Gen or Gen); if an
// invalidation or a shrink ran since, the data is refused with ErrStaleFill. Only bytes
// the cache does not hold are installed (what is there is as new or newer,
// dirty data above all), and nothing at or past the cached size.
func (f *File) Fill(gen uint64, off int64, data []byte) error {
	err := f.fill(gen, off, data)
	f.c.maybeEvict()
	return err
}

func (f *File) fill(gen uint64, off int64, data []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(); err != nil {
		return err
	}
	if gen != f.e.gen {
		return ErrStaleFill
	}
	if off < 0 || off >= f.e.size || len(data) == 0 {
		return nil
	}
	r := Range{off, min(int64(len(data)), f.e.size-off)}
	parts := f.e.valid.missing(r)
	if len(parts) == 0 {
		return nil
	}
	if len(f.e.valid.union(parts)) > maxRanges {
		return ErrFragmented
	}
	if err := f.openLocked(); err != nil {
		return err
	}
	f.touch()
	for _, p := range parts {
		n, err := f.fd.WriteAt(data[p.Off-off:p.End()-off], p.Off)
		if n > 0 {
			f.setValid(f.e.valid.add(Range{p.Off, int64(n)}))
			f.dataUnsynced, f.idxUnsynced = true, true
		}
		if err != nil {
			return fmt.Errorf("cachedir: fill data file: %w", err)
		}
	}
	return nil
}

// Truncate sets the file's size locally: dirty data past it is dropped (never
// written back), bytes up to it past the old size become known zeros. The
// size change itself is pending write-back (WriteBack.Truncated).
func (f *File) Truncate(size int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(); err != nil {
		return err
	}
	if size < 0 || size > maxOffset {
		return fmt.Errorf("cachedir: truncate to %d out of range", size)
	}
	if size == f.e.size {
		return nil
	}
	if err := f.resizeLocked(size, true); err != nil {
		return err
	}
	if !f.e.truncated || size < f.e.truncTo {
		f.e.truncTo = size
	}
	f.e.truncated = true
	if f.wb != nil {
		if !f.wb.truncSince || size < f.wb.truncTo {
			f.wb.truncTo = size
		}
		f.wb.truncSince = true
	}
	f.touch()
	return nil
}

// resizeLocked changes the size, the data file's length and the ranges. With
// zeros, the bytes a growth adds are known zeros (a local truncate); without,
// they are unknown (the server's file is longer).
func (f *File) resizeLocked(size int64, zeros bool) error {
	if err := f.retractLocked(rangeSet{{size, maxOffset - size}}); err != nil {
		return err
	}
	grow := Range{f.e.size, size - f.e.size}
	if !zeros {
		grow.Len = 0
	}
	if grow.Len > 0 && len(f.e.valid.add(grow)) > maxRanges {
		return ErrFragmented
	}
	// The data file may hold bytes no range claims (a write that failed half
	// way, a file reopened after a crash): cut them off, and make a growth
	// read as zeros whatever the file held there.
	if err := f.openLocked(); err != nil {
		return err
	}
	if f.pins > 0 && !zeros && size > f.e.size {
		// Pinned: the kernel reads the data file directly and must not see
		// zeros where the server has data; the file grows as it is filled.
	} else if err := f.fd.Truncate(size); err != nil {
		return fmt.Errorf("cachedir: truncate data file: %w", err)
	}
	if grow.Len > 0 {
		err := unix.Fallocate(int(f.fd.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, grow.Off, grow.Len)
		if err != nil {
			return fmt.Errorf("cachedir: zero extension of data file: %w", err)
		}
	}
	f.dataUnsynced = true
	if size < f.e.size {
		// A fill whose READ was sent before the shrink may carry bytes past
		// the new size; after a growth from the server's size (unknown
		// bytes, not zeros) they would be installed: refuse it.
		f.e.gen++
	}
	f.setValid(f.e.valid.clip(size).add(grow))
	f.e.dirty = f.e.dirty.clip(size)
	f.e.size = size
	f.idxUnsynced = true
	return nil
}

// Invalidate drops the file's clean data and bumps the generation, so that
// fills started before it are refused. Dirty data stays.
func (f *File) Invalidate() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(); err != nil {
		return err
	}
	return f.invalidateLocked()
}

func (f *File) invalidateLocked() error {
	f.e.gen++
	f.idxUnsynced = true
	clean := f.e.valid.subtract(f.e.dirty)
	if len(clean) == 0 {
		return nil
	}
	if f.d != nil {
		// Whatever the record claims beyond the dirty bytes may be refilled
		// with newer data: retract it.
		if err := f.retractLocked(f.d.valid.subtract(f.e.dirty)); err != nil {
			return err
		}
	}
	f.setValid(rangeSet(f.e.dirty.clone()))
	if f.fd != nil && f.pins == 0 {
		// (A pinned file keeps its bytes: the kernel reads them directly.)
		for _, r := range clean {
			// Give the space back. Best effort: the bytes left are claimed by
			// nothing and are overwritten before they are valid again.
			_ = unix.Fallocate(int(f.fd.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, r.Off, r.Len)
		}
	}
	return nil
}

// SetVersion records the server's version and size of the file, as OPEN (or
// GETATTR) returned them. A version other than the cached one drops the clean
// data (Invalidate); the size is taken only while the file has nothing to
// write back, since until then the local size is the newer one.
func (f *File) SetVersion(version uint64, size int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(); err != nil {
		return err
	}
	if size < 0 || size > maxOffset {
		return fmt.Errorf("cachedir: size %d out of range", size)
	}
	if version != f.e.version {
		if err := f.invalidateLocked(); err != nil {
			return err
		}
		f.e.version = version
		f.idxUnsynced = true
	}
	if !f.e.needsWriteBack() && size != f.e.size {
		return f.resizeLocked(size, false)
	}
	return nil
}

// Version is the server version the clean data is at.
func (f *File) Version() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.e.version
}

// Gen is the current fill generation.
func (f *File) Gen() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.e.gen
}

// Info returns a snapshot of the file's bookkeeping.
func (f *File) Info() Info {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return Info{
		Version: f.e.version, Size: f.e.size, Gen: f.e.gen,
		LastUse: time.Unix(0, f.lastUse.Load()),
		Valid:   f.e.valid.clone(), Dirty: f.e.dirty.clone(),
		Truncated: f.e.truncated, TruncTo: f.e.truncTo,
	}
}

// Dirty returns the file's pending changes for a write-back. One write-back
// per file at a time: calling Dirty again supersedes the previous one.
func (f *File) Dirty() WriteBack {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wbSeq++
	f.wb = &wbTrack{seq: f.wbSeq}
	return WriteBack{
		Ranges: f.e.dirty.clone(), Size: f.e.size,
		Truncated: f.e.truncated, TruncTo: f.e.truncTo, seq: f.wbSeq,
	}
}

// MarkClean records that wb reached the server (written and committed), which
// now has the file at version: its ranges become clean, except the bytes
// written again since Dirty returned it, and its size change is done unless
// Truncate ran since. The record is committed by the next Sync, Flush or
// Close: until then a crash leaves the record dirty, with the base from
// before the write-back, so a restarted mount must tell its own write-back
// from another client's change (the mount Syncs right after MarkClean).
func (f *File) MarkClean(wb WriteBack, version uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(); err != nil {
		return err
	}
	if f.wb == nil || f.wb.seq != wb.seq {
		return ErrStaleWriteBack
	}
	clean := rangeSet(wb.Ranges).subtract(f.wb.since)
	f.e.dirty = f.e.dirty.subtract(clean)
	if wb.Truncated {
		if f.wb.truncSince {
			f.e.truncTo = f.wb.truncTo
		} else {
			f.e.truncated, f.e.truncTo = false, 0
		}
	}
	f.e.version = version
	f.wb = nil
	f.idxUnsynced = true
	return nil
}

// Remove drops the file from the cache, dirty data included, which is then
// never written back (a deleted temp file costs the server nothing). When it
// returns, the removal is durable.
func (f *File) Remove() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(); err != nil {
		return err
	}
	if f.d != nil {
		if err := f.c.commits.commit(map[string]op{f.key: {}}); err != nil {
			return fmt.Errorf("cachedir: remove index record: %w", err)
		}
		f.d, f.inline = nil, false
	}
	f.removed = true
	var err error
	if f.fd != nil {
		err = f.fd.Close()
		f.fd = nil
	}
	if rmErr := os.Remove(f.path); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
		err = errors.Join(err, rmErr)
	}
	f.setValid(nil)
	f.e.dirty = nil
	f.c.mu.Lock()
	if f.c.files[f.key] == f {
		delete(f.c.files, f.key)
	}
	f.c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("cachedir: remove data file: %w", err)
	}
	return nil
}

// dropDataLocked is eviction's part once the record is deleted: the data
// goes, the File keeps its version and size and stays usable (reads report
// everything missing).
func (f *File) dropDataLocked() {
	f.d, f.inline = nil, false
	if f.fd != nil {
		f.fd.Close()
		f.fd = nil
	}
	os.Remove(f.path)
	f.newDataFile, f.dataUnsynced = false, false
	f.setValid(nil)
}

// Allocated applies to the cache an fallocate(2) the server made of its file
// (SNFS ALLOCATE, sent after the file was written back), so that reads and
// the size follow the server's without a refill: with punch, the range's
// bytes within the size become known zeros, clean (dirty bytes there are
// dropped: the server's hole is newer), and the data file gets a hole;
// otherwise, unless keepSize, the size grows to the range's end, the bytes
// added being known zeros, as the server's are. A reservation itself is the
// server's: the data file is not allocated (it is a cache, bounded by its
// size limit, not the file's storage).
func (f *File) Allocated(off, length int64, keepSize, punch bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(); err != nil {
		return err
	}
	if off < 0 || length <= 0 || length > maxOffset-off {
		return fmt.Errorf("cachedir: allocation at %d of %d bytes out of range", off, length)
	}
	if !punch && (keepSize || off+length <= f.e.size) {
		return nil
	}
	// With passthrough writers, the change made here to the data file is
	// not theirs: unless they wrote since the last look, the look moves past
	// it (NoteExternal would take all of the file for their dirty data).
	ownLook := false
	if f.ext > 0 && f.fd != nil {
		st, err := f.statLocked()
		ownLook = err == nil && st == f.extSeen
	}
	if err := f.allocatedLocked(off, length, punch); err != nil {
		return err
	}
	if ownLook {
		if st, err := f.statLocked(); err == nil {
			f.extSeen = st
		}
	}
	return nil
}

func (f *File) allocatedLocked(off, length int64, punch bool) error {
	if !punch {
		return f.resizeLocked(off+length, true)
	}
	r := Range{off, min(length, f.e.size-off)}
	if r.Len <= 0 {
		return nil
	}
	if len(f.e.valid.add(r)) > maxRanges {
		return ErrFragmented
	}
	// The committed record must not claim the old bytes once they are gone.
	if err := f.retractLocked(rangeSet{r}); err != nil {
		return err
	}
	if err := f.openLocked(); err != nil {
		return err
	}
	if err := unix.Fallocate(int(f.fd.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, r.Off, r.Len); err != nil {
		return fmt.Errorf("cachedir: punch data file: %w", err)
	}
	// A fill whose READ was sent before the hole would bring the old bytes.
	f.e.gen++
	f.setValid(f.e.valid.add(r))
	f.e.dirty = f.e.dirty.subtract(rangeSet{r})
	if f.wb != nil {
		// A write-back in flight that carries bytes of the range must
		// not mark them clean: the hole replaced them.
		f.wb.since = f.wb.since.add(r)
	}
	f.dataUnsynced, f.idxUnsynced = true, true
	f.touch()
	return nil
}
