package vfs

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"snfs/nfs3"
)

// File is one open of a regular file.
type File struct {
	// I, Cred, Write, Appending and Ext are set as the open is made (by
	// the mode's Open or Create), before anyone else has the File, and
	// never change: read without a lock. DirectIO too, except that snfs
	// mode's passthrough open changes it before the open is answered.
	I     *Inode
	Cred  Cred
	Write bool
	// Appending: opened O_APPEND for writing: its appends are placed by the
	// mount (append.go), and its I/O is direct.
	Appending bool
	// DirectIO: the kernel must not cache this open's pages: O_APPEND, or
	// (snfs mode) write-shared, or other opens pass through.
	DirectIO bool
	// Ext is the mode's own state of the open: snfs mode's *snfsFile
	// (snfs.go) for an open of the protocol; nil for the core's opens (nfs
	// mode's, and snfs mode's of what the protocol does not open).
	Ext any
	// wbSeq: the count of the inode's write-back errors this open has
	// reported up to (wberr.go); guarded by I.Mu.
	wbSeq uint64
}

// Direct reports whether the kernel must not cache this open's pages
// (FOPEN_DIRECT_IO).
func (f *File) Direct() bool { return f.DirectIO }

// IsAppend says whether an open with flags writes at the end of file only.
func IsAppend(flags int) bool {
	return flags&syscall.O_APPEND != 0 && flags&syscall.O_ACCMODE != syscall.O_RDONLY
}

// Inode is the file's inode.
func (f *File) Inode() *Inode { return f.I }

// accessBits is what an open with flags needs (ACCESS3 bits).
func accessBits(flags int) uint32 {
	switch flags & syscall.O_ACCMODE {
	case syscall.O_WRONLY:
		return nfs3.AccessModify | nfs3.AccessExtend
	case syscall.O_RDWR:
		return nfs3.AccessRead | nfs3.AccessModify | nfs3.AccessExtend
	}
	return nfs3.AccessRead
}

// Open opens i for flags as c: close-to-open revalidation. One ACCESS call both
// checks the permission and, with its post-op attributes, stands for the
// GETATTR that close-to-open requires. keepCache says whether the kernel may
// keep the pages it has: only when the change attributes are those the cached
// data belongs to (or this client holds unwritten data of its own).
func (fs *FS) Open(ctx context.Context, i *Inode, c Cred, flags int) (f *File, keepCache bool, err error) {
	return fs.ops.Open(ctx, i, c, flags)
}

// Open is FS.Open in nfs mode.
func (o NFSOps) Open(ctx context.Context, i *Inode, c Cred, flags int) (f *File, keepCache bool, err error) {
	fs := o.FS
	if ChangesFile(flags) {
		if err := fs.RefuseChange(); err != nil {
			return nil, false, err
		}
	}
	want := accessBits(flags)
	var res *nfs3.AccessRes
	start := fs.AttrStart()
	res, err = RPC(ctx, fs, func() (*nfs3.AccessRes, error) { return fs.Client(c).Access(ctx, i.FH, want) })
	if err != nil {
		if res != nil && res.Attr != nil {
			i.Mu.Lock()
			i.PostOpLocked(res.Attr, start, o.FS.Now())
			i.Mu.Unlock()
		}
		return nil, false, err
	}
	if res.Access&want != want {
		return nil, false, nfs3.ErrAcces
	}
	a := res.Attr
	if a == nil {
		if a, err = fs.GetattrFH(ctx, c, i.FH); err != nil {
			return nil, false, err
		}
	}
	i.Mu.Lock()
	defer i.Mu.Unlock()
	i.PostOpLocked(a, start, o.FS.Now())
	now := changeOf(&i.Attr) // a, unless a reply to a change of this client's came meanwhile
	keepCache = i.cachedOK && now == i.cached || i.WState.Pending()
	if !i.WState.Pending() {
		i.cached, i.cachedOK, i.pairs = now, true, nil
	}
	i.Opens++
	f = &File{I: i, Cred: c, Write: flags&syscall.O_ACCMODE != syscall.O_RDONLY, Appending: IsAppend(flags)}
	f.DirectIO = f.Appending
	f.wbSeq = i.sampleWbErrLocked() // wberr.go
	return f, keepCache, nil
}

// Read reads into buf at off: from the server, with this client's unwritten
// bytes laid over. It returns fewer bytes only at the end of the file.
func (fs *FS) Read(ctx context.Context, f *File, off uint64, buf []byte) (int, error) {
	return fs.ops.Read(ctx, f, off, buf)
}

// Read is FS.Read in nfs mode.
func (o NFSOps) Read(ctx context.Context, f *File, off uint64, buf []byte) (int, error) {
	fs := o.FS
	if err := fs.LockCheck(ctx, f); err != nil {
		return 0, err // its lock was lost (locklost.go)
	}
	return fs.ReadCore(ctx, f, off, buf)
}

// ReadCore is nfs mode's read of an open file (also snfs mode's of a file
// the protocol did not open).
func (fs *FS) ReadCore(ctx context.Context, f *File, off uint64, buf []byte) (int, error) {
	i := f.I
	i.Mu.Lock()
	size := i.ReportLocked().Size
	i.Mu.Unlock()
	if off >= size {
		return 0, nil
	}
	buf = buf[:min(uint64(len(buf)), size-off)]
	if _, _, err := fs.ReadOverlaid(ctx, f, off, buf); err != nil {
		return 0, err
	}
	return len(buf), nil
}

// ReadOverlaid reads buf at off from the server (readServer) and lays this
// client's unwritten bytes over it; it returns how many bytes the server had
// and the end of the unwritten bytes (0: none). A READ the server answered
// before a WRITE of bytes that have left the overlay since (a flush that
// committed them ran meanwhile) lacks them: when that may have happened, the
// read is done again with flushMu held, so that no flush runs in between.
func (fs *FS) ReadOverlaid(ctx context.Context, f *File, off uint64, buf []byte) (got int, end uint64, err error) {
	i := f.I
	for try := 0; ; try++ {
		if try > 0 {
			i.FlushMu.Lock()
		}
		i.Mu.Lock()
		gen := i.WState.gen
		i.Mu.Unlock()
		clear(buf)
		got, err = fs.ReadServer(ctx, f, off, buf)
		if fs.AfterRead != nil && try == 0 {
			fs.AfterRead()
		}
		i.Mu.Lock()
		if err == nil && i.WState.gen != gen && try == 0 {
			i.Mu.Unlock()
			continue
		}
		if err == nil {
			if i.WState.Pending() {
				end = i.WState.end()
			}
			i.WState.overlay(off, buf)
		}
		i.Mu.Unlock()
		if try > 0 {
			i.FlushMu.Unlock()
		}
		return got, end, err
	}
}

// ReadServer fills buf from the server's copy of f at off with READs of at
// most rsize, up to the server's end of file, and returns how many bytes it
// read; each reply's attributes go to the inode's cache (unless a modifying
// reply came since that READ began).
func (fs *FS) ReadServer(ctx context.Context, f *File, off uint64, buf []byte) (int, error) {
	i := f.I
	c := fs.Client(f.Cred)
	got := 0
	for got < len(buf) {
		n := min(len(buf)-got, int(fs.rsize))
		start := fs.AttrStart()
		res, err := RPC(ctx, fs, func() (*nfs3.ReadRes, error) { return c.Read(ctx, i.FH, off+uint64(got), uint32(n)) })
		if res != nil && res.Attr != nil {
			i.Mu.Lock()
			i.PostOpLocked(res.Attr, start, fs.Now())
			i.Mu.Unlock()
		}
		if err != nil {
			return got, fmt.Errorf("READ: %w", err)
		}
		copy(buf[got:], res.Data)
		got += len(res.Data)
		if res.EOF || len(res.Data) == 0 {
			break
		}
	}
	return got, nil
}

// unstableFactor times the dirty limit is how much sent but uncommitted data
// one file may keep in memory.
const unstableFactor = 4

// Write takes data at off into the file's dirty data; it is written back on
// close, fsync, or once more than the dirty limit waits (then without a
// COMMIT, until unstableFactor times the limit is uncommitted).
func (fs *FS) Write(ctx context.Context, f *File, off uint64, data []byte) (int, error) {
	return fs.ops.Write(ctx, f, off, data)
}

// Write is FS.Write in nfs mode.
func (o NFSOps) Write(ctx context.Context, f *File, off uint64, data []byte) (int, error) {
	if err := o.FS.WriteCheck(ctx, f); err != nil {
		return 0, err
	}
	_, n, err := o.FS.Buffered(ctx, f, off, data, false)
	return n, err
}

// WriteCheck refuses a write on a read-only mount or by an open whose lock
// was lost (locklost.go).
func (fs *FS) WriteCheck(ctx context.Context, f *File) error {
	if err := fs.RefuseChange(); err != nil {
		return err
	}
	return fs.LockCheck(ctx, f)
}

// Buffered takes data into the file's dirty data, at off or, if atEnd, at
// the file's size as this client knows it (the server's last reported size
// with this client's unwritten data applied), decided under the same lock
// as the write; it returns where the data went.
//
// When the file's dirty data has reached the limit, it is sent first, before
// this write's data is taken: a flush that ctx cancels (the application got
// a signal: a FUSE interrupt) then returns the error with none of this
// write's data taken, so a write that reports EINTR wrote nothing (the data
// sent but not acknowledged stays dirty, the flush's own rule). Taking the
// data first and flushing after would leave an interrupted write's data
// queued for the server while the application was told it failed.
func (fs *FS) Buffered(ctx context.Context, f *File, off uint64, data []byte, atEnd bool) (uint64, int, error) {
	i := f.I
	i.Mu.Lock()
	dirty := i.WState.Dirty.bytes()
	unstable := 0
	for _, s := range i.WState.Unstable {
		unstable += len(s.Data)
	}
	i.Mu.Unlock()
	if dirty >= fs.Cfg.DirtyLimit {
		// Send it; commit (and free it) only once a few times that much
		// waits for a COMMIT, so that the server flushes in large steps.
		if err := i.Flush(ctx, unstable+dirty >= unstableFactor*fs.Cfg.DirtyLimit); err != nil {
			return off, 0, err
		}
	}
	if err := ctx.Err(); err != nil {
		return off, 0, err // interrupted: nothing taken
	}
	i.Mu.Lock()
	if atEnd {
		off = i.ReportLocked().Size
	}
	i.WState.Dirty.Write(off, data)
	i.WState.Cred = f.Cred
	i.WState.Mtime = time.Now()
	i.Mu.Unlock()
	return off, len(data), nil
}

// Flush is close(2) (the kernel's FLUSH, sent for every close of a
// descriptor): everything written is sent and committed (close-to-open).
func (fs *FS) Flush(ctx context.Context, f *File) error { return fs.ops.Flush(ctx, f) }

// Flush is FS.Flush in nfs mode: the error of its own write-back, or one
// that an earlier write-back of the file latched since f was opened
// (wberr.go: a forked child's close may have run that write-back).
func (o NFSOps) Flush(ctx context.Context, f *File) error {
	return f.ReportWbErr(f.I.Flush(ctx, true), false)
}

// Fsync writes back and commits the file's data.
func (fs *FS) Fsync(ctx context.Context, f *File) error { return fs.ops.Fsync(ctx, f) }

// Fsync is FS.Fsync in nfs mode: as Flush, and what it returns is not
// returned again to this open (wberr.go).
func (o NFSOps) Fsync(ctx context.Context, f *File) error {
	return f.ReportWbErr(f.I.Flush(ctx, true), true)
}

// Release is the last close of one open: data still unwritten (from a shared
// mapping written after close) is written back, and a file removed while open
// loses its hidden name at its last release.
func (fs *FS) Release(ctx context.Context, f *File) error { return fs.ops.Release(ctx, f) }

// Release is FS.Release in nfs mode.
func (o NFSOps) Release(ctx context.Context, f *File) error {
	o.FS.DropHeld(f.I, f, 0)
	return o.FS.ReleaseCore(ctx, f)
}

// ReleaseCore is nfs mode's release of an open file (also snfs mode's of a
// file the protocol did not open).
func (fs *FS) ReleaseCore(ctx context.Context, f *File) error {
	i := f.I
	var err error
	i.Mu.Lock()
	pending := i.WState.Pending()
	i.Mu.Unlock()
	if pending {
		err = i.Flush(ctx, true)
	}
	fs.DropOpen(ctx, f)
	return err
}

// DropOpen counts one open of f's inode fewer; the last one's release
// removes the hidden name a removal while open gave it (silly rename).
func (fs *FS) DropOpen(ctx context.Context, f *File) {
	i := f.I
	i.Mu.Lock()
	i.Opens--
	last := i.Opens == 0
	dir, name := i.SillyDir, i.SillyName
	if last {
		i.SillyDir, i.SillyName = nil, ""
	}
	i.Mu.Unlock()
	if last && name != "" {
		fs.RemoveHidden(ctx, f.Cred, i, dir, name)
	}
}

// RemoveHidden removes the hidden name sillyRename gave i, at its last
// close: the link it stood for is now gone on the server too, so the link
// count i reports is the server's again.
func (fs *FS) RemoveHidden(ctx context.Context, c Cred, i *Inode, dir nfs3.FH, name string) {
	res, rerr := RPC(ctx, fs, func() (*nfs3.WccRes, error) { return fs.Client(c).Remove(ctx, dir, name) })
	if rerr != nil {
		fs.log.Warn("removing a file removed while open", "name", name, "err", rerr)
	}
	if d := fs.LookupInode(dir); d != nil {
		if res != nil {
			fs.dirWcc(d, &res.Wcc)
		}
		fs.ops.DirChanged(d, name, nil, rerr)
	}
	i.Mu.Lock()
	if i.nlinkDrop > 0 {
		i.nlinkDrop--
	}
	i.InvalidateLocked()
	i.Mu.Unlock()
	fs.countHidden(dir, -1)
	fs.hiddenGone.Add(1)
}

func (fs *FS) LookupInode(fh nfs3.FH) *Inode {
	fs.Mu.Lock()
	defer fs.Mu.Unlock()
	return fs.Inodes[string(fh)]
}
