package cachedir

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// File is one cached file, bound to its handle. Safe for concurrent use:
// reads share the lock, everything else takes it exclusively, including the
// data file's fsync and the index commit of Sync, so a Sync holds off the
// file's writers (and only this file's) until its record is durable.
//
// Durability rules, which make every committed index record true of the data
// file whatever happens to the process afterwards:
//   - a record is committed only after the data file was fdatasync'd (and, for
//     a new data file, its directory fsync'd) since the last write to it, or
//     together with the bytes [0, size) of the file in the same index commit
//     (inline: a small dirty file, where one commit is cheaper than the
//     syncs of its data file and directory; Open writes them back into the
//     data file), so every range a record claims is on disk;
//   - before the data file loses or changes bytes that the committed record
//     claims as present clean data (a write over them, a truncation, an
//     invalidation, an eviction), the record is retracted first by a commit
//     that no longer claims them (retractLocked). Dirty bytes a record claims
//     may be overwritten by newer writes: after a crash those are written back,
//     as a local file system would keep a write that raced the crash.
type File struct {
	c       *Cache
	key     string       // the handle
	path    string       // the data file
	lastUse atomic.Int64 // Unix nanoseconds; read without mu by the eviction pass

	mu           sync.RWMutex // guards all below; before Cache.mu in lock order
	e            entry        // the file as it is now
	d            *entry       // the committed index record; nil: none
	fd           *os.File     // the data file, opened on first use
	newDataFile  bool         // fd was created and its directory entry is not yet durable
	dataUnsynced bool         // fd was written since its last fdatasync or inline commit
	idxUnsynced  bool         // e may differ from d in more than lastUse
	inline       bool         // d is committed with its bytes in the index (bucketInline); fd is not fdatasync'd
	removed      bool
	wb           *wbTrack // the write-back Dirty last handed out, until MarkClean
	wbSeq        uint64
	pins         int     // opens the kernel reads the data file for directly (passthrough.go)
	ext          int     // of them, opens that may write it (passthrough.go)
	extSeen      extStat // the data file at the last look for external writes
	behind       int64   // bytes written since the last write-behind kick (writeBehindEvery)
}

// writeBehindEvery is how many bytes written to a data file start their
// disk writes (sync_file_range SYNC_FILE_RANGE_WRITE, which does not wait for
// them). A close must make dirty data durable before it returns; on a machine
// with much memory the kernel's own write-back starts late, so without this
// the close would write everything itself. With it, the close's fdatasync
// finds most pages written or in flight.
const writeBehindEvery = 4 << 20

// wbTrack records what changed while a write-back is out, so that MarkClean
// cleans only what the write-back really carried.
type wbTrack struct {
	seq        uint64
	since      rangeSet // written since Dirty
	truncSince bool     // Truncate ran since Dirty
	truncTo    int64    // the smallest size it set
}

// MissingError is returned by ReadAt when some of the bytes asked for are not
// in the cache. Fetch Ranges from the server and install them with Fill(Gen, ...),
// taking Gen before sending the READ (it is, from this error).
type MissingError struct {
	Ranges []Range
	Gen    uint64
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("cachedir: %d range(s) not cached (first at %d, %d bytes)", len(e.Ranges), e.Ranges[0].Off, e.Ranges[0].Len)
}

// Info is a snapshot of a File's bookkeeping.
type Info struct {
	Version   uint64
	Size      int64
	Gen       uint64
	LastUse   time.Time
	Valid     []Range // present in the data file (clean or dirty)
	Dirty     []Range // not yet written back
	Truncated bool    // a size change not yet written back
	TruncTo   int64   // the smallest size set by Truncate since the last write-back
}

// WriteBack is what Dirty returns: the file's pending changes. Write them to
// the server as: if Truncated, set the size to TruncTo; write the bytes of
// Ranges (read them with ReadAt); if Truncated, set the size to Size. After
// the server committed them, call MarkClean with it.
type WriteBack struct {
	Ranges    []Range
	Size      int64
	Truncated bool
	TruncTo   int64
	seq       uint64
}

func (f *File) usable() error {
	if f.c.closed.Load() {
		return ErrClosed
	}
	if f.removed {
		return ErrRemoved
	}
	return nil
}

func (f *File) touch() { f.lastUse.Store(time.Now().UnixNano()) }

// openLocked opens the data file, creating it if needed.
func (f *File) openLocked() error {
	if f.fd != nil {
		return nil
	}
	_, statErr := os.Stat(f.path)
	fd, err := os.OpenFile(f.path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("cachedir: open data file: %w", err)
	}
	f.fd = fd
	if statErr != nil {
		f.newDataFile = true
	}
	return nil
}

// setValid replaces e.valid and keeps the cache's usage in step.
func (f *File) setValid(v rangeSet) {
	f.c.usage.Add(v.total() - f.e.valid.total())
	f.e.valid = v
}

// ReadAt reads len(p) bytes at off, fewer (with io.EOF) at the end of the
// file as the cache knows it. If any of them is not cached it reads nothing
// and returns a *MissingError.
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	f.mu.RLock()
	if f.fd == nil && len(f.e.valid) > 0 {
		// Opening the data file changes f.fd: under the exclusive lock.
		f.mu.RUnlock()
		f.mu.Lock()
		err := f.usable()
		if err == nil {
			err = f.openLocked()
		}
		f.mu.Unlock()
		if err != nil {
			return 0, err
		}
		f.mu.RLock()
	}
	defer f.mu.RUnlock()
	if err := f.usable(); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, fmt.Errorf("cachedir: negative offset %d", off)
	}
	if off >= f.e.size {
		return 0, io.EOF
	}
	want := Range{off, min(int64(len(p)), f.e.size-off)}
	if miss := f.e.valid.missing(want); len(miss) > 0 {
		return 0, &MissingError{Ranges: miss, Gen: f.e.gen}
	}
	f.touch()
	n, err := f.fd.ReadAt(p[:want.Len], off)
	if err == io.EOF {
		// Beyond the data file's end, in a range made valid by an extension
		// that nothing wrote: zeros, as in a hole.
		clear(p[n:want.Len])
		n, err = int(want.Len), nil
	}
	if err != nil {
		return n, fmt.Errorf("cachedir: read data file: %w", err)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// WriteAt writes p at off into the cache as dirty data. It is not durable
// until Sync returns.
//
// The bytes between the cached size and off become known zeros, so the size
// must be right (SetVersion) before writing a file that exists on the server.
func (f *File) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.writeAt(p, off)
	f.c.maybeEvict()
	return n, err
}

func (f *File) writeAt(p []byte, off int64) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(); err != nil {
		return 0, err
	}
	if off < 0 || int64(len(p)) > maxOffset-off {
		return 0, fmt.Errorf("cachedir: write at %d of %d bytes out of range", off, len(p))
	}
	if len(p) == 0 {
		return 0, nil
	}
	r := Range{off, int64(len(p))}
	gap := Range{f.e.size, off - f.e.size}
	if len(f.e.valid.add(gap).add(r)) > maxRanges {
		return 0, ErrFragmented
	}
	if f.d != nil {
		if err := f.retractLocked(f.d.valid.within(r).subtract(f.d.dirty)); err != nil {
			return 0, err
		}
	}
	if err := f.openLocked(); err != nil {
		return 0, err
	}
	f.touch()
	n, err := f.fd.WriteAt(p, off)
	if n > 0 {
		w := Range{off, int64(n)}
		f.setValid(f.e.valid.add(gap).add(w))
		f.e.dirty = f.e.dirty.add(w)
		f.e.size = max(f.e.size, w.End())
		f.dataUnsynced, f.idxUnsynced = true, true
		if f.wb != nil {
			f.wb.since = f.wb.since.add(w)
		}
		if f.behind += int64(n); f.behind >= writeBehindEvery {
			f.behind = 0
			// Only a hint: an error here shows again at the fdatasync.
			_ = unix.SyncFileRange(int(f.fd.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
		}
	}
	if err != nil {
		return n, fmt.Errorf("cachedir: write data file: %w", err)
	}
	return n, nil
}

// Sync makes the file's data and its index record durable: when it returns
// nil, a crash of this process (or of the machine, as far as fsync holds)
// loses none of the writes that returned before Sync was called. Call it
// before close() and fsync() return to the application.
func (f *File) Sync() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(); err != nil {
		return err
	}
	return f.persistLocked(false)
}

// inlineMax is the largest dirty file whose Sync puts its data into the
// index commit (see File) instead of syncing its data file (and, for a new
// one, the directory) before the commit. Past it, writing the bytes into the
// index cost about what the syncs it saves do (BenchmarkSyncNewFile at
// several sizes); the copy stays in the index until a later Sync, Flush or
// Close makes the data file durable.
const inlineMax = 32 << 10

// persistLocked makes the file's data durable and commits e when it differs
// from the committed record; with withUse, also when only the last-use time
// does.
func (f *File) persistLocked(withUse bool) error {
	p, err := f.planPersistLocked(withUse)
	if err != nil {
		return err
	}
	if p.dirSync {
		if err := syncDir(f.c.dataDir); err != nil {
			return err
		}
	}
	if p.op != nil {
		if err := f.c.commits.commit(map[string]op{f.key: *p.op}); err != nil {
			return fmt.Errorf("cachedir: commit index record: %w", err)
		}
	}
	f.donePersistLocked(p)
	return nil
}

// persistPlan is what persistLocked has left to do once the data file is
// synced: the directory's fsync and the index commit, which Flush and Close
// share between all files (persistAll).
type persistPlan struct {
	dirSync bool // the data file is new: fsync the data directory
	op      *op  // commit it (f.key's op); nil: nothing to commit
	inline  bool // op commits the record with its inline copy
}

// planPersistLocked fdatasyncs the data file if the record is to claim it
// and returns the rest of persistLocked's work.
func (f *File) planPersistLocked(withUse bool) (persistPlan, error) {
	f.e.lastUse = f.lastUse.Load()
	if f.idxUnsynced && f.d != nil && f.e.sameRecord(f.d) {
		f.idxUnsynced = false // written over dirty bytes: nothing new to record
	}
	blank := f.d == nil && f.e.version == 0 && f.e.size == 0 && f.e.gen == 0 && !f.e.truncated
	if blank {
		f.idxUnsynced = false // nothing worth a record: a File never used
	}
	needRec := f.idxUnsynced || (withUse && f.d != nil && f.d.lastUse != f.e.lastUse)
	small := !blank && f.e.needsWriteBack() && f.e.size <= inlineMax
	switch {
	case small && f.dataUnsynced && (needRec || f.inline || f.newDataFile):
		// Inline when making the data file durable would cost more than the
		// commit alone: a new data file (its directory entry to sync too), a
		// record to commit anyway, or an inline copy that would have to be
		// replaced. A rewrite of a durable file whose record stays the same
		// costs one fdatasync instead.
		data, err := f.readAllLocked()
		if err != nil {
			return persistPlan{}, err
		}
		return persistPlan{op: &op{rec: f.recordBytesLocked(), inline: data}, inline: true}, nil
	case small && f.inline && !f.dataUnsynced:
		// Nothing written since the inline commit, so its copy still holds
		// every byte e claims (without a write, claims only shrink).
		if !needRec {
			return persistPlan{}, nil
		}
		return persistPlan{op: &op{rec: f.recordBytesLocked(), keepInline: true}, inline: true}, nil
	}
	if f.dataUnsynced || f.inline {
		if err := unix.Fdatasync(int(f.fd.Fd())); err != nil {
			return persistPlan{}, fmt.Errorf("cachedir: sync data file: %w", err)
		}
		f.dataUnsynced = false
	}
	p := persistPlan{dirSync: f.newDataFile}
	if !blank && (needRec || f.inline) {
		// The data file now holds what the record claims: the inline copy goes.
		p.op = &op{rec: f.recordBytesLocked()}
	}
	return p, nil
}

// donePersistLocked records that p's directory fsync and commit are done.
func (f *File) donePersistLocked(p persistPlan) {
	if p.dirSync {
		f.newDataFile = false
	}
	if p.op == nil {
		return
	}
	d := f.recordLocked()
	f.d, f.idxUnsynced, f.inline = &d, false, p.inline
	if p.inline {
		// The index holds what the data file was written with: a crash
		// restores it from there (the data file itself stays unsynced).
		f.dataUnsynced = false
	}
}

// recordLocked is the index record of f as it may be committed: while the
// kernel writes the data file through passthrough (ext > 0) it may be
// changing the clean bytes, so the record claims only the dirty ones.
func (f *File) recordLocked() entry {
	d := f.e.clone()
	if f.ext > 0 {
		d.valid = rangeSet(d.dirty.clone())
	}
	return d
}

func (f *File) recordBytesLocked() []byte {
	d := f.recordLocked()
	return d.encode()
}

// readAllLocked returns the file's bytes [0, size) for an inline commit,
// read back from the data file: holes and bytes past its end read as zeros,
// and only what e claims valid is ever used.
func (f *File) readAllLocked() ([]byte, error) {
	data := make([]byte, f.e.size)
	if f.fd == nil {
		return data, nil
	}
	n, err := f.fd.ReadAt(data, 0)
	if err != nil && err != io.EOF {
		return nil, fmt.Errorf("cachedir: read data file for the index: %w", err)
	}
	clear(data[n:])
	return data, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("cachedir: sync directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("cachedir: sync directory: %w", err)
	}
	return nil
}

// retractLocked commits a record that no longer claims the bytes of drop, if
// the committed one claims any of them, before the caller changes them.
func (f *File) retractLocked(drop rangeSet) error {
	if f.d == nil || len(f.d.valid.intersect(drop)) == 0 {
		return nil
	}
	d := f.d.clone()
	d.valid, d.dirty = d.valid.subtract(drop), d.dirty.subtract(drop)
	if d.truncated && !f.e.truncated {
		// The size change was written back (MarkClean) since the record
		// was committed. Kept, with the bytes dropped here, it would be
		// recovered as a file of zeros to write back.
		d.truncated, d.truncTo = false, 0
	}
	// An inline copy stays: it holds every byte the smaller record claims.
	if err := f.c.commits.commit(map[string]op{f.key: {rec: d.encode(), keepInline: f.inline}}); err != nil {
		return fmt.Errorf("cachedir: retract index record: %w", err)
	}
	f.d = &d
	return nil
}
