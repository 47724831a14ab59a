package cachedir

import (
	"bytes"
	"cmp"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// MaxHandle is the longest file handle the cache accepts (NFSv3's FHSIZE3).
const MaxHandle = 64

var (
	// ErrClosed: the Cache was closed.
	ErrClosed = errors.New("cachedir: cache closed")
	// ErrRemoved: the File was removed; get a new one from Cache.File.
	ErrRemoved = errors.New("cachedir: file removed from the cache")
	// ErrStaleFill: an invalidation (or a shrink) ran since the fill's
	// generation was taken; the data may be older than what the server now
	// has and was not installed.
	ErrStaleFill = errors.New("cachedir: stale fill refused")
	// ErrStaleWriteBack: MarkClean was given a WriteBack that is not the
	// file's latest (Dirty was called again); nothing was marked clean.
	ErrStaleWriteBack = errors.New("cachedir: write-back superseded")
	// ErrFragmented: the write would leave the file's index record with more
	// than the bounded number of ranges.
	ErrFragmented = errors.New("cachedir: file too fragmented")
)

// Cache is a cache directory: data files in dir/data, the index in
// dir/index.db. Safe for concurrent use.
type Cache struct {
	dataDir string
	limit   int64 // evict clean files while usage exceeds it; <= 0: no limit
	db      *bolt.DB
	commits *groupCommit
	usage   atomic.Int64 // bytes in the valid ranges of all files
	closed  atomic.Bool

	// mu guards files. Lock order: a File's mu, then mu; never the reverse
	// (paths that need both copy what they need from files and let mu go).
	mu    sync.Mutex
	files map[string]*File // every File handed out or found in the index, by handle

	evicting sync.Mutex // one eviction pass or persistAll at a time; taken before any File's mu (by eviction with TryLock)
	// onEvict is told the handle of each file an eviction pass dropped the
	// data of (OnEvict).
	onEvict atomic.Pointer[func(fh []byte)]
}

// OnEvict sets fn to be called with the handle of each file whose data an
// eviction pass dropped, after the pass, on the goroutine of the operation
// that ran it (which may hold locks of its caller): fn must neither block
// nor call into the cache.
func (c *Cache) OnEvict(fn func(fh []byte)) { c.onEvict.Store(&fn) }

// ErrLocked is Open's error when another process has the cache directory
// open.
var ErrLocked = errors.New("locked: another mount uses this cache directory")

// Open opens (creating it if needed) the cache directory dir, whose clean
// files are evicted while their total exceeds sizeLimit bytes (<= 0: never).
// It takes bbolt's lock on the index, so one process uses dir at a time.
// Records committed with their data inline get their data files rewritten
// from the index; other records that do not decode, or whose data file is
// gone, are dropped; data files that no record names (written but never
// synced before a crash) are deleted.
func Open(dir string, sizeLimit int64) (*Cache, error) {
	dataDir := filepath.Join(dir, "data")
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("cachedir: %w", err)
	}
	path := filepath.Join(dir, "index.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("cachedir: %s: %w (%w)", path, ErrLocked, err)
	}
	if err != nil {
		return nil, fmt.Errorf("cachedir: open index %s: %w", path, err)
	}
	c := &Cache{dataDir: dataDir, limit: sizeLimit, db: db, commits: newGroupCommit(db), files: map[string]*File{}}
	if err := c.load(); err != nil {
		db.Close()
		return nil, err
	}
	return c, nil
}

// DataDir is the directory of the data files (each File's under it).
func (c *Cache) DataDir() string { return c.dataDir }

// load reads the index into memory and reconciles it with the data files.
func (c *Cache) load() error {
	var drop []string
	err := c.db.Update(func(tx *bolt.Tx) error {
		bk, err := tx.CreateBucketIfNotExists(bucketFiles)
		if err != nil {
			return err
		}
		inline, err := tx.CreateBucketIfNotExists(bucketInline)
		if err != nil {
			return err
		}
		return bk.ForEach(func(k, v []byte) error {
			e, err := decodeEntry(v)
			if err != nil || len(k) == 0 || len(k) > MaxHandle {
				drop = append(drop, string(k))
				return nil
			}
			f := c.newFile(string(k))
			// A cursor, not Get: an empty copy (a file truncated to 0) is
			// a copy too.
			if ik, data := inline.Cursor().Seek(k); bytes.Equal(ik, k) {
				if int64(len(data)) < e.size {
					drop = append(drop, string(k))
					return nil
				}
				if err := f.restoreInline(&e, data); err != nil {
					return err
				}
			} else {
				st, err := os.Stat(f.path)
				if err != nil && len(e.valid) > 0 {
					// Records are committed only after their data file is
					// durable, so this is damage from outside; the record's
					// data is gone.
					drop = append(drop, string(k))
					return nil
				}
				if err == nil && st.Size() > e.size {
					// Writes past the recorded size that a crash kept:
					// unclaimed, and an extension must find zeros there.
					if err := os.Truncate(f.path, e.size); err != nil {
						return err
					}
				}
			}
			f.e, f.d = e, &entry{}
			*f.d = e.clone()
			f.lastUse.Store(e.lastUse)
			c.files[string(k)] = f
			c.usage.Add(e.valid.total())
			return nil
		})
	})
	if err == nil && len(drop) > 0 {
		err = c.db.Update(func(tx *bolt.Tx) error {
			for _, k := range drop {
				if err := applyOp(tx, []byte(k), op{}); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err != nil {
		return fmt.Errorf("cachedir: load index: %w", err)
	}
	names, err := os.ReadDir(c.dataDir)
	if err != nil {
		return fmt.Errorf("cachedir: %w", err)
	}
	for _, n := range names {
		h, err := hex.DecodeString(n.Name())
		if _, ok := c.files[string(h)]; err == nil && ok {
			continue
		}
		if err := os.Remove(filepath.Join(c.dataDir, n.Name())); err != nil {
			return fmt.Errorf("cachedir: remove orphan data file: %w", err)
		}
	}
	return nil
}

// restoreInline writes the bytes e claims from a record's inline copy into
// the data file, which a crash may have left older, newer or absent, and cuts
// it to e's size. The data file is not synced: the record keeps its inline
// copy until a Sync or Flush makes the data file durable.
func (f *File) restoreInline(e *entry, data []byte) error {
	_, statErr := os.Stat(f.path)
	fd, err := os.OpenFile(f.path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open data file: %w", err)
	}
	for _, r := range e.valid {
		if _, err := fd.WriteAt(data[r.Off:r.End()], r.Off); err != nil {
			fd.Close()
			return fmt.Errorf("restore data file: %w", err)
		}
	}
	if st, err := fd.Stat(); err != nil || st.Size() > e.size {
		if err := fd.Truncate(e.size); err != nil {
			fd.Close()
			return fmt.Errorf("restore data file: %w", err)
		}
	}
	f.fd, f.inline, f.newDataFile = fd, true, statErr != nil
	return nil
}

func (c *Cache) newFile(key string) *File {
	return &File{c: c, key: key, path: filepath.Join(c.dataDir, hex.EncodeToString([]byte(key)))}
}

// File returns the File for handle, the same one for equal handles until it
// is removed. A handle the cache has no record of starts empty, at version 0
// and size 0: set both with SetVersion before caching data of a file that
// exists on the server.
func (c *Cache) File(handle []byte) (*File, error) {
	if len(handle) == 0 || len(handle) > MaxHandle {
		return nil, fmt.Errorf("cachedir: handle of %d bytes", len(handle))
	}
	if c.closed.Load() {
		return nil, ErrClosed
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.files[string(handle)]
	if f == nil {
		f = c.newFile(string(handle))
		f.lastUse.Store(time.Now().UnixNano())
		c.files[string(handle)] = f
	}
	return f, nil
}

// DirtyFiles returns the handles of the files with data or a size change not
// yet written back: after Open, what a crashed mount left to write back.
func (c *Cache) DirtyFiles() [][]byte {
	var out [][]byte
	for _, f := range c.snapshot() {
		f.mu.RLock()
		if !f.removed && f.e.needsWriteBack() {
			out = append(out, []byte(f.key))
		}
		f.mu.RUnlock()
	}
	return out
}

// Usage is the number of bytes the cache holds (valid ranges of all files).
func (c *Cache) Usage() int64 { return c.usage.Load() }

func (c *Cache) snapshot() []*File {
	c.mu.Lock()
	defer c.mu.Unlock()
	fs := make([]*File, 0, len(c.files))
	for _, f := range c.files {
		fs = append(fs, f)
	}
	return fs
}

// Flush makes every file's data and index record durable (what Sync does for
// one file), including the clean data filled since the last Sync and the
// last-use times, so that a restart finds them.
func (c *Cache) Flush() error { return c.persistAll(false) }

// Close flushes the cache (see Flush), closes the data files and the index.
// Files obtained from it return ErrClosed afterwards.
func (c *Cache) Close() error {
	if c.closed.Swap(true) {
		return ErrClosed
	}
	errs := []error{c.persistAll(true), c.db.Close()}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cachedir: close: %w", err)
	}
	return nil
}

// SyncFiles is Sync for each of files, with one directory fsync and one
// index commit for them all (a round of write-backs records its clean
// states in one commit rather than one each).
func (c *Cache) SyncFiles(files []*File) error {
	seen := make(map[*File]bool, len(files))
	var fs []*File
	for _, f := range files {
		if f.c == c && !seen[f] {
			seen[f] = true
			fs = append(fs, f)
		}
	}
	return c.persistFiles(fs, persistOpts{refuseClosed: true})
}

// persistAll is persistLocked for every file, with one directory fsync and
// one index commit for them all; with closing, it also closes the data
// files. It holds every File's lock until the commit is done, as the
// eviction pass holds its victims', and is serialized with it by evicting.
func (c *Cache) persistAll(closing bool) error {
	return c.persistFiles(c.snapshot(), persistOpts{closing: closing, withUse: true})
}

type persistOpts struct {
	closing      bool // close the data files too
	withUse      bool // as in persistLocked
	refuseClosed bool // ErrClosed once Close ran (it persisted everything)
}

// persistFiles is persistAll for files.
func (c *Cache) persistFiles(files []*File, o persistOpts) error {
	c.evicting.Lock()
	defer c.evicting.Unlock()
	if o.refuseClosed && c.closed.Load() {
		return ErrClosed
	}
	type planned struct {
		f *File
		p persistPlan
	}
	var (
		errs    []error
		locked  []planned
		ops     = map[string]op{}
		dirSync bool
	)
	for _, f := range files {
		f.mu.Lock()
		var p persistPlan
		if !f.removed {
			var err error
			if p, err = f.planPersistLocked(o.withUse); err != nil {
				errs = append(errs, err)
				p = persistPlan{}
			}
		}
		locked = append(locked, planned{f, p})
		dirSync = dirSync || p.dirSync
		if p.op != nil {
			ops[f.key] = *p.op
		}
	}
	var err error
	if dirSync {
		err = syncDir(c.dataDir)
	}
	if err == nil && len(ops) > 0 {
		if err = c.commits.commit(ops); err != nil {
			err = fmt.Errorf("cachedir: commit index records: %w", err)
		}
	}
	errs = append(errs, err)
	for _, l := range locked {
		if err == nil {
			l.f.donePersistLocked(l.p)
		}
		if o.closing && l.f.fd != nil {
			errs = append(errs, l.f.fd.Close())
			l.f.fd = nil
		}
		l.f.mu.Unlock()
	}
	return errors.Join(errs...)
}

// maybeEvict evicts least recently used clean files while the usage exceeds
// the limit. Called with no File's lock held, after an operation that added
// data; if another pass is running, that one does the work.
func (c *Cache) maybeEvict() {
	if c.limit <= 0 || c.usage.Load() <= c.limit || !c.evicting.TryLock() {
		return
	}
	defer c.evicting.Unlock()
	fs := c.snapshot()
	slices.SortFunc(fs, func(a, b *File) int { return cmp.Compare(a.lastUse.Load(), b.lastUse.Load()) })
	// Lock victims until enough would be freed, then delete all their records
	// in one commit. Only this pass holds more than one File lock at a time.
	excess := c.usage.Load() - c.limit
	var victims []*File
	ops := map[string]op{}
	for _, f := range fs {
		if excess <= 0 {
			break
		}
		f.mu.Lock()
		if f.removed || f.pins > 0 || f.e.needsWriteBack() || len(f.e.valid) == 0 || c.closed.Load() {
			f.mu.Unlock()
			continue
		}
		victims = append(victims, f)
		excess -= f.e.valid.total()
		if f.d != nil {
			ops[f.key] = op{}
		}
	}
	var err error
	if len(ops) > 0 {
		// On failure nothing is evicted and the next pass tries again; the
		// cache only stays over its limit meanwhile.
		err = c.commits.commit(ops)
	}
	for _, f := range victims {
		if err == nil {
			f.dropDataLocked()
		}
		f.mu.Unlock()
	}
	if fn := c.onEvict.Load(); fn != nil && err == nil {
		for _, f := range victims {
			(*fn)([]byte(f.key))
		}
	}
}
