package store

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/fnv"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"snfs/rawsys"
	"snfs/store/attrcache"
	"snfs/store/uring"
)

// Errors that the server maps to protocol status.
var (
	ErrBadHandle  = errors.New("store: malformed or forged handle")
	ErrStale      = errors.New("store: stale handle")
	ErrCrossMount = errors.New("store: name is the mount point of another file system")
	ErrNotDir     = errors.New("store: not a directory")
	ErrBadCookie  = errors.New("store: invalid directory cookie")
)

const (
	handleFormat = 2
	// macLen: 48 bits of HMAC-SHA256. Forging a handle means guessing it online,
	// one RPC per guess (2^47 of them on average); and with ext4's 12-byte kernel
	// handles the whole handle is 24 bytes, as short as ganesha's, so that as
	// many READDIRPLUS entries fit in a reply.
	macLen      = 6
	maxKernelFH = 48 // 1 + 4 + 1 + 4 + 48 + 6 = 64 = NFS3_FHSIZE
	// HandleMax is the longest handle this package makes.
	HandleMax = 64
)

// Store resolves handles and performs file operations. Safe for concurrent use.
type Store struct {
	// gated: an open gate (openperm.go) is live: an open of a regular file
	// may wait for its FAN_OPEN_PERM answer, which a raw system call (no
	// entersyscall) would wait for with the scheduler unable to stop it.
	gated atomic.Int32
	gate  atomic.Pointer[OpenGate] // the live open gate, if any
	key   []byte                   // HMAC key for handles
	macs  sync.Pool                // of hash.Hash (HMAC-SHA256 under key): resolving a handle is hot
	cache *fdCache
	// bg does deferred work after the replies (background.go).
	bg *background
	// streams keeps directories open between the calls of a listing.
	streams dirStreams
	// handles remembers directory entries' kernel handles for READDIRPLUS.
	handles *handleCache
	// attrs caches entries' attributes for READDIRPLUS (attrcache.go), kept
	// fresh by notify (nil when fanotify is unavailable).
	attrs     *attrcache.Cache
	notify    *attrcache.Notifier
	ring      *uring.Ring // flushes (package uring); nil: plain fsync
	notifyErr error       // guarded by mu
	// foreign is told of other processes' changes (OnForeignChange).
	foreign atomic.Pointer[func(fh []byte)]
	// changesLost counts the notifier's reports that anything may have
	// changed (ChangesLost).
	changesLost atomic.Uint64
	// leases are the write leases held for the consistency protocol (lease.go).
	leases leases
	// idle gives up writable descriptors of idle files (idlewrite.go).
	idle idleWrites

	// checks counts handle MAC checks (ParseHandle), for HandleChecks.
	checks atomic.Uint64

	mu      sync.RWMutex
	exports map[uint32]*Export // guarded by mu
}

// Export is one exported directory tree.
type Export struct {
	ID      uint32
	Path    string
	rootFD  int    // O_PATH descriptor of the root
	mountFD int    // O_RDONLY descriptor of the root: open_by_handle_at refuses O_PATH ones
	rootKey string // kernel handle of the root
	mountID int
	Root    []byte // the root's handle
	// notified: changes on the export's file system are reported to the
	// attribute cache, so READDIRPLUS may use it.
	notified bool
	// slowFree: the file system is mounted with online discard, so freeing an
	// object's blocks may trim them before the last close returns (ext4 without
	// a journal does, in the closer's context): removals leave that close to the
	// background (dropIfGone). Elsewhere it is cheaper to close at once than to
	// wake the background goroutine (docs/measurements.md).
	slowFree bool
	// refs counts the store's own reference (dropped by RemoveExport) and the
	// calls using rootFD or mountFD at the moment: the descriptors are closed
	// when it reaches zero, so a call in flight when the export is removed
	// never uses a descriptor number that was closed (and maybe reused).
	refs atomic.Int64
}

// hold takes a reference to e's descriptors, or reports false if the export
// was removed and they are closed or closing.
func (e *Export) hold() bool {
	for {
		r := e.refs.Load()
		if r <= 0 {
			return false
		}
		if e.refs.CompareAndSwap(r, r+1) {
			return true
		}
	}
}

// drop releases a reference taken by hold (or the store's own).
func (e *Export) drop() {
	if e.refs.Add(-1) == 0 {
		rawsys.Close(e.rootFD)
		rawsys.Close(e.mountFD)
	}
}

// Options are a Store's settings.
type Options struct {
	// NoNotifier runs without change notifications, as on a machine where
	// fanotify is unavailable: READDIRPLUS reads every entry, and changes made
	// by other processes are not reported (OnForeignChange).
	NoNotifier bool
}

// Open returns a Store whose handle key lives in stateDir (created if missing).
func Open(stateDir string) (*Store, error) { return OpenWith(stateDir, Options{}) }

// OpenWith is Open with opts.
func OpenWith(stateDir string, opts Options) (*Store, error) {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("store: state directory: %w", err)
	}
	key, err := loadOrCreate(filepath.Join(stateDir, "handle.key"), 32)
	if err != nil {
		return nil, err
	}
	s := &Store{key: key, cache: newFDCache(4096), handles: newHandleCache(1 << 18), exports: map[uint32]*Export{},
		attrs: attrcache.New(attrCacheMax, DefaultAttrTTL, attrClock)}
	s.bg = newBackground()
	s.cache.retire = s.closeLater
	s.cache.idleWriter = s.armIdleWrites
	s.cache.evictWriter = s.closeWriterLater
	if opts.NoNotifier {
		s.notifyErr = errors.New("store: change notifications turned off")
	} else {
		s.notify, s.notifyErr = attrcache.StartNotifier(notifyTarget{s})
	}
	s.leases.start()
	if r, err := uring.New(64); err == nil {
		s.ring = r
	} else {
		slog.Info("store: flushes are plain fsync calls", "reason", err)
	}
	return s, nil
}

// loadOrCreate reads a secret of n bytes from path, creating it durably if missing.
func loadOrCreate(path string, n int) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil && len(b) == n {
		return b, nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("store: %w", err)
	}
	b = make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	if err := WriteFileDurable(path, b, 0o600); err != nil {
		return nil, err
	}
	return b, nil
}

// WriteFileDurable replaces path with data atomically and durably (write to a
// temporary file, fsync, rename, fsync the directory).
func WriteFileDurable(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("store: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("store: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	defer d.Close()
	return d.Sync()
}

// ExportID is the stable id of the export at path: a hash of the path, so handles
// survive restarts as long as the export keeps its path.
func ExportID(path string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(path))
	return h.Sum32()
}

// AddExport opens the directory at path (absolute, symlinks resolved) as an export.
func (s *Store) AddExport(path string) (*Export, error) {
	fd, err := rawsys.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("store: export %s: %w", path, err)
	}
	mfd, err := rawsys.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		rawsys.Close(fd)
		return nil, fmt.Errorf("store: export %s: %w", path, err)
	}
	fh, mid, err := rawsys.NameToHandleAt(fd, "", unix.AT_EMPTY_PATH)
	if err != nil {
		rawsys.Close(fd)
		rawsys.Close(mfd)
		return nil, fmt.Errorf("store: export %s: file system does not support handles: %w", path, err)
	}
	if fh.Size() > maxKernelFH {
		rawsys.Close(fd)
		rawsys.Close(mfd)
		return nil, fmt.Errorf("store: export %s: kernel handles of %d bytes are too long", path, fh.Size())
	}
	e := &Export{ID: ExportID(path), Path: path, rootFD: fd, mountFD: mfd, rootKey: kernelKey(fh), mountID: mid,
		slowFree: mountDiscards(mid)}
	e.Root = s.makeHandle(e, e.rootKey)
	e.refs.Store(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.notify != nil {
		if err := s.notify.Watch(path); err == nil {
			e.notified = true
		} else if s.notifyErr == nil {
			s.notifyErr = err
		}
	}
	if old, ok := s.exports[e.ID]; ok {
		rawsys.Close(fd)
		rawsys.Close(mfd)
		return nil, fmt.Errorf("store: export %s: id collides with %s", path, old.Path)
	}
	s.exports[e.ID] = e
	return e, nil
}

// RemoveExport stops serving e (an export reload dropped it): its handles
// resolve to ErrStale from now on, and its root descriptors are closed once
// the calls using them at the moment are done. Unless another export lives on
// the same file system, the cached descriptors and directory streams of that
// file system are dropped too (each closed by its last user), so that it can
// be unmounted. Adding the same path again makes its handles valid again: the
// export id is the path's.
func (s *Store) RemoveExport(e *Export) {
	s.mu.Lock()
	if s.exports[e.ID] != e {
		s.mu.Unlock()
		return
	}
	delete(s.exports, e.ID)
	var dev unix.Stat_t
	shared := rawsys.Fstat(e.rootFD, &dev) != nil // unknown: keep the descriptors
	for _, o := range s.exports {
		var st unix.Stat_t
		shared = shared || rawsys.Fstat(o.rootFD, &st) != nil || st.Dev == dev.Dev
	}
	s.mu.Unlock()
	if !shared {
		// Nothing else served lives on the file system: release what is
		// cached of it, so that it can be unmounted.
		s.cache.dropDev(uint64(dev.Dev))
		s.streams.dropDev(uint64(dev.Dev))
	}
	e.drop()
}

// Notified reports whether changes on the export's file system are reported
// by the change notifier (the attribute cache and OnForeignChange see them).
func (e *Export) Notified() bool { return e.notified }

// Export returns the export with the given id.
func (s *Store) Export(id uint32) *Export {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.exports[id]
}

// AttrCacheError says why an export's READDIRPLUS attributes are not cached
// (nil when they all are).
func (s *Store) AttrCacheError() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.notifyErr
}

// Close releases every cached descriptor and stops the change notifier.
func (s *Store) Close() {
	s.leases.close()
	if s.notify != nil {
		s.notify.Close() // s.notify stays: a late listing's drain finds it closed
	}
	if s.ring != nil {
		s.ring.Close() // waits for the flushes in flight; later ones flush directly
	}
	s.streams.closeAll()
	s.cache.closeAll()
	s.bg.stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.exports {
		e.drop()
	}
	s.exports = map[uint32]*Export{}
}

func kernelKey(fh unix.FileHandle) string {
	b := make([]byte, 4+fh.Size())
	binary.BigEndian.PutUint32(b, uint32(fh.Type()))
	copy(b[4:], fh.Bytes())
	return string(b)
}

func (s *Store) mac(b []byte) []byte {
	m, ok := s.macs.Get().(hash.Hash)
	if !ok {
		m = hmac.New(sha256.New, s.key)
	}
	m.Reset()
	m.Write(b)
	var sum [sha256.Size]byte
	out := append([]byte(nil), m.Sum(sum[:0])[:macLen]...)
	s.macs.Put(m)
	return out
}

// makeHandle builds: format(1) | export id(4) | kernel key length(1) | kernel key | mac(6),
// where the kernel key is the handle type (4) and the handle's bytes.
func (s *Store) makeHandle(e *Export, key string) []byte {
	b := make([]byte, 0, 6+len(key)+macLen)
	b = append(b, handleFormat)
	b = binary.BigEndian.AppendUint32(b, e.ID)
	b = append(b, byte(len(key)))
	b = append(b, key...)
	return append(b, s.mac(b)...)
}

// ParseHandle checks fh's format and MAC and returns its export id and kernel key.
func (s *Store) ParseHandle(fh []byte) (uint32, string, error) {
	s.checks.Add(1)
	if len(fh) < 6+macLen+4 || fh[0] != handleFormat {
		return 0, "", ErrBadHandle
	}
	n := int(fh[5])
	if n < 4 || n > maxKernelFH+4 || len(fh) != 6+n+macLen {
		return 0, "", ErrBadHandle
	}
	body := fh[:6+n]
	if !hmac.Equal(s.mac(body), fh[6+n:]) {
		return 0, "", ErrBadHandle
	}
	return binary.BigEndian.Uint32(fh[1:5]), string(fh[6 : 6+n]), nil
}

// HandleChecks returns how many handles the store has parsed and MAC-checked since
// it was opened: each Resolve (or ParseHandle) is one. Tests use it to show that a
// call checks each of its handles once.
func (s *Store) HandleChecks() uint64 { return s.checks.Load() }

// HandleExportID returns the export id written in fh without checking its MAC: a
// hint for scheduling decisions, never for access.
func HandleExportID(fh []byte) (uint32, bool) {
	if len(fh) < 6 || fh[0] != handleFormat {
		return 0, false
	}
	return binary.BigEndian.Uint32(fh[1:5]), true
}

// Node is a resolved handle: an open descriptor with a reference held. Release it.
type Node struct {
	Export *Export
	Handle []byte
	Stat   unix.Stat_t // attributes at resolution time
	s      *Store
	ent    *entry
}

// FD is the node's descriptor (O_PATH for objects the server did not just create).
func (n *Node) FD() int { return n.ent.fd }

// Key identifies the object (its kernel handle), for per-file state.
func (n *Node) Key() string { return n.ent.key }

// IsRoot reports whether n is its export's root.
func (n *Node) IsRoot() bool { return n.ent.key == n.Export.rootKey }

// Release drops the node's reference.
func (n *Node) Release() {
	if n != nil && n.ent != nil {
		n.s.cache.release(n.ent)
		n.ent = nil
	}
}

// procPath names n's descriptor in /proc, to reopen or operate on it by path.
func (n *Node) procPath() string { return "/proc/self/fd/" + strconv.Itoa(n.ent.fd) }

// Resolve turns a handle into a Node. It must be called with root credentials
// (outside As). A deleted object gives ErrStale.
func (s *Store) Resolve(fh []byte) (*Node, error) { return s.ResolveFor(fh, nil) }

// ResolveFor is Resolve with an admission check: the handle is parsed and its MAC
// checked once, then admit (if not nil) is given the handle's export before anything
// is opened, and its error is returned as is. The node's Export is that export, so
// one call answers both which export a handle belongs to and what it names.
func (s *Store) ResolveFor(fh []byte, admit func(*Export) error) (*Node, error) {
	id, key, err := s.ParseHandle(fh)
	if err != nil {
		return nil, err
	}
	e := s.Export(id)
	if e == nil {
		return nil, ErrStale
	}
	if admit != nil {
		if err := admit(e); err != nil {
			return nil, err
		}
	}
	ent := s.cache.get(key)
	if ent == nil {
		if !e.hold() {
			return nil, ErrStale // removed since it was looked up
		}
		ent, err = s.open(e, key)
		e.drop()
		if err != nil {
			return nil, err
		}
	}
	n := &Node{Export: e, Handle: append([]byte(nil), fh...), s: s, ent: ent}
	if err := rawsys.Fstat(ent.fd, &n.Stat); err != nil {
		n.Release()
		return nil, fmt.Errorf("store: fstat: %w", err)
	}
	if n.Stat.Nlink == 0 {
		s.cache.invalidate(key, false, n.Stat.Blocks*512 > largeFree)
		n.Release()
		return nil, ErrStale
	}
	return n, nil
}

// open opens the object of e named by kernel key into the descriptor cache.
// The caller holds a reference to e's descriptors.
// maxFreeingTries bounds how often open tries a handle again while its
// inode is being freed (ENOMEM).
const maxFreeingTries = 5

func (s *Store) open(e *Export, key string) (*entry, error) {
	if key == e.rootKey {
		fd, err := unix.FcntlInt(uintptr(e.rootFD), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("store: dup export root: %w", err)
		}
		return s.cache.add(key, fd, -1), nil
	}
	kh := unix.NewFileHandle(int32(binary.BigEndian.Uint32([]byte(key[:4]))), []byte(key[4:]))
	fd, err := rawsys.OpenByHandleAt(e.mountFD, kh, unix.O_PATH|unix.O_CLOEXEC|unix.O_NOFOLLOW)
	// ENOMEM: ext4 answers so for an inode that is being freed (its iget
	// refuses it), which a file removed or renamed over a moment ago is. It
	// is over in moments, and then the handle is ESTALE; a real shortage of
	// memory outlasts the tries and is answered NFS3ERR_JUKEBOX.
	for try := 1; errors.Is(err, unix.ENOMEM) && try <= maxFreeingTries; try++ {
		time.Sleep(time.Duration(try) * 100 * time.Microsecond)
		fd, err = rawsys.OpenByHandleAt(e.mountFD, kh, unix.O_PATH|unix.O_CLOEXEC|unix.O_NOFOLLOW)
	}
	if err != nil {
		if errors.Is(err, unix.ESTALE) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EINVAL) {
			return nil, ErrStale
		}
		return nil, fmt.Errorf("store: open_by_handle_at: %w", err)
	}
	return s.cache.add(key, fd, -1), nil
}

// Refresh re-reads n's attributes into n.Stat.
func (n *Node) Refresh() error {
	if err := rawsys.Fstat(n.ent.fd, &n.Stat); err != nil {
		return fmt.Errorf("store: fstat: %w", err)
	}
	return nil
}
