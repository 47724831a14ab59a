package cachemgr

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"snfs/mount/cachedir"
	"snfs/mount/hsm"
	"snfs/mount/vfs"
	"snfs/nfs3"
)

// Passthrough writers and the pinned holder (docs/protocol.md section 10.1;
// docs/mount.md). A write open of a file the server lets this client cache
// passes through like a read open (passthrough.go): the kernel writes the
// cache file itself, so writing costs what writing the local disk costs.
// What the kernel writes that way is taken in at a close, an fsync or a
// write-back as all of the file dirty (snfsNoteExternal).
//
// The kernel cannot take a passthrough open back, so when the file stops
// being cacheable (another client opens it: the server calls back, write
// back and invalidate), the open goes on writing the cache file. For that
// moment the cache file was opened through a watched mount (package hsm):
// its writes and reads can be stopped, one at a time, before they touch the
// file. While they are ignored (the file is this client's) nothing is
// stopped. The callback turns the watch on, writes back all of the file, and
// answers CB_PINNED: this client stays the file's dirty holder, and every
// request of another client for the file waits until this client has
// answered a write-back asked after the request came (the server's
// pinnedBlock). From then on, each access of the kernel's opens is stopped
// before it runs, and the mount first sends what the kernel wrote since the
// last time (the ranges of the accesses that turned out to be writes,
// FILE_SYNC) and then lays the server's bytes of the access's range over the
// cache file (except where the kernel's other accesses in flight may write).
// So another client reads every byte written here before its request (the
// write-back it waited for sent them), and this client's next access sees
// every byte another client wrote before it (the refresh). Ranges are the
// kernel's, whole pages: the refresh makes the page current before a write
// lands in it, so sending the page back sends the other client's bytes in
// it unchanged.
//
// Writes through a shared mapping (mmap) of such a file raise no event: a
// close or an fsync finds them by comparing the cache file's pages with
// what was last sent or refreshed (pinnedmap.go). Limits: another client
// sees them only after such a close or fsync, and reads through a mapping
// are not refreshed. A truncation by another client shortens the cache file
// only when an access's refresh finds the end.

// pinState is the FS's watch of passthrough cache files.
type pinState struct {
	w  *hsm.Watcher          // nil: write opens do not pass through
	wb *cachedir.WriteBehind // with w: the disk writes of passthrough writers' cache files

	mu    sync.Mutex
	byIno map[uint64]*pinnedFile // the pinned files, by their cache file's inode number
}

// pinnedFile is a file this client is the pinned holder of (or was, while
// passthrough opens of it remain).
type pinnedFile struct {
	i   *vfs.Inode
	ino uint64
	fd  *os.File // the cache file through the normal path: reads what the kernel wrote, writes refreshed bytes

	// holder: this client answered CB_PINNED (it had writers); otherwise it
	// only reads, and its accesses are refreshed all the same.
	holder bool

	// mu serializes the work on the file (event handler, callbacks, closes);
	// taken after the watcher's lock, never across a Drain.
	mu      sync.Mutex
	entered bool           // the entry's write-back is done: accesses refresh, write-backs send only landed
	gone    bool           // pinForget ran: fd is closed
	unsent  bool           // the last pinSync failed: stores through a mapping may be unsent too
	pre     map[int32]span // accesses let through and not yet known as reads or writes, by thread
	landed  []span         // written by the kernel, not yet sent
	cred    vfs.Cred       // the last writer's
	sums    pageSums       // the cache file's pages as last sent or refreshed (pinnedmap.go)

	// serverSized: the server's size is the file's (entered, and nothing
	// the kernel wrote waits to be sent), not the cache file's, which
	// another client's extension or truncation does not reach until an
	// access's refresh. Set under mu, read under the inode's Mu, where mu
	// cannot be taken (snfsPassthroughAttrLocked).
	serverSized atomic.Bool
}

// span is a byte range [off, off+n).
type span struct{ off, n uint64 }

func (s span) end() uint64 {
	if s.n > math.MaxUint64-s.off {
		return math.MaxUint64
	}
	return s.off + s.n
}

// startWatch opens the watch of the cache directory; without it write opens
// do not pass through.
func (fs *snfsFS) startWatch() {
	w, err := hsm.Open(fs.cache.DataDir(), pinHandler{fs.FS})
	if err != nil {
		fs.Logger().Info("passthrough writes off", "err", err)
		return
	}
	fs.pin.byIno = map[uint64]*pinnedFile{}
	fs.pin.w = w
	fs.pin.wb = cachedir.NewWriteBehind()
}

// stopWatch ends the watch (at Close, after the last open).
func (fs *snfsFS) stopWatch() {
	if fs.pin.w != nil {
		fs.pin.w.Close()
		fs.pin.wb.Close()
	}
}

// openWatched opens a cache file for passthrough through the watched mount,
// its events ignored.
func (fs *snfsFS) openWatched(path string, flags int) (*os.File, error) {
	w := fs.pin.w
	fd, err := w.OpenFile(path, flags)
	if err != nil {
		return nil, err
	}
	if err := w.Ignore(fd); err != nil {
		fd.Close()
		return nil, err
	}
	return fd, nil
}

// unwatch removes the ignore mark of fd's file (its last passthrough open
// ends: the mark would keep the inode).
func (fs *snfsFS) unwatch(fd *os.File) {
	if err := fs.pin.w.Watch(fd); err != nil {
		fs.Logger().Warn("passthrough: end of watch", "err", err)
	}
}

// pinnedOf returns i's pinned file once its entry is done, or nil.
func (sn *snfsFS) pinnedOf(i *vfs.Inode) *pinnedFile {
	i.Mu.Lock()
	pf := snOf(i).pt.pinned
	i.Mu.Unlock()
	if pf == nil {
		return nil
	}
	pf.mu.Lock()
	defer pf.mu.Unlock()
	if !pf.entered {
		return nil
	}
	return pf
}

// pinEnter starts the pinned mode of i if the kernel reads or writes its
// cache file through watched passthrough opens; the caller then writes all
// of the file back and calls pinEntered. With writers among the opens this
// client is to answer CB_PINNED (pf.holder); with readers only, their
// accesses are refreshed from the server all the same, so that they see
// another client's writes. It returns nil otherwise.
func (fs *snfsFS) pinEnter(i *vfs.Inode) *pinnedFile {
	i.Mu.Lock()
	cf, writers, watched, pf, cred := snOf(i).pt.cf, ptWritersLocked(i), snOf(i).pt.watched, snOf(i).pt.pinned, snOf(i).cred
	i.Mu.Unlock()
	if pf != nil || !watched || cf == nil {
		return nil
	}
	fd, err := cf.OpenData()
	if err != nil {
		fs.Logger().Warn("passthrough: pinned mode", fs.PathAttr(i), "fileid", i.FileID, "err", err)
		return nil
	}
	st, err := fd.Stat()
	if err != nil {
		fd.Close()
		fs.Logger().Warn("passthrough: pinned mode", fs.PathAttr(i), "fileid", i.FileID, "err", err)
		return nil
	}
	pf = &pinnedFile{i: i, ino: fileIno(st), fd: fd, pre: map[int32]span{}, cred: cred, holder: writers > 0}
	fs.pin.mu.Lock()
	fs.pin.byIno[pf.ino] = pf
	fs.pin.mu.Unlock()
	i.Mu.Lock()
	if snOf(i).pt.cf != cf || snOf(i).pt.pinned != nil {
		i.Mu.Unlock()
		fs.pinForget(pf)
		return nil
	}
	snOf(i).pt.pinned = pf
	i.Mu.Unlock()
	// From here on the kernel's accesses stop for the handler (which only
	// records them until pinEntered). Under pf.mu: pf is published, so a
	// release may forget it (pinForget) and close fd meanwhile.
	pf.mu.Lock()
	if !pf.gone {
		if err := fs.pin.w.Watch(fd); err != nil {
			fs.Logger().Warn("passthrough: pinned mode", fs.PathAttr(i), "fileid", i.FileID, "err", err)
		}
		// The pages as they are before the entry's write-back reads them
		// (pinEntered).
		pf.resumLocked(span{0, math.MaxUint64})
	}
	pf.mu.Unlock()
	return pf
}

// pinEntered ends the entry: the whole file was written back. A page counts
// as sent only if it is still as it was before the write-back read it
// (pinEnter): a store through a mapping may have landed in it after the
// write-back's read, and the next scan or refresh (pinnedmap.go) must send
// it, not take it for the server's.
func (fs *snfsFS) pinEntered(pf *pinnedFile) {
	pf.mu.Lock()
	pf.entered = true
	pf.serverSized.Store(len(pf.landed) == 0)
	before := pf.sums.sum
	pf.sums.init()
	pf.sums.sum = map[uint64]uint64{} // same seed: comparable with before
	pf.resumLocked(span{0, math.MaxUint64})
	for p, h := range pf.sums.sum {
		if b, ok := before[p]; !ok || b != h {
			delete(pf.sums.sum, p)
		}
	}
	pf.mu.Unlock()
	if pf.holder {
		fs.stats.Pinned.Add(1)
	}
}

// pinKeepUnsent hands what the kernel wrote to pf's file and was not sent
// (the landed ranges, and the pages stored into through a mapping, when
// the last pinSync failed: a release's send cut short by the mount's end, a
// transport error) to cf as dirty data, before pinForget drops pf: the
// release's CLOSE then says dirty (the server keeps this client pinned,
// docs/protocol.md 10.1), and the next callback or write-back sends them. Only
// those ranges: the rest of the file may hold other clients' older bytes.
func (fs *snfsFS) pinKeepUnsent(pf *pinnedFile, cf *cachedir.File) {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	if pf.gone || cf == nil || len(pf.landed) == 0 && !pf.unsent {
		return
	}
	unsent := append([]span(nil), pf.landed...)
	if pf.unsent {
		pf.sums.init()
		if st, err := pf.fd.Stat(); err == nil {
			pf.hashPagesLocked(0, uint64(st.Size()), func(p, h uint64) {
				if old, ok := pf.sums.sum[p]; !ok || old != h {
					unsent = append(unsent, span{p * pinPage, pinPage})
				}
			})
		}
	}
	st, err := pf.fd.Stat()
	if err != nil {
		fs.Logger().Error("passthrough: unsent writes of the pinned file are lost", fs.PathAttr(pf.i), "fileid", pf.i.FileID, "err", err)
		return
	}
	size := uint64(st.Size())
	buf := make([]byte, 1<<20)
	kept := 0
	for _, r := range unsent {
		for off, end := r.off, min(r.end(), size); off < end; {
			n, _ := pf.fd.ReadAt(buf[:min(uint64(len(buf)), end-off)], int64(off))
			if n == 0 {
				break
			}
			if _, err := cf.WriteAt(buf[:n], int64(off)); err != nil {
				fs.Logger().Error("passthrough: unsent writes of the pinned file are lost", fs.PathAttr(pf.i), "fileid", pf.i.FileID, "err", err)
				return
			}
			kept += n
			off += uint64(n)
		}
	}
	pf.landed = nil
	if kept > 0 {
		fs.Logger().Warn("passthrough: writes of the pinned file not sent at its last close are kept as dirty data", fs.PathAttr(pf.i), "fileid", pf.i.FileID, "bytes", kept)
		fs.markDirty(pf.i)
	}
}

// pinForget drops pf (the last passthrough open of its file ended).
func (fs *snfsFS) pinForget(pf *pinnedFile) {
	fs.pin.mu.Lock()
	if fs.pin.byIno[pf.ino] == pf {
		delete(fs.pin.byIno, pf.ino)
	}
	fs.pin.mu.Unlock()
	pf.mu.Lock()
	pf.gone = true
	pf.fd.Close()
	pf.mu.Unlock()
}

// pinSync sends everything the kernel wrote to pf's file before the call
// (a write-back, a close, an fsync of a pinned file); with full, writes
// through shared mappings too (pinnedmap.go), as a close or an fsync must.
func (fs *snfsFS) pinSync(ctx context.Context, pf *pinnedFile, full bool) error {
	if err := fs.pin.w.Drain(); err != nil {
		fs.Logger().Warn("passthrough: events", "err", err)
	}
	pf.mu.Lock()
	defer pf.mu.Unlock()
	if pf.gone {
		return nil
	}
	err := fs.pinFlushLocked(ctx, pf)
	if err == nil && full {
		err = fs.pinScanLocked(ctx, pf, span{0, math.MaxUint64})
	}
	if err != nil {
		pf.unsent = true
	} else if full {
		pf.unsent = false
	}
	return err
}

// pinSized brings the cache file of a pinned file to a size this client set
// on the server (its passthrough opens read the cache file; what they wrote
// before was sent first, Setattr's write-back).
func (sn *snfsFS) pinSized(pf *pinnedFile, size uint64) {
	fs := sn.FS
	pf.mu.Lock()
	defer pf.mu.Unlock()
	if pf.gone {
		return
	}
	old := size
	if st, err := pf.fd.Stat(); err == nil {
		old = uint64(st.Size())
	}
	if err := pf.fd.Truncate(int64(size)); err != nil {
		fs.Logger().Warn("passthrough: size cache file", fs.PathAttr(pf.i), "fileid", pf.i.FileID, "err", err)
	}
	lo := min(old, size) &^ (pinPage - 1)
	pf.resumLocked(span{lo, max(old, size) - lo})
}

// pinFlushLocked sends the landed ranges (FILE_SYNC).
func (sn *snfsFS) pinFlushLocked(ctx context.Context, pf *pinnedFile) error {
	for len(pf.landed) > 0 {
		r := pf.landed[0]
		if err := sn.pinSendLocked(ctx, pf, r); err != nil {
			return err
		}
		pf.landed = pf.landed[1:]
	}
	pf.serverSized.Store(pf.entered)
	return nil
}

// pinBeforeGetattr sends what the kernel wrote to i's cache file, if it is
// pinned, before a GETATTR (vfs.Ops.BeforeGetattr): the attributes then
// report the server's size (serverSized), which counts this client's
// writes and every other client's since. A failed send leaves the cache
// file's size reported, as before the pinned mode.
func (sn *snfsFS) pinBeforeGetattr(ctx context.Context, i *vfs.Inode) {
	pf := sn.pinnedOf(i)
	if pf == nil {
		return
	}
	if err := sn.pinSync(ctx, pf, false); err != nil {
		sn.Logger().Debug("passthrough: sending writes before GETATTR", sn.PathAttr(i), "fileid", i.FileID, "err", err)
	}
}

// pinSendLocked sends r's bytes of the cache file (up to its end) with
// FILE_SYNC WRITEs, and records their page hashes. A range the server
// refuses is dropped, its error kept for the next close or fsync, as a
// write-back does.
func (fs *snfsFS) pinSendLocked(ctx context.Context, pf *pinnedFile, r span) error {
	i := pf.i
	c := fs.Client(pf.cred)
	buf := make([]byte, fs.WriteSize())
	st, err := pf.fd.Stat()
	if err != nil {
		return fmt.Errorf("passthrough: cache file: %w", err)
	}
	end := min(r.end(), uint64(st.Size()))
	if fs.pinSendFails.Load() && r.off < end {
		return errPinSendTest
	}
	for off := r.off; off < end; {
		n, err := pf.fd.ReadAt(buf[:min(uint64(len(buf)), end-off)], int64(off))
		if n == 0 {
			return fmt.Errorf("passthrough: read cache file at %d: %w", off, err)
		}
		_, err = i.WriteAll(ctx, c, vfs.Extent{Off: off, Data: buf[:n]}, nfs3.FileSync)
		var st nfs3.Status
		if errors.As(err, &st) {
			fs.Logger().Error("write-back failed: the file's unwritten data is lost", fs.PathAttr(i), "fileid", i.FileID, "err", err)
			i.Mu.Lock()
			i.LatchWbErrLocked(err)
			i.Mu.Unlock()
			return nil
		}
		if err != nil {
			return err
		}
		fs.stats.WriteBackBytes.Add(uint64(n))
		pf.sumLocked(off, buf[:n])
		off += uint64(n)
	}
	return nil
}

// errPinSendTest is the failure pinSendFails makes.
var errPinSendTest = errors.New("passthrough: send failed (test)")

// pinRefreshLocked lays the server's bytes of r over the cache file, except
// where the kernel's other accesses in flight may be writing (or landed
// writes wait: a flush that failed). Pages of r this client stored into
// through a shared mapping since they were last sent or refreshed are sent
// first (pinnedmap.go): the refresh would lay the server's older bytes over
// them, and they would be lost, to this client's next read as to the
// server.
//
// An access that starts past the cache file's end refreshes the gap too
// (from the page of that end): another client may have extended the file
// there, and a write landing past the end would otherwise leave the gap a
// hole of zeros that no hash covers, which the next scan (a close, an
// fsync) took for this client's stores and sent over the other client's
// bytes (SQLite's database corrupted: a page of zeros). Where the server's
// file ends before the access, the cache file is extended with zeros to
// the access's start, as the server's will be once a write there lands,
// and their hashes taken.
func (sn *snfsFS) pinRefreshLocked(ctx context.Context, pf *pinnedFile, tid int32, r span) error {
	fs := sn.FS
	access := r
	if st, err := pf.fd.Stat(); err == nil && uint64(st.Size()) < r.off {
		gap := uint64(st.Size()) &^ (pinPage - 1)
		r = span{gap, r.end() - gap}
	}
	if err := sn.pinScanLocked(ctx, pf, r); err != nil {
		return fmt.Errorf("passthrough: sending mapped writes before a refresh: %w", err)
	}
	busy := append([]span(nil), pf.landed...)
	for t, s := range pf.pre {
		if t != tid {
			busy = append(busy, s)
		}
	}
	f := &vfs.File{I: pf.i, Cred: pf.cred}
	serverEnd := uint64(math.MaxUint64) // where a read found the server's end
	for _, s := range subtract(r, busy) {
		buf := make([]byte, min(s.n, 1<<20))
		for off := s.off; off < s.end(); {
			want := buf[:min(uint64(len(buf)), s.end()-off)]
			got, err := fs.ReadServer(ctx, f, off, want)
			if err != nil {
				return err
			}
			if _, err := pf.fd.WriteAt(want[:got], int64(off)); err != nil {
				return fmt.Errorf("passthrough: cache file: %w", err)
			}
			pf.sumLocked(off, want[:got])
			off += uint64(got)
			if got < len(want) {
				serverEnd = min(serverEnd, off)
				// The server's end: a file another client shortened ends
				// there here too, unless this client's writes may be past it.
				if len(busy) == 0 {
					if st, err := pf.fd.Stat(); err == nil && uint64(st.Size()) > off {
						pf.fd.Truncate(int64(off))
						pf.resumLocked(span{off &^ (pinPage - 1), pinPage})
					}
				}
				break
			}
		}
	}
	if access.off > r.off && serverEnd < access.off && len(busy) == 0 {
		// No access in flight can move the end meanwhile: the handler
		// answers one permission event at a time.
		if st, err := pf.fd.Stat(); err == nil && uint64(st.Size()) < access.off {
			if err := pf.fd.Truncate(int64(access.off)); err != nil {
				return fmt.Errorf("passthrough: cache file: %w", err)
			}
			lo := uint64(st.Size()) &^ (pinPage - 1)
			pf.resumLocked(span{lo, access.off - lo})
		}
	}
	return nil
}

// subtract is r without the ranges of busy.
func subtract(r span, busy []span) []span {
	out := []span{r}
	for _, b := range busy {
		var next []span
		for _, s := range out {
			if b.end() <= s.off || b.off >= s.end() {
				next = append(next, s)
				continue
			}
			if b.off > s.off {
				next = append(next, span{s.off, b.off - s.off})
			}
			if b.end() < s.end() {
				next = append(next, span{b.end(), s.end() - b.end()})
			}
		}
		out = next
	}
	return out
}

// pinHandler takes the watcher's events (hsm.Handler).
type pinHandler struct{ fs *vfs.FS }

func (h pinHandler) file(ino uint64) *pinnedFile {
	mgrOf(h.fs).pin.mu.Lock()
	defer mgrOf(h.fs).pin.mu.Unlock()
	return mgrOf(h.fs).pin.byIno[ino]
}

// fileIno is st's inode number.
func fileIno(st os.FileInfo) uint64 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return s.Ino
	}
	return 0
}

// Pre: an access of [off, off+n) by thread tid is about to run. An access
// by a process whose lock on the file was lost is refused (locklost.go).
func (h pinHandler) Pre(ino uint64, tid int32, off, n uint64) syscall.Errno {
	if mgrOf(h.fs).lockLostAccess(ino, tid) {
		return syscall.EIO
	}
	pf := h.file(ino)
	if pf == nil {
		return 0
	}
	pf.mu.Lock()
	defer pf.mu.Unlock()
	r := span{off, n}
	if pf.gone {
		return 0
	}
	if pf.entered {
		ctx, cancel := mgrOf(h.fs).stopCtx(time.Minute) // the application waits
		defer cancel()
		if err := mgrOf(h.fs).pinFlushLocked(ctx, pf); err != nil {
			h.fs.Logger().Warn("passthrough: sending writes", h.fs.PathAttr(pf.i), "fileid", pf.i.FileID, "err", err)
		}
		if err := mgrOf(h.fs).pinRefreshLocked(ctx, pf, tid, r); err != nil {
			h.fs.Logger().Warn("passthrough: refresh", h.fs.PathAttr(pf.i), "fileid", pf.i.FileID, "err", err)
		}
	}
	pf.pre[tid] = r
	return 0
}

// Read: tid's access was a read.
func (h pinHandler) Read(ino uint64, tid int32) {
	if pf := h.file(ino); pf != nil {
		pf.mu.Lock()
		delete(pf.pre, tid)
		pf.mu.Unlock()
	}
}

// Wrote: tid's access was a write, now in the cache file.
func (h pinHandler) Wrote(ino uint64, tid int32) {
	pf := h.file(ino)
	if pf == nil {
		return
	}
	pf.mu.Lock()
	defer pf.mu.Unlock()
	r, ok := pf.pre[tid]
	if !ok {
		r = span{0, math.MaxUint64} // not seen: all of it
	}
	delete(pf.pre, tid)
	pf.landed = append(pf.landed, r)
	pf.serverSized.Store(false)
}
