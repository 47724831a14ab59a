package cachedir

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
