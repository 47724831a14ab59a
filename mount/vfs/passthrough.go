package vfs

import (
	"os"
	"syscall"

	"snfs/mount/cachedir"
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
//   - Only reads. A write through passthrough bypasses the mount: it could not
//     write it through to the server once the file becomes write-shared
//     (another client opens it while this open lasts; the kernel cannot take
//     a passthrough back), so the other client would not see it, breaking
//     concurrent write sharing. Write opens go through the mount, into the
//     cache file as dirty data, as before; a passthrough reader of the same
//     file sees them at once (they are the same local file).
//   - Kernel I/O modes. Linux refuses to mix, on one inode, passthrough opens
//     with opens whose pages it caches. While a file has passthrough opens,
//     every other open of it is FOPEN_DIRECT_IO (served by the mount, from the
//     same cache file); while it has cached-page opens, no open passes
//     through. All passthrough opens of a file share one cache file.
//   - The cache file is pinned (cachedir.File.Pin) while a passthrough open
//     lasts: it is not evicted, and an invalidation forgets its clean data
//     without punching holes in it, so the kernel never reads zeros.
//   - Invalidation while a passthrough open lasts. The server calls back when
//     another client opens the file for writing (it becomes write-shared);
//     the kernel keeps reading the pinned file through the opens it already
//     has, which hold the data as of the callback (the server delays the
//     other client's OPEN until the callback is answered, so nothing the other
//     client writes is older). Later writes of the other client are not seen
//     by those opens until they are reopened; opens made after the callback
//     are direct and read the server. This is the limit the kernel's own page
//     cache already has for a handle opened while the file was cacheable
//     (docs/mount.md), made visible at once rather than after a refill.
//     Writes this client makes meanwhile through another (direct) open are
//     also written into the pinned file, so that its own passthrough readers
//     see them.

// passthroughState is an inode's kernel I/O mode bookkeeping; guarded by
// the Inode's mu.
type passthroughState struct {
	cf     *cachedir.File // the pinned cache file the passthrough opens read; nil: none
	fd     *os.File       // a descriptor of it for writes made through the mount while it is pinned
	opens  int            // passthrough opens
	cached int            // opens the kernel caches pages for (neither direct nor passthrough)
}

// EnablePassthrough lets snfs mode hand cache files to the kernel (the
// bridge calls it once the kernel agreed to FUSE passthrough).
func (fs *FS) EnablePassthrough() {
	if fs.sn != nil {
		fs.sn.passthrough.Store(true)
	}
}

// PassthroughFile is the descriptor the kernel should read this open from
// (FUSE passthrough), or nil.
func (f *File) PassthroughFile() *os.File { return f.sn.pt }

// snfsIOMode decides how the kernel does this open's I/O: passthrough, its
// page cache, or direct (through the mount every time).
func (fs *FS) snfsIOMode(f *File, flags int) {
	if f.sn.direct {
		return
	}
	if flags&syscall.O_ACCMODE == syscall.O_RDONLY && fs.sn.passthrough.Load() && fs.snfsPassthrough(f) {
		return
	}
	i := f.i
	i.mu.Lock()
	if i.sn.pt.opens > 0 {
		f.sn.direct = true
		i.sn.kernVer = 0 // the kernel's pages miss what this open writes
	} else {
		f.sn.cachedIO = true
		i.sn.pt.cached++
	}
	i.mu.Unlock()
}

// snfsPassthrough makes f a passthrough open if the file allows it now.
func (fs *FS) snfsPassthrough(f *File) bool {
	i := f.i
	allowed := func(cf *cachedir.File) bool {
		return i.sn.caching && cf != nil && i.sn.cf == cf && i.sn.pt.cached == 0 &&
			(i.sn.pt.opens == 0 || i.sn.pt.cf == cf)
	}
	i.mu.Lock()
	cf := i.sn.cf
	ok := allowed(cf)
	i.mu.Unlock()
	if !ok {
		return false
	}
	fd, ok, err := cf.Pin()
	if err != nil {
		fs.log.Debug("passthrough: cache file", "fileid", i.FileID, "err", err)
	}
	if !ok {
		return false
	}
	i.mu.Lock()
	if !allowed(cf) {
		// A callback or another open came in between.
		i.mu.Unlock()
		cf.Unpin()
		fd.Close()
		return false
	}
	if i.sn.pt.opens == 0 {
		i.sn.pt.cf = cf
	}
	i.sn.pt.opens++
	i.mu.Unlock()
	f.sn.pt, f.sn.ptCF = fd, cf
	fs.sn.stats.PassthroughOpens.Add(1)
	return true
}

// snfsIOEnd undoes snfsIOMode at the open's release.
func (fs *FS) snfsIOEnd(f *File) {
	i := f.i
	var wfd *os.File
	i.mu.Lock()
	if f.sn.cachedIO {
		i.sn.pt.cached--
		f.sn.cachedIO = false
	}
	if f.sn.pt != nil {
		i.sn.pt.opens--
		if i.sn.pt.opens == 0 {
			wfd = i.sn.pt.fd
			i.sn.pt.cf, i.sn.pt.fd = nil, nil
		}
	}
	i.mu.Unlock()
	if wfd != nil {
		wfd.Close()
	}
	if f.sn.pt != nil {
		f.sn.ptCF.Unpin()
		f.sn.pt.Close()
		f.sn.pt, f.sn.ptCF = nil, nil
	}
}

// snfsPinnedWrite lays a write made through to the server (the file is no
// longer cached) over the pinned cache file that passthrough opens read, so
// that this client's readers see its own writes. The bytes are claimed by no
// cache range (the invalidation dropped them): the cache directory's
// bookkeeping is not touched.
func (fs *FS) snfsPinnedWrite(i *Inode, off uint64, data []byte) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.sn.pt.opens == 0 || i.sn.pt.cf == nil {
		return
	}
	if i.sn.pt.fd == nil {
		fd, err := i.sn.pt.cf.OpenData()
		if err != nil {
			fs.log.Warn("passthrough: cache file", "fileid", i.FileID, "err", err)
			return
		}
		i.sn.pt.fd = fd
	}
	if _, err := i.sn.pt.fd.WriteAt(data, int64(off)); err != nil {
		fs.log.Warn("passthrough: cache file", "fileid", i.FileID, "err", err)
	}
}
