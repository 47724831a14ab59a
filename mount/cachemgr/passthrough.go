package cachemgr

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"snfs/mount/cachedir"
	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/state"
	"snfs/state/clientfile"
)

// FUSE passthrough in snfs mode (Linux 6.9+). An application open for
// reading only of a file the server lets this client cache, whose every byte
// the cache directory holds, is handed the cache file's descriptor: the
// kernel then reads (and maps) the local file itself, and the open's reads
// never reach the mount process. The decisions, and why:
//
//   - Only complete files. A passthrough read of a byte the cache does not
//     hold would see a hole's zeros, and the mount cannot fill it (it does not
//     see the read). A file not complete at open is read through the mount
//     as before, which fills the cache; a later open then passes through. A
//     large file opened for a one-byte read is not fetched whole.
//   - The kernel's pages go when the file is whole in the cache. Linux drops
//     an inode's pages at a passthrough open (it refuses FOPEN_KEEP_CACHE
//     with FOPEN_PASSTHROUGH), which for a large file just read through the
//     page cache costs more than the read that follows; and those pages
//     duplicate the cache file's. So the last release of a page-cache open
//     of a file the cache holds whole drops them (snfsIOEnd), off the path
//     of the next open.
//   - Write opens start it too, where the kernel offers pre-content
//     fanotify: every first passthrough open's cache file is opened through
//     a watched mount (pinned.go), so that if the file becomes shared while
//     the kernel writes it, this client can become its pinned holder. The
//     kernel cannot take a passthrough back; without the watch, write opens
//     go through the mount, into the cache file as dirty data, unless they
//     must join (next point).
//   - O_APPEND opens (append.go) do not start passthrough, and none starts
//     while one of them is open through the mount (appenders): the mount
//     places their appends at the cache file's end, which a passthrough
//     writer would move unseen. One made while passthrough opens exist joins
//     them (next point), while the file is cached only.
//   - Joining. Linux refuses, on one inode, a non-passthrough open while
//     passthrough opens exist (and a passthrough open while opens whose pages
//     it caches exist), and all passthrough opens of an inode must share one
//     backing file. So no open passes through first while the file has
//     cached-page opens, and every open made while it has passthrough opens
//     joins them on the same (pinned) cache file: while the file is cached,
//     after filling what the cache lacks; while it is write-shared, a read
//     open after replacing the pinned file's bytes with the server's (the
//     cache claims none of them then), and a write open is refused (EBUSY):
//     its writes could reach the server only at close.
//   - Writes by joined write opens (external writes) are invisible to the
//     cache's bookkeeping. While one lasts, the cache's committed index
//     records claim none of the file's clean bytes (cachedir BeginExternal),
//     and before a close, an fsync or a write-back returns, the cache file is
//     looked at (snfsNoteExternal): if its size or change time moved, all of
//     it becomes dirty, made durable at close like any dirty data. The size
//     and mtime reported meanwhile are the cache file's.
//   - The cache file is pinned (cachedir.File.Pin) while a passthrough open
//     lasts: it is not evicted, and an invalidation forgets its clean data
//     without punching holes in it, so the kernel never reads zeros.
//   - Invalidation while a passthrough open lasts. The server calls back when
//     another client opens the file. With writers among the opens (and the
//     watch), this client becomes the pinned holder (pinned.go). Otherwise
//     the kernel keeps reading the pinned file through the opens it already
//     has, which hold the data as of the callback (the server delays the
//     other client's OPEN until the callback is answered, so nothing the
//     other client writes is older); opens made after the callback read it
//     fresh (joining refreshes the pinned file). Without the watch, the later
//     reads of those opens do not see the other client's later writes, and a
//     joined writer's later writes are written through, the whole file, at
//     its close or fsync: the limit the kernel's own page cache already has
//     for a handle opened while the file was cacheable (docs/mount.md), made
//     visible at once rather than after a refill.

// passthroughState is an inode's kernel I/O mode bookkeeping; guarded by
// the Inode's mu.
type passthroughState struct {
	// The passthrough opens by mode are the machine's (clientfile's
	// PassthroughOpen, PassthroughClose; ptOpensLocked, ptWritersLocked):
	// while a write open is among them, cf is between BeginExternal and
	// EndExternal.
	cf     *cachedir.File // the pinned cache file the passthrough opens use; nil: none
	fd     *os.File       // a descriptor of it for writes made through the mount while it is pinned
	cached int            // opens the kernel caches pages for (neither direct nor passthrough)
	// appenders: O_APPEND opens through the mount (append.go). No open
	// passes through first while there are some: the kernel's writes to
	// the cache file would move its end behind the mount's back.
	appenders int
	// watched: the kernel's backing file was opened through the watched
	// mount (pinned.go): its accesses can be stopped; an ignore mark on the
	// file until the last passthrough open ends.
	watched bool
	pinned  *pinnedFile // this client is the file's pinned holder (pinned.go)
}

// ptOpensLocked is the number of i's passthrough opens.
func ptOpensLocked(i *vfs.Inode) int {
	return stOf(i).Passthrough(state.Read) + stOf(i).Passthrough(state.Write)
}

// ptWritersLocked is the number of i's passthrough opens for writing.
func ptWritersLocked(i *vfs.Inode) int { return stOf(i).Passthrough(state.Write) }

// ErrBusy: the open cannot be served now (the bridge answers EBUSY).
var ErrBusy = errors.New("vfs: busy")

// errPassthroughBusy refuses a write open of a write-shared file that this
// client's kernel reads through passthrough (see above).
var errPassthroughBusy = fmt.Errorf("file open with passthrough here and write-shared: %w", ErrBusy)

// errSetIDBusy: a write open of a set-ID file met passthrough opens of it
// that did not end (waitPassthroughEnd).
var errSetIDBusy = fmt.Errorf("set-ID file open with passthrough here: %w", ErrBusy)

// setIDOf reports whether i's mode has a set-ID bit.
func setIDOf(i *vfs.Inode) bool {
	i.Mu.Lock()
	defer i.Mu.Unlock()
	return i.Attr.Mode&(syscall.S_ISUID|syscall.S_ISGID) != 0
}

// EnablePassthrough lets snfs mode hand cache files to the kernel (the
// bridge calls it once the kernel agreed to FUSE passthrough).
func (sn *snfsFS) EnablePassthrough() {
	if !sn.passthrough.Load() {
		sn.startWatch()
		sn.passthrough.Store(true)
	}
}

// PassthroughFile is the descriptor the kernel should do this open's I/O on
// (FUSE passthrough), or nil.
func (*snfsFS) PassthroughFile(f *vfs.File) *os.File {
	if !snfsOpened(f) {
		return nil
	}
	return fsnOf(f).pt
}

// snfsIOMode decides how the kernel does this open's I/O: passthrough, its
// page cache, or direct (through the mount every time).
func (fs *snfsFS) snfsIOMode(ctx context.Context, f *vfs.File, flags int) error {
	i := f.I
	i.Mu.Lock()
	join := ptOpensLocked(i) > 0
	i.Mu.Unlock()
	if join {
		if joined, err := fs.snfsPassthroughJoin(ctx, f, flags); joined || err != nil {
			return err
		}
		// The passthrough opens ended meanwhile.
	}
	if f.Appending {
		// An O_APPEND writer's appends are placed by the mount (append.go):
		// it does not start passthrough (it joins the passthrough opens
		// there are, while the file is cached), and the kernel caches none
		// of its pages.
		for {
			i.Mu.Lock()
			join = ptOpensLocked(i) > 0
			if !join {
				snOf(i).pt.appenders++
				fsnOf(f).appendIO = true
			}
			i.Mu.Unlock()
			if !join {
				f.DirectIO = true
				return nil
			}
			if joined, err := fs.snfsPassthroughJoin(ctx, f, flags); joined || err != nil {
				return err
			}
		}
	}
	if f.DirectIO {
		return nil
	}
	if fs.passthrough.Load() && fs.snfsPassthrough(f, flags) {
		return nil
	}
	i.Mu.Lock()
	join = ptOpensLocked(i) > 0
	if !join {
		fsnOf(f).cachedIO = true
		snOf(i).pt.cached++
	}
	i.Mu.Unlock()
	if join {
		// Another open passed through meanwhile.
		joined, err := fs.snfsPassthroughJoin(ctx, f, flags)
		if joined || err != nil {
			return err
		}
		// And those ended too: a cached-page open after all.
		i.Mu.Lock()
		fsnOf(f).cachedIO = true
		snOf(i).pt.cached++
		i.Mu.Unlock()
	}
	return nil
}

// localOpensOfNode reports whether the kernel's node of i holds opens made
// on the local inode whose number i keeps (vfs.KeepIno): the opens of a
// file made locally under a permit (its provisional opens, permitcreate.go,
// or opens of its local data, offlinedata.go) still open once the server
// made it. The kernel caches their pages, so it refuses a passthrough open
// of the same node (EIO) until they are released; the opens they make of
// the real file (provReal, offReal) are counted as pt.cached only once
// made. No such open begins once the file is resolved: it is only a count
// going down.
func (fs *snfsFS) localOpensOfNode(i *vfs.Inode) bool {
	h := fs.InoHolder(i)
	if h == nil {
		return false
	}
	fs.offOpens.Lock()
	n := len(fs.offOpens.m[string(h.FH)])
	fs.offOpens.Unlock()
	fs.provOpens.Lock()
	pf := fs.provOpens.m[string(h.FH)]
	fs.provOpens.Unlock()
	return n > 0 || pf != nil
}

// snfsPassthrough makes f the first passthrough open of its file if the
// file allows it now. The kernel's backing file is opened through the
// watched mount when there is one (pinned.go), for a read open too: a write
// open that joins it later can then become the pinned holder's. Without the
// watch, write opens do not pass through.
func (fs *snfsFS) snfsPassthrough(f *vfs.File, flags int) bool {
	i := f.I
	write := flags&syscall.O_ACCMODE != syscall.O_RDONLY
	if write && fs.pin.w == nil {
		return false
	}
	// A write to a set-ID file must reach the mount, which has the
	// server clear the bits (setid.go); a passthrough write would not.
	if write && setIDOf(i) {
		return false
	}
	allowed := func(cf *cachedir.File) bool {
		return stOf(i).Caching() && cf != nil && snOf(i).cf == cf && snOf(i).pt.cached == 0 && ptOpensLocked(i) == 0 && snOf(i).pt.appenders == 0
	}
	if fs.localOpensOfNode(i) {
		return false
	}
	i.Mu.Lock()
	cf := snOf(i).cf
	ok := allowed(cf)
	i.Mu.Unlock()
	if !ok {
		return false
	}
	var fd *os.File
	var err error
	watched := fs.pin.w != nil
	if watched {
		fd, ok, err = cf.PinWith(true, fs.openWatched)
		if ok && write {
			if err = cf.BeginExternal(); err != nil {
				fs.unwatch(fd)
				cf.Unpin()
				fd.Close()
				ok = false
			}
		}
	} else {
		fd, ok, err = cf.Pin(true)
	}
	if err != nil {
		fs.Logger().Debug("passthrough: cache file", "fileid", i.FileID, "err", err)
	}
	if !ok {
		return false
	}
	i.Mu.Lock()
	if !allowed(cf) {
		// A callback or another open came in between.
		i.Mu.Unlock()
		if write {
			cf.EndExternal()
		}
		if watched {
			fs.unwatch(fd)
		}
		cf.Unpin()
		fd.Close()
		return false
	}
	snOf(i).pt.cf = cf
	snOf(i).pt.watched = watched
	stOf(i).PassthroughOpen(openModeOf(flags))
	if write {
		noteWriterLocked(i, cf, f.Cred)
	}
	i.Mu.Unlock()
	fsnOf(f).pt, fsnOf(f).ptCF, fsnOf(f).ptWrite = fd, cf, write
	if write {
		fs.pin.wb.Add(fd)
	}
	fs.stats.PassthroughOpens.Add(1)
	return true
}

// passthroughReleaseWait bounds how long an open that cannot join the
// passthrough opens waits for them to end.
const passthroughReleaseWait = 2 * time.Second

// waitPassthroughEnd is for an open that cannot join i's passthrough opens
// on cf: it waits for them to end (nil: the caller opens afresh) and answers
// busy if they last. The kernel sends RELEASE after close(2)
// has returned, so an application that closes a file and opens it again
// finds its own earlier open still counted for a moment; refusing at once
// would fail that open. (The opens also outlast their cache file when a
// failed write-back dropped it: the file is no longer the cache's.)
func (sn *snfsFS) waitPassthroughEnd(ctx context.Context, i *vfs.Inode, cf *cachedir.File, busy error) error {
	deadline := time.NewTimer(passthroughReleaseWait)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		i.Mu.Lock()
		ended := snOf(i).pt.cf != cf
		i.Mu.Unlock()
		if ended {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return busy
		case <-tick.C:
		}
	}
}

// snfsPassthroughJoin makes f a passthrough open of a file that has some
// already: Linux requires every open of such an inode to pass through, to
// the same file. The pinned file is first made whole and current: filled
// from the server where the cache lacks bytes (the file is cached), or
// replaced by the server's copy (write-shared: then only for reading).
func (fs *snfsFS) snfsPassthroughJoin(ctx context.Context, f *vfs.File, flags int) (bool, error) {
	i := f.I
	write := flags&syscall.O_ACCMODE != syscall.O_RDONLY
	i.Mu.Lock()
	cf, caching := snOf(i).pt.cf, stOf(i).Caching() && snOf(i).cf == snOf(i).pt.cf
	pf := snOf(i).pt.pinned
	i.Mu.Unlock()
	if cf == nil {
		return false, nil
	}
	if write && setIDOf(i) {
		// A write to a set-ID file must reach the mount, which has the
		// server clear the bits (setid.go); joined, it would pass through
		// as the opener of the backing file, and the bits would stay
		// (TestMountSetIDClearedOnWrite: the RELEASE of the open that
		// made the file came after the writer's open).
		return false, fs.waitPassthroughEnd(ctx, i, cf, errSetIDBusy)
	}
	if f.Appending && !caching {
		// The kernel would append at the pinned file's end, which another
		// client's appends need not have reached (its accesses are refreshed
		// at the offsets the kernel names, not at the end it writes).
		return false, fs.waitPassthroughEnd(ctx, i, cf, errPassthroughBusy)
	}
	switch {
	case pf != nil && (pf.holder || !write):
		// Every access of the pinned file is refreshed from the server
		// before it runs, and every write sent before another client's
		// request (pinned.go): joining needs nothing.
	case caching:
		// What joined writers wrote is taken in first (dirty): a fill never
		// writes over it.
		if err := fs.snfsNoteExternal(ctx, i); err != nil {
			return false, err
		}
		if miss := cf.Missing(); miss != nil {
			if err := fs.fill(ctx, f.Cred, i, cf, miss); err != nil {
				return false, err
			}
		}
	case write:
		return false, fs.waitPassthroughEnd(ctx, i, cf, errPassthroughBusy)
	default:
		if err := fs.snfsNoteExternal(ctx, i); err != nil {
			return false, err
		}
		if err := fs.snfsPinnedRefresh(ctx, f); err != nil {
			return false, err
		}
	}
	fd, _, err := cf.Pin(false)
	if err != nil {
		return false, err
	}
	if write {
		if err := cf.BeginExternal(); err != nil {
			cf.Unpin()
			fd.Close()
			return false, err
		}
	}
	i.Mu.Lock()
	if snOf(i).pt.cf != cf {
		i.Mu.Unlock()
		if write {
			cf.EndExternal()
		}
		cf.Unpin()
		fd.Close()
		return false, nil
	}
	stOf(i).PassthroughOpen(openModeOf(flags))
	if write {
		noteWriterLocked(i, cf, f.Cred)
	}
	i.Mu.Unlock()
	fsnOf(f).pt, fsnOf(f).ptCF, fsnOf(f).ptWrite = fd, cf, write
	f.DirectIO = false
	if write && fs.pin.wb != nil {
		fs.pin.wb.Add(fd)
	}
	fs.stats.PassthroughOpens.Add(1)
	return true, nil
}

// snfsNoteExternal takes in what passthrough writers wrote to i's cache file
// behind the mount's back: all of it becomes dirty (and is written through
// at once if the file is no longer cached). Call it before a close or an
// fsync returns, and before a write-back.
func (fs *snfsFS) snfsNoteExternal(ctx context.Context, i *vfs.Inode) error {
	if pf := fs.pinnedOf(i); pf != nil {
		return fs.pinSync(ctx, pf, true)
	}
	changed, err := fs.snfsNoteExternalLocal(i)
	if err != nil || !changed {
		return err
	}
	// Write-shared: what this client wrote goes to the server now; the
	// bytes do not stay cached (the machine's ExternalTaken).
	i.Mu.Lock()
	cf, acts := snOf(i).pt.cf, stOf(i).ExternalTaken()
	i.Mu.Unlock()
	if cf == nil || !hasAct(acts, clientfile.ActWriteBack) {
		return nil
	}
	err = fs.writeBackInode(ctx, i)
	if ierr := cf.Invalidate(); ierr != nil && !errors.Is(ierr, cachedir.ErrRemoved) {
		err = errors.Join(err, ierr)
	}
	return err
}

// snfsNoteExternalLocal is snfsNoteExternal's local part, for the cache
// operations that must see the cache file as it is (a truncation, the
// version rule at an OPEN): no write-through.
func (fs *snfsFS) snfsNoteExternalLocal(i *vfs.Inode) (bool, error) {
	if fs.pinnedOf(i) != nil {
		// The kernel's writes are taken in one by one (pinned.go); the
		// file as a whole holds other clients' older bytes.
		return false, nil
	}
	i.Mu.Lock()
	cf, writers := snOf(i).pt.cf, ptWritersLocked(i)
	i.Mu.Unlock()
	if cf == nil || writers == 0 {
		return false, nil
	}
	changed, err := cf.NoteExternal()
	if errors.Is(err, cachedir.ErrRemoved) {
		return false, nil // the file is gone: nothing of it is written back
	}
	if err != nil || !changed {
		return false, err
	}
	i.Mu.Lock()
	snOf(i).mtime = time.Now()
	stOf(i).ExternalWrite()
	i.Mu.Unlock()
	fs.markDirty(i)
	return true, nil
}

// snfsPinnedRefresh replaces the pinned file's bytes with the server's copy
// (a write-shared file, not cached: the cache claims none of them).
func (fs *snfsFS) snfsPinnedRefresh(ctx context.Context, f *vfs.File) error {
	i := f.I
	wfd, err := fs.pinnedFd(i)
	if err != nil || wfd == nil {
		return err
	}
	buf := make([]byte, 1<<20)
	var off uint64
	for {
		n, err := fs.ReadServer(ctx, f, off, buf)
		if err != nil {
			return err
		}
		if _, err := wfd.WriteAt(buf[:n], int64(off)); err != nil {
			return fmt.Errorf("passthrough: cache file: %w", err)
		}
		off += uint64(n)
		if n < len(buf) {
			break
		}
	}
	if err := wfd.Truncate(int64(off)); err != nil {
		return fmt.Errorf("passthrough: cache file: %w", err)
	}
	return nil
}

// pinnedFd returns the descriptor for the mount's own writes to the pinned
// file (nil if i has no passthrough opens).
func (sn *snfsFS) pinnedFd(i *vfs.Inode) (*os.File, error) {
	i.Mu.Lock()
	defer i.Mu.Unlock()
	if ptOpensLocked(i) == 0 || snOf(i).pt.cf == nil {
		return nil, nil
	}
	if snOf(i).pt.fd == nil {
		fd, err := snOf(i).pt.cf.OpenData()
		if err != nil {
			return nil, err
		}
		snOf(i).pt.fd = fd
	}
	return snOf(i).pt.fd, nil
}

// snfsIOEnd undoes snfsIOMode at the open's release (after snfsNoteExternal).
func (fs *snfsFS) snfsIOEnd(f *vfs.File) {
	i := f.I
	var wfd *os.File
	var cf *cachedir.File // the file's cache, to drop the kernel's pages of if whole
	var pf *pinnedFile    // the pinned mode that ends with the last passthrough open
	var pcf *cachedir.File
	i.Mu.Lock()
	if fsnOf(f).appendIO {
		snOf(i).pt.appenders--
		fsnOf(f).appendIO = false
	}
	if fsnOf(f).cachedIO {
		snOf(i).pt.cached--
		fsnOf(f).cachedIO = false
		if snOf(i).pt.cached == 0 && stOf(i).Caching() && fs.passthrough.Load() {
			cf = snOf(i).cf
		}
	}
	if fsnOf(f).pt != nil {
		// What the kernel wrote went first (snfsRelease's
		// snfsNoteExternal: the actions' ActPinSync or ActWriteBack).
		m := state.Read
		if fsnOf(f).ptWrite {
			m = state.Write
		}
		stOf(i).PassthroughClose(m)
		if ptOpensLocked(i) == 0 {
			wfd, pf, pcf = snOf(i).pt.fd, snOf(i).pt.pinned, snOf(i).pt.cf
			if snOf(i).pt.watched {
				// Under i's lock: a new first open's mark comes after.
				fs.unwatch(fsnOf(f).pt)
			}
			snOf(i).pt.cf, snOf(i).pt.fd, snOf(i).pt.pinned, snOf(i).pt.watched = nil, nil, nil, false
		}
	}
	i.Mu.Unlock()
	if pf != nil {
		// What a failed send left behind stays, as dirty data.
		fs.pinKeepUnsent(pf, pcf)
		fs.pinForget(pf)
	}
	if wfd != nil {
		wfd.Close()
	}
	if fsnOf(f).pt != nil {
		if fsnOf(f).ptWrite {
			if fs.pin.wb != nil {
				fs.pin.wb.Remove(fsnOf(f).pt)
			}
			fsnOf(f).ptCF.EndExternal()
		}
		fsnOf(f).ptCF.Unpin()
		fsnOf(f).pt.Close()
		fsnOf(f).pt, fsnOf(f).ptCF, fsnOf(f).ptWrite = nil, nil, false
	}
	if cf != nil && cf.Missing() == nil {
		// The last open through the page cache of a file the cache directory
		// now holds whole: the kernel's pages of it duplicate the cache
		// file's, and the next read open passes through, where Linux would
		// drop them anyway (it refuses FOPEN_KEEP_CACHE there), on that
		// open's path. Drop them now, at this release, which nobody waits for.
		fs.NotifyData(i)
	}
}

// snfsPassthroughAttrLocked lays the size and mtime of a cache file that
// passthrough opens write over a: the kernel's writes are newer than the
// cache's bookkeeping.
func snfsPassthroughAttrLocked(i *vfs.Inode, a *nfs3.Fattr) {
	if ptWritersLocked(i) == 0 || snOf(i).pt.cf == nil {
		return
	}
	if pf := snOf(i).pt.pinned; pf != nil && pf.serverSized.Load() {
		// Pinned (pinned.go): the cache file's size is older than the
		// server's after another client extended or cut the file (and
		// SQLite takes a database shorter than its header says for a
		// corrupt one); this client's writes were sent.
		return
	}
	size, mtime, ok := snOf(i).pt.cf.DataSize()
	if !ok {
		return
	}
	a.Size = uint64(size)
	if t := vfs.NFSTime(mtime); vfs.TimeAfter(t, a.Mtime) {
		a.Mtime, a.Ctime = t, t
	}
}
