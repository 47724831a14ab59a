package vfs

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"snfs/client"
	"snfs/mount/cachedir"
	"snfs/nfs3"
	"snfs/snfs1"
)

// snfs mode (docs/mount.md, docs/protocol.md section 16): every application
// open is one SNFS OPEN and every release one CLOSE, except that the last
// release of a cached file may keep its open for a while, for a reopen to
// take over (delayed close, delayclose.go).
// While the server lets the client cache a file, its data lives in the cache
// directory (reads fill it, writes go to it as dirty data, close() makes it
// durable locally and does not write back), attributes and pages are kept by
// the kernel without revalidation, and a write-back goroutine writes dirty
// files back once their oldest dirty data is WriteBackDelay old. Callbacks
// write back and drop caches (the kernel's too, through the Notifier) before
// they are answered. While the server says the file is write-shared, it is
// written through to the server (one UNSTABLE WRITE per write, COMMIT at
// close) and read from the server, with no cache.

// SNFSConfig turns on snfs mode (Config.SNFS).
type SNFSConfig struct {
	Session *client.Session // its NFS() must be Config.NFS
	Cache   *cachedir.Cache // the cache directory; the FS closes it (Close)
	// WriteBackDelay is how old a file's oldest dirty data gets before the
	// file is written back; 0: 30 s.
	WriteBackDelay time.Duration
	// CacheTTL is how long the kernel keeps the attributes of a file the
	// server lets this client cache; 0: 1 hour.
	CacheTTL time.Duration
	// CloseDelay is how long the protocol open of a file's last application
	// close is kept before its CLOSE is sent, for a reopen to take over
	// (delayclose.go); 0: no delay.
	CloseDelay time.Duration
	// Recover writes back, before New returns, the dirty files a previous
	// instance left in the cache directory (a crash, a kill -9).
	Recover bool

	handler *handler // set by OpenSNFS: the session's callbacks come here
	owned   bool     // Close disconnects the session (OpenSNFS made it)
	export  string   // for UMNT at Close, when owned
}

// Notifier drops the kernel's caches of an inode (package fusefs implements
// it with go-fuse's notifications).
type Notifier interface {
	// InvalidateData drops the kernel's cached pages and attributes of i.
	InvalidateData(i *Inode)
	// InvalidateAttr drops the kernel's cached attributes of i.
	InvalidateAttr(i *Inode)
}

// SNFSStats counts snfs-mode events.
type SNFSStats struct {
	WriteBacks      atomic.Uint64 // files written back (delay, fsync, callback, unmount)
	WriteBackBytes  atomic.Uint64 // bytes sent by them
	Cancelled       atomic.Uint64 // files whose pending write-back a delete or truncation dropped
	Callbacks       atomic.Uint64
	CallbacksStale  atomic.Uint64
	WriteBackErrors atomic.Uint64
	cacheStats                    // metrics.go: callbacks by mode, cache hits
	DelayedCloses   atomic.Uint64 // releases whose CLOSE was delayed
	DelayedReopens  atomic.Uint64 // opens that took over a delayed close: no OPEN
	TreatedAsClosed atomic.Uint64 // callbacks answered CB_TREAT_AS_CLOSED for delayed closes
}

type snfsFS struct {
	cfg    SNFSConfig
	sess   *client.Session
	cache  *cachedir.Cache
	notify atomic.Pointer[Notifier]
	stats  SNFSStats

	mu    sync.Mutex
	dirty map[*Inode]time.Time // files with dirty data in the cache dir: since when

	delayed delayedSet // files with delayed closes

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// snfsInode is an inode's snfs-mode state; guarded by the Inode's mu unless
// said otherwise.
type snfsInode struct {
	node    any            // the bridge's node (SetNode), for notifications
	cf      *cachedir.File // nil until first opened in snfs mode
	caching bool           // the latest OPEN allowed caching and no callback took it away
	version uint64         // cache_version of the latest OPEN
	kernVer uint64         // version the kernel's pages belong to; 0: none valid
	opens   [3]int         // protocol opens held, by snfs1.OpenMode
	opening int            // OPENs in flight
	mtime   time.Time      // last local write while caching
	cred    Cred           // the last writer: write-back is done as it
	wbErr   error          // a write-back error not yet reported
	openMu  sync.Mutex     // serializes this file's OPEN/CLOSE calls (not its callbacks)
	dc      delayedOpens   // protocol opens kept after the last release (delayclose.go)
}

// snfsFile is an open's snfs-mode state.
type snfsFile struct {
	mode   snfs1.OpenMode // 0: not an snfs open
	direct bool           // not cacheable when opened: the kernel must not cache pages
}

// Direct reports whether the kernel must not cache this open's pages
// (FOPEN_DIRECT_IO): the file is write-shared (snfs mode).
func (f *File) Direct() bool { return f.sn.direct }

// SetNode records the bridge's node of i (for Notifier).
func (i *Inode) SetNode(n any) {
	i.mu.Lock()
	i.sn.node = n
	i.mu.Unlock()
}

// Node is what SetNode recorded.
func (i *Inode) Node() any {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.sn.node
}

// SetNotifier sets how the kernel's caches are invalidated (once mounted).
func (fs *FS) SetNotifier(n Notifier) {
	if fs.sn != nil {
		fs.sn.notify.Store(&n)
	}
}

// SNFS reports whether the FS runs in snfs mode.
func (fs *FS) SNFS() bool { return fs.sn != nil }

// SNFSStats returns the snfs-mode counters (nil in nfs mode).
func (fs *FS) SNFSStats() *SNFSStats {
	if fs.sn == nil {
		return nil
	}
	return &fs.sn.stats
}

func (fs *FS) notifyData(i *Inode) {
	if n := fs.sn.notify.Load(); n != nil {
		(*n).InvalidateData(i)
	}
}

func (fs *FS) notifyAttr(i *Inode) {
	if n := fs.sn.notify.Load(); n != nil {
		(*n).InvalidateAttr(i)
	}
}

// LoadVerifier returns the client verifier persisted in the cache directory
// dir, making and persisting a random one the first time: a restarted mount
// with the same cache directory keeps its identity with the server.
func LoadVerifier(dir string) (snfs1.Verifier, error) {
	var v snfs1.Verifier
	p := filepath.Join(dir, "client-verifier")
	b, err := os.ReadFile(p)
	if err == nil && len(b) == len(v) {
		copy(v[:], b)
		return v, nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return v, err
	}
	if _, err := io.ReadFull(rand.Reader, v[:]); err != nil {
		return v, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return v, err
	}
	tmp := p + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return v, err
	}
	_, err = f.Write(v[:])
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err == nil {
		err = syncDir(dir)
	}
	return v, err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// startSNFS sets up snfs mode: recovery of a previous instance's dirty files,
// then the write-back goroutine (stopped by Close).
func (fs *FS) startSNFS(ctx context.Context, cfg SNFSConfig) error {
	if cfg.Session == nil || cfg.Cache == nil {
		return errors.New("vfs: snfs mode needs a session and a cache directory")
	}
	if cfg.WriteBackDelay <= 0 {
		cfg.WriteBackDelay = 30 * time.Second
	}
	if cfg.CacheTTL <= 0 {
		cfg.CacheTTL = time.Hour
	}
	fs.sn = &snfsFS{cfg: cfg, sess: cfg.Session, cache: cfg.Cache, dirty: map[*Inode]time.Time{},
		stop: make(chan struct{}), done: make(chan struct{})}
	if cfg.handler != nil {
		cfg.handler.set(fs)
	}
	if cfg.Recover {
		if err := fs.recoverDirty(ctx); err != nil {
			// What could not be written back stays dirty in the cache
			// directory: the write-back goroutine tries again.
			fs.log.Error("recovery of a previous mount's unwritten data", "err", err)
		}
	}
	go fs.writeBackLoop()
	return nil
}

// Close stops the write-back goroutine and closes the cache directory (snfs
// mode; nothing in nfs mode). Call Sync first to write everything back.
func (fs *FS) Close() error {
	if fs.sn == nil {
		return nil
	}
	var err error
	fs.sn.once.Do(func() {
		fs.closeAllDelayed()
		close(fs.sn.stop)
		<-fs.sn.done
		err = fs.sn.cache.Close()
		if fs.sn.cfg.owned {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if uerr := fs.sn.sess.Mount().Umnt(ctx, fs.sn.cfg.export); uerr != nil {
				fs.log.Warn("UMNT", "err", uerr)
			}
			cancel()
			err = errors.Join(err, fs.sn.sess.Disconnect())
		}
	})
	return err
}

// writeBackLoop writes back the files whose oldest dirty data is older than
// the delay.
func (fs *FS) writeBackLoop() {
	defer close(fs.sn.done)
	delay := fs.sn.cfg.WriteBackDelay
	tick := min(max(delay/4, 10*time.Millisecond), time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-fs.sn.stop
		cancel()
	}()
	for {
		select {
		case <-fs.sn.stop:
			return
		case <-t.C:
		}
		cutoff := time.Now().Add(-delay)
		for _, i := range fs.dirtyInodes(cutoff) {
			if ctx.Err() != nil {
				return
			}
			if err := fs.writeBackInode(ctx, i); err != nil {
				fs.log.Warn("delayed write-back", "fileid", i.FileID, "err", err)
				continue
			}
			fs.cleanClose(ctx, i)
		}
	}
}

// dirtyInodes lists the files dirty since before cutoff (zero: all).
func (fs *FS) dirtyInodes(cutoff time.Time) []*Inode {
	fs.sn.mu.Lock()
	defer fs.sn.mu.Unlock()
	var out []*Inode
	for i, since := range fs.sn.dirty {
		if cutoff.IsZero() || !since.After(cutoff) {
			out = append(out, i)
		}
	}
	return out
}

func (fs *FS) markDirty(i *Inode) {
	fs.sn.mu.Lock()
	if _, ok := fs.sn.dirty[i]; !ok {
		fs.sn.dirty[i] = time.Now()
	}
	fs.sn.mu.Unlock()
}

func (fs *FS) markClean(i *Inode) {
	fs.sn.mu.Lock()
	delete(fs.sn.dirty, i)
	fs.sn.mu.Unlock()
}

func (fs *FS) isDirty(i *Inode) bool {
	fs.sn.mu.Lock()
	defer fs.sn.mu.Unlock()
	_, ok := fs.sn.dirty[i]
	return ok
}

// cleanClose tells the server that this client holds no dirty data of i any
// more (CLOSE with dirty = FALSE and no open to close, docs/protocol.md
// section 4.4) when no application has it open, so that the next opener
// elsewhere needs no callback.
func (fs *FS) cleanClose(ctx context.Context, i *Inode) {
	i.sn.openMu.Lock()
	defer i.sn.openMu.Unlock()
	i.mu.Lock()
	idle := i.snfsHeldLocked() == 0 && i.sn.opening == 0
	cf := i.sn.cf
	i.mu.Unlock()
	if !idle || cf == nil || cf.NeedsWriteBack() {
		return
	}
	if _, err := fs.sn.sess.Close(ctx, i.FH, snfs1.Write, false); err != nil && !errors.Is(err, nfs3.ErrStale) {
		fs.log.Debug("CLOSE after write-back", "fileid", i.FileID, "err", err)
	}
}

// cacheFile returns i's cache file, getting it from the cache directory the
// first time (or after it was removed).
func (fs *FS) cacheFile(i *Inode) (*cachedir.File, error) {
	i.mu.Lock()
	cf := i.sn.cf
	i.mu.Unlock()
	if cf != nil {
		return cf, nil
	}
	cf, err := fs.sn.cache.File(i.FH)
	if err != nil {
		return nil, err
	}
	i.mu.Lock()
	if i.sn.cf == nil {
		i.sn.cf = cf
	}
	cf = i.sn.cf
	i.mu.Unlock()
	return cf, nil
}

// snfsCaching reports whether i's data is served from the cache directory.
func (i *Inode) snfsCaching() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.sn.caching && i.sn.cf != nil
}

// snfsTTL is the attribute lifetime in snfs mode while the file is open here:
// long while cached (the server calls back before it changes), none while
// write-shared. ok is false when nfs mode's adaptive timeouts apply.
func (i *Inode) snfsTTL() (time.Duration, bool) {
	if i.fs.sn == nil || i.snfsHeldLocked() == 0 {
		return 0, false
	}
	if i.sn.caching && !i.attrAt.IsZero() {
		return i.fs.sn.cfg.CacheTTL, true
	}
	return 0, true
}

// snfsAdjustLocked lays the cache directory's pending changes over the
// reported attributes: the local size and mtime are the newer ones.
func (i *Inode) snfsAdjustLocked(a *nfs3.Fattr) {
	cf := i.sn.cf
	if i.fs.sn == nil || cf == nil || !cf.NeedsWriteBack() {
		return
	}
	a.Size = uint64(cf.Size())
	if !i.sn.mtime.IsZero() {
		if t := nfsTime(i.sn.mtime); timeAfter(t, a.Mtime) {
			a.Mtime, a.Ctime = t, t
		}
	}
}

// snfsBusy: Forget must keep the inode (its state is needed).
func (i *Inode) snfsBusyLocked() bool {
	return i.fs.sn != nil && (i.snfsHeldLocked() > 0 || i.sn.opening > 0 ||
		i.sn.cf != nil && i.fs.isDirty(i))
}

func openModeOf(flags int) snfs1.OpenMode {
	if flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		return snfs1.Read
	}
	return snfs1.Write
}

// snfsOpen is Open in snfs mode.
func (fs *FS) snfsOpen(ctx context.Context, i *Inode, c Cred, flags int) (*File, bool, error) {
	if flags&syscall.O_ACCMODE == syscall.O_RDWR {
		// OPEN_WRITE checks only write permission (docs/protocol.md 4.2).
		ok, err := fs.Access(ctx, i, c, nfs3.AccessRead)
		if err != nil {
			return nil, false, err
		}
		if !ok {
			return nil, false, nfs3.ErrAcces
		}
	}
	mode := openModeOf(flags)
	pmode := mode
	var keep, direct bool
	var err error
	if taken, k, ok := fs.reuseDelayed(i, mode); ok {
		pmode, keep = taken, k // a delayed close taken over: no OPEN
	} else if keep, direct, err = fs.snfsOpenProto(ctx, i, c, mode); err != nil {
		return nil, false, err
	}
	i.mu.Lock()
	i.opens++
	i.mu.Unlock()
	f := &File{i: i, cred: c, write: mode == snfs1.Write, sn: snfsFile{mode: pmode, direct: direct}}
	if flags&syscall.O_TRUNC != 0 && i.snfsCaching() {
		if cf, err := fs.cacheFile(i); err == nil && cf.Size() != 0 {
			fs.snfsTruncate(i, c, 0)
		}
	}
	return f, keep, nil
}

// snfsOpenProto sends the OPEN and applies its answer: the version rule to
// the cache directory and the kernel's pages, caching or write-through.
func (fs *FS) snfsOpenProto(ctx context.Context, i *Inode, c Cred, mode snfs1.OpenMode) (keep, direct bool, err error) {
	i.sn.openMu.Lock()
	i.mu.Lock()
	i.sn.opening++
	i.mu.Unlock()
	ok, err := fs.sn.sess.Open(ctx, i.FH, mode)
	i.mu.Lock()
	i.sn.opening--
	if err != nil {
		i.mu.Unlock()
		i.sn.openMu.Unlock()
		return false, false, err
	}
	i.sn.opens[mode]++
	now := time.Now()
	if ok.Attr != nil {
		i.setAttrLocked(ok.Attr, now)
	}
	size := int64(i.attr.Size)
	wasCaching := i.sn.caching
	kv := i.sn.kernVer
	i.mu.Unlock()
	i.sn.openMu.Unlock()

	valid := func(v uint64) bool { return v != 0 && (v == ok.CacheVersion || v == ok.OldCacheVersion) }
	cf, err := fs.cacheFile(i)
	if err != nil {
		return false, false, err
	}
	if ok.CacheEnabled {
		// Data this client wrote through while write-shared goes first: the
		// cache directory does not hold it.
		i.mu.Lock()
		pending := i.w.pending()
		i.mu.Unlock()
		if pending {
			if err := i.flush(ctx, true); err != nil {
				fs.log.Warn("write-back before caching", "fileid", i.FileID, "err", err)
			}
		}
		if valid(cf.Version()) {
			err = cf.Relabel(ok.CacheVersion)
		}
		if err == nil {
			err = cf.SetVersion(ok.CacheVersion, size)
		}
		if err != nil {
			fs.log.Warn("cache directory", "fileid", i.FileID, "err", err)
		}
		i.mu.Lock()
		i.sn.caching, i.sn.version = true, ok.CacheVersion
		keep = valid(kv)
		i.sn.kernVer = ok.CacheVersion
		i.mu.Unlock()
		return keep, false, nil
	}
	// Write-shared (or caching refused): no cache, write through. Dirty
	// data a callback did not take (there should be none) goes first.
	if cf.NeedsWriteBack() {
		if err := fs.writeBackInode(ctx, i); err != nil {
			fs.log.Warn("write-back before write-through", "fileid", i.FileID, "err", err)
		}
	}
	if err := cf.Invalidate(); err != nil && !errors.Is(err, cachedir.ErrRemoved) {
		fs.log.Warn("cache directory", "fileid", i.FileID, "err", err)
	}
	i.mu.Lock()
	i.sn.caching, i.sn.version, i.sn.kernVer = false, ok.CacheVersion, 0
	i.mu.Unlock()
	if wasCaching {
		fs.notifyData(i)
	}
	return false, true, nil
}

// snfsRead is Read of a file served from the cache directory: what is missing
// is read from the server and installed (Fill). If the cache stops being
// usable meanwhile (a callback invalidated it), the read goes to the server.
func (fs *FS) snfsRead(ctx context.Context, f *File, off uint64, buf []byte) (int, error) {
	i := f.i
	for try := 0; try < 4 && i.snfsCaching(); try++ {
		cf, err := fs.cacheFile(i)
		if err != nil {
			break
		}
		n, err := cf.ReadAt(buf, int64(off))
		if err == nil || err == io.EOF {
			fs.sn.stats.cacheRead(try, n)
			return n, nil
		}
		var miss *cachedir.MissingError
		if !errors.As(err, &miss) {
			if errors.Is(err, cachedir.ErrRemoved) {
				continue
			}
			return 0, err
		}
		if err := fs.fill(ctx, f.cred, i, cf, miss); err != nil && !errors.Is(err, cachedir.ErrStaleFill) {
			return 0, err
		}
	}
	return fs.snfsReadThrough(ctx, f, off, buf)
}

// fill reads the missing ranges from the server into the cache.
func (fs *FS) fill(ctx context.Context, c Cred, i *Inode, cf *cachedir.File, miss *cachedir.MissingError) error {
	nc := fs.client(c)
	for _, r := range miss.Ranges {
		for got := int64(0); got < r.Len; {
			n := min(r.Len-got, int64(fs.rsize))
			var res *nfs3.ReadRes
			start := fs.attrStart()
			err := fs.do(ctx, func() (nfs3.Status, error) {
				var err error
				res, err = nc.Read(ctx, i.FH, uint64(r.Off+got), uint32(n))
				return status(res, err)
			})
			if res != nil && res.Attr != nil {
				i.mu.Lock()
				i.postOpLocked(res.Attr, start, time.Now())
				i.mu.Unlock()
			}
			if err != nil {
				return fmt.Errorf("READ: %w", err)
			}
			data := res.Data
			if int64(len(data)) < n && (res.EOF || len(data) == 0) {
				// The server's file ends here: the rest is a hole.
				data = append(data, make([]byte, n-int64(len(data)))...)
			}
			if err := cf.Fill(miss.Gen, r.Off+got, data); err != nil {
				return err
			}
			got += int64(len(data))
		}
	}
	return nil
}

// snfsReadThrough reads from the server (a write-shared file): up to the
// server's end of file, not the cached size, so that another client's
// appends are seen; this client's own unwritten bytes are laid over.
func (fs *FS) snfsReadThrough(ctx context.Context, f *File, off uint64, buf []byte) (int, error) {
	i := f.i
	clear(buf)
	got, err := fs.readServer(ctx, f, off, buf)
	if err != nil {
		return 0, err
	}
	i.mu.Lock()
	if i.w.pending() {
		if end := i.w.end(); end > off+uint64(got) {
			got = int(min(uint64(len(buf)), end-off))
		}
		i.w.overlay(off, buf)
	}
	i.mu.Unlock()
	return got, nil
}

// snfsWrite is Write in snfs mode: into the cache directory while caching,
// else written through (sent now, committed at close or fsync).
func (fs *FS) snfsWrite(ctx context.Context, f *File, off uint64, data []byte) (int, error) {
	i := f.i
	if i.snfsCaching() {
		cf, err := fs.cacheFile(i)
		if err != nil {
			return 0, err
		}
		n, err := cf.WriteAt(data, int64(off))
		if n > 0 {
			i.mu.Lock()
			i.sn.cred, i.sn.mtime = f.cred, time.Now()
			i.mu.Unlock()
			fs.markDirty(i)
		}
		if err != nil {
			return n, fmt.Errorf("cache directory: %w", err)
		}
		return n, nil
	}
	i.mu.Lock()
	i.w.dirty.write(off, data)
	i.w.cred = f.cred
	i.w.mtime = time.Now()
	i.mu.Unlock()
	if err := i.flush(ctx, false); err != nil {
		return 0, err
	}
	return len(data), nil
}

// takeWbErr returns (and forgets) the write-back error not yet reported.
func (i *Inode) takeWbErr() error {
	i.mu.Lock()
	defer i.mu.Unlock()
	err := i.sn.wbErr
	i.sn.wbErr = nil
	return err
}

// snfsFlush is close(2): write-through data is committed; cached dirty data
// is made durable in the cache directory, not written back.
func (fs *FS) snfsFlush(ctx context.Context, f *File) error {
	i := f.i
	var errs []error
	i.mu.Lock()
	pending := i.w.pending()
	cf := i.sn.cf
	i.mu.Unlock()
	if pending {
		errs = append(errs, i.flush(ctx, true))
	}
	if cf != nil && fs.isDirty(i) {
		if err := cf.Sync(); err != nil && !errors.Is(err, cachedir.ErrRemoved) {
			errs = append(errs, err)
		}
	}
	errs = append(errs, i.takeWbErr())
	return errors.Join(errs...)
}

// snfsFsync writes the file back now.
func (fs *FS) snfsFsync(ctx context.Context, f *File) error {
	i := f.i
	var errs []error
	i.mu.Lock()
	pending := i.w.pending()
	i.mu.Unlock()
	if pending {
		errs = append(errs, i.flush(ctx, true))
	}
	errs = append(errs, fs.writeBackInode(ctx, i), i.takeWbErr())
	return errors.Join(errs...)
}

// snfsRelease is the last close of one open: its CLOSE, saying whether dirty
// data stays behind. A file removed while open loses its hidden name, and its
// pending write-back with it.
func (fs *FS) snfsRelease(ctx context.Context, f *File) error {
	i := f.i
	var errs []error
	i.mu.Lock()
	pending := i.w.pending()
	i.mu.Unlock()
	if pending {
		errs = append(errs, i.flush(ctx, true))
	}
	i.sn.openMu.Lock()
	i.mu.Lock()
	i.opens--
	i.sn.opens[f.sn.mode]--
	last := i.opens == 0
	dir, name := i.sillyDir, i.sillyName
	if last {
		i.sillyDir, i.sillyName = nil, ""
	}
	i.mu.Unlock()
	if last && name != "" {
		fs.cancelWriteBack(i)
	}
	dirty := false
	if cf := i.cacheFileOrNil(); cf != nil && fs.isDirty(i) {
		if err := cf.Sync(); err != nil && !errors.Is(err, cachedir.ErrRemoved) {
			errs = append(errs, err)
		}
		dirty = cf.NeedsWriteBack()
	}
	if name == "" && fs.delayClose(i, f.sn.mode) {
		i.sn.openMu.Unlock()
		return errors.Join(errs...)
	}
	_, err := fs.sn.sess.Close(ctx, i.FH, f.sn.mode, dirty)
	i.sn.openMu.Unlock()
	if err != nil && !errors.Is(err, nfs3.ErrStale) {
		fs.log.Warn("CLOSE", "fileid", i.FileID, "err", err)
	}
	fs.snfsClosedAll(i)
	if last && name != "" {
		var res *nfs3.WccRes
		if rerr := fs.do(ctx, func() (nfs3.Status, error) {
			var err error
			res, err = fs.client(f.cred).Remove(ctx, dir, name)
			return status(res, err)
		}); rerr != nil {
			fs.log.Warn("removing a file removed while open", "name", name, "err", rerr)
		}
		if d := fs.lookupInode(dir); d != nil && res != nil {
			fs.dirWcc(d, &res.Wcc)
		}
	}
	return errors.Join(errs...)
}

func (i *Inode) cacheFileOrNil() *cachedir.File {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.sn.cf
}

// cancelWriteBack drops i's cached data, dirty included, without writing it
// back: the file is gone (its last link removed) or empty.
func (fs *FS) cancelWriteBack(i *Inode) {
	i.flushMu.Lock()
	defer i.flushMu.Unlock()
	i.mu.Lock()
	cf := i.sn.cf
	i.sn.cf, i.sn.caching, i.sn.kernVer = nil, false, 0
	i.mu.Unlock()
	if fs.isDirty(i) {
		fs.sn.stats.Cancelled.Add(1)
	}
	fs.markClean(i)
	if cf != nil {
		if err := cf.Remove(); err != nil && !errors.Is(err, cachedir.ErrRemoved) {
			fs.log.Warn("cache directory: remove", "fileid", i.FileID, "err", err)
		}
	}
}

// snfsRemoved: name's object child lost a link by REMOVE (or a RENAME over
// it); nlink is its link count before. Its last link: pending write-back is
// cancelled.
func (fs *FS) snfsRemoved(child *Inode, nlink uint32) {
	if fs.sn == nil || child == nil || child.isDir() || nlink > 1 {
		return
	}
	child.mu.Lock()
	open := child.opens > 0
	child.mu.Unlock()
	if !open {
		fs.cancelWriteBack(child)
	}
}

// snfsTruncate sets the size of a file cached here and open for writing,
// locally: dirty data beyond it is never written back.
func (fs *FS) snfsTruncate(i *Inode, c Cred, size uint64) error {
	cf, err := fs.cacheFile(i)
	if err != nil {
		return err
	}
	if err := cf.Truncate(int64(size)); err != nil {
		return err
	}
	i.mu.Lock()
	i.sn.cred, i.sn.mtime = c, time.Now()
	i.mu.Unlock()
	if size == 0 && fs.isDirty(i) {
		fs.sn.stats.Cancelled.Add(1)
	}
	fs.markDirty(i)
	return nil
}

// snfsSetattrLocal reports whether a Setattr of i is done locally: a size
// change of a file cached here and open for writing.
func (fs *FS) snfsSetattrLocal(i *Inode, s SetAttr) bool {
	if fs.sn == nil || s.Size == nil || s.Mode != nil || s.UID != nil || s.GID != nil || s.Atime != nil || s.Mtime != nil {
		return false
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.sn.caching && i.sn.cf != nil && i.sn.opens[snfs1.Write] > 0
}

// writeBackInode writes i's dirty data in the cache directory back to the
// server (UNSTABLE WRITEs and a COMMIT, rewritten on a verifier change) and
// marks it clean. A write-back the server refuses (ENOSPC, EDQUOT, EIO) drops
// the data, as a kernel NFS client does; the error is kept for the next
// fsync or close and logged.
func (fs *FS) writeBackInode(ctx context.Context, i *Inode) error {
	if fs.sn == nil {
		return nil
	}
	i.flushMu.Lock()
	defer i.flushMu.Unlock()
	i.mu.Lock()
	cf, cred, version := i.sn.cf, i.sn.cred, i.sn.version
	i.mu.Unlock()
	if cf == nil || !cf.NeedsWriteBack() {
		if cf != nil {
			fs.markClean(i)
		}
		return nil
	}
	err := fs.writeBackFile(ctx, i, cf, cred, version)
	if err == nil {
		if !cf.NeedsWriteBack() {
			fs.markClean(i)
		}
		return nil
	}
	var st nfs3.Status
	if !errors.As(err, &st) && !errors.Is(err, ErrVerifierChanged) {
		return err // transport or cancellation: kept for the next try
	}
	fs.sn.stats.WriteBackErrors.Add(1)
	fs.log.Error("write-back failed: the file's unwritten data is lost", "fileid", i.FileID, "err", err)
	i.mu.Lock()
	i.sn.wbErr = err
	i.sn.cf, i.sn.kernVer = nil, 0
	i.invalidateLocked()
	i.mu.Unlock()
	fs.markClean(i)
	cf.Remove()
	fs.notifyData(i)
	return err
}

// writeBackFile sends cf's pending changes of i: the size cut first, then the
// dirty ranges, then the final size, and a COMMIT; everything is sent again
// if the COMMIT's verifier is not the WRITEs' (the server restarted).
func (fs *FS) writeBackFile(ctx context.Context, i *Inode, cf *cachedir.File, cred Cred, version uint64) error {
	wb := cf.Dirty()
	c := fs.client(cred)
	setSize := func(size int64) error {
		sz := uint64(size)
		var res *nfs3.WccRes
		err := fs.do(ctx, func() (nfs3.Status, error) {
			var err error
			res, err = c.Setattr(ctx, &nfs3.SetattrArgs{Object: i.FH, New: nfs3.Sattr{Size: &sz}})
			return status(res, err)
		})
		if res != nil {
			i.mu.Lock()
			i.wccLocked(&res.Wcc, time.Now())
			i.mu.Unlock()
		}
		if err != nil {
			return fmt.Errorf("SETATTR size %d: %w", size, err)
		}
		return nil
	}
	for attempt := 0; ; attempt++ {
		if wb.Truncated {
			if err := setSize(wb.TruncTo); err != nil {
				return err
			}
		}
		runs, n, err := fs.sendRanges(ctx, i, c, cf, wb.Ranges)
		if err != nil {
			return err
		}
		fs.sn.stats.WriteBackBytes.Add(n)
		if wb.Truncated && wb.Size != wb.TruncTo {
			if err := setSize(wb.Size); err != nil {
				return err
			}
		}
		if len(runs) > 0 {
			var res *nfs3.CommitRes
			fs.stats.Commits.Add(1)
			err := fs.do(ctx, func() (nfs3.Status, error) {
				var err error
				res, err = c.Commit(ctx, i.FH, 0, 0)
				return status(res, err)
			})
			if res != nil {
				i.mu.Lock()
				i.wccLocked(&res.Wcc, time.Now())
				i.mu.Unlock()
			}
			if err != nil {
				return fmt.Errorf("COMMIT: %w", err)
			}
			mismatch := false
			for _, r := range runs {
				mismatch = mismatch || r.verf != res.Verf
			}
			if mismatch {
				fs.stats.Rewrites.Add(1)
				fs.log.Warn("write verifier changed: rewriting the file's write-back", "fileid", i.FileID)
				if attempt >= maxRewrites {
					return ErrVerifierChanged
				}
				continue
			}
		}
		break
	}
	fs.sn.stats.WriteBacks.Add(1)
	if err := cf.MarkClean(wb, version); err != nil && !errors.Is(err, cachedir.ErrStaleWriteBack) {
		return err
	}
	return nil
}

// sendRanges writes the ranges, read from the cache file, in wsize pieces,
// maxInFlight at a time; it returns the pieces the server holds UNSTABLE
// (their data is not kept) and the bytes sent.
func (fs *FS) sendRanges(ctx context.Context, i *Inode, c *client.NFS, cf *cachedir.File, ranges []cachedir.Range) ([]sentRun, uint64, error) {
	var (
		mu    sync.Mutex
		runs  []sentRun
		bytes uint64
		first error
		wg    sync.WaitGroup
		sem   = make(chan struct{}, maxInFlight)
	)
	ws := int64(fs.wsize)
	for _, r := range ranges {
		for off := r.Off; off < r.End(); off += ws {
			n := min(ws, r.End()-off)
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				buf := make([]byte, n)
				k, err := cf.ReadAt(buf, off)
				if err == io.EOF {
					err = nil // truncated since: the rest is gone
				}
				var sent []sentRun
				if err == nil && k > 0 {
					sent, err = i.writeAll(ctx, c, extent{uint64(off), buf[:k]})
				}
				mu.Lock()
				defer mu.Unlock()
				if err != nil && first == nil {
					first = err
				}
				for _, s := range sent {
					runs = append(runs, sentRun{extent{s.off, nil}, s.verf})
				}
				bytes += uint64(k)
			}()
		}
	}
	wg.Wait()
	return runs, bytes, first
}

// snfsSync writes back every dirty file (unmount, syncfs).
func (fs *FS) snfsSync(ctx context.Context) error {
	var errs []error
	for _, i := range fs.dirtyInodes(time.Time{}) {
		if err := fs.writeBackInode(ctx, i); err != nil {
			errs = append(errs, fmt.Errorf("file %d: %w", i.FileID, err))
			continue
		}
		fs.cleanClose(ctx, i)
	}
	return errors.Join(errs...)
}

// recoverDirty writes back the dirty files a previous instance left in the
// cache directory: OPEN for writing (the covered WRITEs), write back as root
// (the writer's identity was not kept), CLOSE clean.
func (fs *FS) recoverDirty(ctx context.Context) error {
	var errs []error
	for _, h := range fs.sn.cache.DirtyFiles() {
		fh := nfs3.FH(h)
		cf, err := fs.sn.cache.File(fh)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		start := fs.attrStart()
		ok, err := fs.sn.sess.Open(ctx, fh, snfs1.Write)
		if errors.Is(err, nfs3.ErrStale) || errors.Is(err, nfs3.ErrBadHandle) {
			fs.log.Warn("recovery: a file with unwritten data is gone from the server; dropping the data", "fh", fmt.Sprintf("%x", h))
			cf.Remove()
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("recovery OPEN: %w", err))
			continue
		}
		a := ok.Attr
		if a == nil {
			if a, err = fs.getattr(ctx, Cred{}, fh); err != nil {
				errs = append(errs, err)
				fs.sn.sess.Close(ctx, fh, snfs1.Write, true)
				continue
			}
		}
		i := fs.inode(fh, a, start)
		if v := cf.Version(); v != 0 && (v == ok.CacheVersion || v == ok.OldCacheVersion) {
			cf.Relabel(ok.CacheVersion)
		} else {
			cf.SetVersion(ok.CacheVersion, int64(a.Size))
		}
		i.mu.Lock()
		i.sn.cf, i.sn.version, i.sn.cred = cf, ok.CacheVersion, Cred{}
		i.mu.Unlock()
		fs.markDirty(i)
		err = fs.writeBackInode(ctx, i)
		if err != nil {
			errs = append(errs, fmt.Errorf("recovery write-back of file %d: %w", i.FileID, err))
		} else {
			fs.log.Info("recovery: wrote back a file left dirty by a previous mount", "fileid", i.FileID)
		}
		if _, err := fs.sn.sess.Close(ctx, fh, snfs1.Write, cf.NeedsWriteBack()); err != nil {
			fs.log.Warn("recovery CLOSE", "fileid", i.FileID, "err", err)
		}
	}
	return errors.Join(errs...)
}

// Callback serves the server's callbacks (client.CallbackHandler): the work
// first, then the answer.
func (fs *FS) Callback(ctx context.Context, fh nfs3.FH, mode snfs1.CallbackMode, attr *nfs3.Fattr) snfs1.CallbackStatus {
	fs.sn.stats.Callbacks.Add(1)
	fs.sn.stats.callback(mode)
	i := fs.lookupInode(fh)
	var cf *cachedir.File
	if i != nil {
		cf = i.cacheFileOrNil()
	}
	if cf == nil {
		cf, _ = fs.sn.cache.File(fh)
	}
	held := cf != nil && cf.Holds()
	if i != nil {
		i.mu.Lock()
		held = held || i.snfsHeldLocked() > 0 || i.sn.caching || i.w.pending()
		i.mu.Unlock()
	}
	if !held {
		fs.sn.stats.CallbacksStale.Add(1)
		return snfs1.CBStale
	}
	if mode.WritesBack() && i != nil {
		i.mu.Lock()
		pending := i.w.pending()
		i.mu.Unlock()
		if pending {
			if err := i.flush(ctx, true); err != nil {
				fs.log.Warn("callback write-back", "fileid", i.FileID, "err", err)
			}
		}
		if err := fs.writeBackInode(ctx, i); err != nil {
			fs.log.Warn("callback write-back", "fileid", i.FileID, "mode", mode, "err", err)
		}
	}
	if mode.Invalidates() {
		if i != nil {
			i.mu.Lock()
			i.sn.caching, i.sn.kernVer = false, 0
			i.invalidateLocked()
			i.mu.Unlock()
		}
		if cf != nil {
			if err := cf.Invalidate(); err != nil && !errors.Is(err, cachedir.ErrRemoved) {
				fs.log.Warn("cache directory: invalidate", "err", err)
			}
		}
		if i != nil {
			fs.notifyData(i)
		}
	}
	if st, ok := fs.delayedCallback(ctx, i); ok {
		return st
	}
	if mode == snfs1.CBRelinquish {
		if i == nil {
			return snfs1.CBTreatAsClosed
		}
		i.mu.Lock()
		idle := i.sn.opens[snfs1.Read]+i.sn.opens[snfs1.Write] == 0 && i.sn.opening == 0
		i.mu.Unlock()
		if idle {
			return snfs1.CBTreatAsClosed
		}
	}
	return snfs1.CBOK
}

// linksOf is i's link count as last seen (0 if i is nil).
func linksOf(i *Inode) uint32 {
	if i == nil {
		return 0
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.attr.Nlink
}

// snfsCreated finishes Create in snfs mode: the new file is opened for
// writing with the protocol.
func (fs *FS) snfsCreated(ctx context.Context, e Entry, c Cred) (Entry, *File, error) {
	i := e.Inode
	keep, direct, err := fs.snfsOpenProto(ctx, i, c, snfs1.Write)
	_ = keep
	if err != nil {
		i.mu.Lock()
		i.opens--
		i.mu.Unlock()
		return Entry{}, nil, err
	}
	now := time.Now()
	i.mu.Lock()
	e.Attr, e.AttrTTL = i.reportLocked(), i.ttlLocked(now)
	i.mu.Unlock()
	return e, &File{i: i, cred: c, write: true, sn: snfsFile{mode: snfs1.Write, direct: direct}}, nil
}

// snfsSetattr is a local size change (snfsSetattrLocal).
func (fs *FS) snfsSetattr(i *Inode, c Cred, size uint64) (nfs3.Fattr, time.Duration, error) {
	if err := fs.snfsTruncate(i, c, size); err != nil {
		return nfs3.Fattr{}, 0, err
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.reportLocked(), i.ttlLocked(time.Now()), nil
}

// snfsSized brings the cache file to a size set on the server.
func (fs *FS) snfsSized(i *Inode, size *uint64) {
	if size == nil {
		return
	}
	if cf := i.cacheFileOrNil(); cf != nil && !cf.NeedsWriteBack() {
		cf.SetVersion(cf.Version(), int64(*size))
	}
}

// serverRestarted: the server restarted and lost every open and caching
// record of this client (docs/protocol.md section 7). Nothing cached here is
// protected by a callback any more: caching stops (the kernel's pages and
// attributes go; files are cached again from their next OPEN), and dirty
// data is written back at once. Files open here go on, written through.
func (fs *FS) serverRestarted() {
	fs.log.Warn("snfs server restarted: dropping cached state and writing back dirty data")
	fs.mu.Lock()
	all := make([]*Inode, 0, len(fs.inodes))
	for _, i := range fs.inodes {
		all = append(all, i)
	}
	fs.mu.Unlock()
	for _, i := range all {
		i.mu.Lock()
		was := i.sn.caching || i.sn.kernVer != 0
		i.sn.caching, i.sn.kernVer = false, 0
		if was {
			i.invalidateLocked()
		}
		i.mu.Unlock()
		if was {
			fs.notifyData(i)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	go func() {
		select {
		case <-fs.sn.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := fs.snfsSync(ctx); err != nil {
		fs.log.Error("write-back after a server restart", "err", err)
	}
}
