package cachemgr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"snfs/mount/vfs"
	"snfs/nfs3"

	"golang.org/x/sys/unix"
)

// The data of regular files made while disconnected (offline.go): a plain
// file CACHEDIR/offline/ID per provisional id, written by the file's opens
// while its object is not on the server, made durable (fdatasync, with the
// log's records) at each close and fsync, as a cached file's data is (the
// log alone while nothing was written into it: offSync). Once
// a reintegration made the object on the server, its data is written to
// it (FILE_SYNC WRITEs, pushOffData) before the reintegration's results are
// taken in, and the file is removed; an open that is still open then goes
// on on the real file (opened as it was). A CREATE the server refuses
// (another client made the name meanwhile) keeps the data as a conflict
// copy beside the name (offlineConflictCopy). A mount killed offline finds
// the files again (loadOffData) and pushes them after reintegrating its log.

// offDataDir is the directory of the offline data files.
func (p *permits) offDataDir() string { return filepath.Join(p.sn.cfg.CacheDir, "offline") }

// offData is the offline data of one file made offline.
type offData struct {
	id   uint64
	path string
	mu   sync.Mutex
	f    *os.File // open while any open of the file uses it
	refs int
	// pushed: the data is on the server (or in a conflict copy, or the
	// file is gone): opens use the real file.
	pushed bool
	// timed: a times file may be beside the data (offlinesetattr.go).
	timed bool
	// stored: the LSN of the CML_STORE record that carries the data as it
	// is (permitstore.go; 0: none): dropped by any change of the data.
	stored uint64
	// changed: the data file may hold bytes: written or truncated since
	// newOffData made it empty, or left by an earlier mount (loadOffData).
	// Until then a close or an fsync flushes the log alone (offSync).
	changed bool
}

// newOffData makes id's empty data file.
func (p *permits) newOffData(id uint64) error {
	if err := os.MkdirAll(p.offDataDir(), 0o700); err != nil {
		return err
	}
	od := &offData{id: id, path: filepath.Join(p.offDataDir(), strconv.FormatUint(id, 10))}
	// Kept open for the open that follows (a CREATE's), closed when no
	// open uses it (offRelease, dropOffData, the push).
	f, err := openDataFile(od.path, os.O_RDWR|os.O_CREATE|os.O_TRUNC)
	if err != nil {
		return err
	}
	od.f = f
	p.off.mu.Lock()
	if p.off.data == nil {
		p.off.data = map[uint64]*offData{}
	}
	p.off.data[id] = od
	p.off.mu.Unlock()
	return nil
}

// loadOffData finds the data files a killed mount left.
func (p *permits) loadOffData() {
	ents, err := os.ReadDir(p.offDataDir())
	if err != nil {
		return
	}
	p.off.mu.Lock()
	defer p.off.mu.Unlock()
	for _, e := range ents {
		id, err := strconv.ParseUint(e.Name(), 10, 64)
		if err != nil {
			continue
		}
		if p.off.data == nil {
			p.off.data = map[uint64]*offData{}
		}
		p.off.data[id] = &offData{id: id, path: filepath.Join(p.offDataDir(), e.Name()), timed: true, changed: true}
	}
}

// offDataOf is id's offline data (nil: none).
func (p *permits) offDataOf(id uint64) *offData {
	p.off.mu.Lock()
	defer p.off.mu.Unlock()
	return p.off.data[id]
}

// offDataPending returns the bytes and the count of the data files not yet
// on the server (neither pushed nor dropped): data written on the mount and
// not stably on the server, which Status counts as dirty as it counts the
// cache directory's dirty ranges.
func (p *permits) offDataPending() (n int64, files int) {
	p.off.mu.Lock()
	ods := make([]*offData, 0, len(p.off.data))
	for _, od := range p.off.data {
		ods = append(ods, od)
	}
	p.off.mu.Unlock()
	for _, od := range ods {
		od.mu.Lock()
		pushed := od.pushed
		od.mu.Unlock()
		if pushed {
			continue
		}
		files++
		// Gone meanwhile (pushed and removed): counted as empty.
		if fi, err := os.Stat(od.path); err == nil {
			n += fi.Size()
		}
	}
	return n, files
}

// dropOffData forgets id's data: its file will never be on the server.
func (p *permits) dropOffData(id uint64) {
	p.off.mu.Lock()
	od := p.off.data[id]
	delete(p.off.data, id)
	p.off.mu.Unlock()
	if od == nil {
		return
	}
	od.mu.Lock()
	od.pushed = true
	od.dropTimes() // od.mu held, as it wants
	if od.refs == 0 && od.f != nil {
		od.f.Close()
		od.f = nil
	}
	od.mu.Unlock()
	os.Remove(od.path)
}

// openDataFile opens a data file with open(2) alone: os.OpenFile would
// also try to register it with the runtime's poller, which a regular file
// refuses, at a cost of several system calls per file made.
func openDataFile(path string, flags int) (*os.File, error) {
	fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// offFile is an open (File.Ext) of a file made offline.
type offFile struct {
	od    *offData
	flags int
	mu    sync.Mutex
	real  *vfs.File // once pushed: the real file's open
	// flushed: a close of it was seen; released closed at its RELEASE.
	flushed  bool
	released chan struct{}
}

func offOf(f *vfs.File) *offFile {
	of, _ := f.Ext.(*offFile)
	return of
}

// offlineOpenFile opens i, a file made offline, on its offline data.
func (sn *snfsFS) offlineOpenFile(i *vfs.Inode, c vfs.Cred, flags int) (*vfs.File, error) {
	p := sn.permits
	o, ok := p.made.of(i.FH)
	if !ok || !o.live {
		return nil, ErrDisconnected
	}
	od := p.offDataOf(o.id)
	if od == nil {
		return nil, ErrDisconnected
	}
	od.mu.Lock()
	defer od.mu.Unlock()
	if od.pushed {
		return nil, ErrDisconnected
	}
	if od.f == nil {
		f, err := openDataFile(od.path, os.O_RDWR)
		if err != nil {
			return nil, fmt.Errorf("offline data: %w", err)
		}
		od.f = f
	}
	if flags&syscall.O_TRUNC != 0 && flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		od.changed = true
		if err := od.f.Truncate(0); err != nil {
			return nil, err
		}
		sn.offSized(i, 0, true)
		od.dropTimes()
	}
	od.refs++
	i.Mu.Lock()
	i.Opens++
	i.Mu.Unlock()
	of := &offFile{od: od, flags: flags &^ (syscall.O_CREAT | syscall.O_EXCL | syscall.O_TRUNC), released: make(chan struct{})}
	sn.offOpens.Lock()
	if sn.offOpens.m == nil {
		sn.offOpens.m = map[string]map[*offFile]bool{}
	}
	if sn.offOpens.m[string(i.FH)] == nil {
		sn.offOpens.m[string(i.FH)] = map[*offFile]bool{}
	}
	sn.offOpens.m[string(i.FH)][of] = true
	sn.offOpens.Unlock()
	app := vfs.IsAppend(flags)
	return &vfs.File{I: i, Cred: c, Write: flags&syscall.O_ACCMODE != syscall.O_RDONLY, Appending: app, DirectIO: app, Ext: of}, nil
}

// offOpenSet: the opens not released of files made offline, by inode
// handle.
type offOpenSet struct {
	sync.Mutex
	m map[string]map[*offFile]bool
}

// offReleaseWait bounds waitOffRelease. The kernel sends a RELEASE after
// the close(2) that ends an open, without waiting for it, and a loaded
// machine can deliver it well after the application's next call: an
// unlink or a rename over the file right after its close, offline, would
// find it open and fail with EHOSTDOWN (there is no server to hide it
// behind, as online), where online it only costs a RENAME through the
// server (provReleaseWait). So offline the wait is longer; a descriptor
// still open whose copy was closed (a dup, a fork) costs the change this
// much.
const offReleaseWait = 5 * time.Second

// waitOffRelease waits, for an unlink of i or a rename over it offline, for
// the RELEASE of every open of i whose close was seen, at most
// offReleaseWait: not at all if one of i's opens has not seen a close (the
// file is open). Every open, not only the latest: an open's RELEASE can
// come after the next open of the file (a file written, closed and read
// back at once).
func (sn *snfsFS) waitOffRelease(ctx context.Context, i *vfs.Inode) {
	t := time.NewTimer(offReleaseWait)
	defer t.Stop()
	for first := true; ; first = false {
		sn.offOpens.Lock()
		var wait *offFile
		n := len(sn.offOpens.m[string(i.FH)])
		for of := range sn.offOpens.m[string(i.FH)] {
			of.mu.Lock()
			flushed := of.flushed
			of.mu.Unlock()
			if !flushed {
				sn.offOpens.Unlock()
				return
			}
			wait = of
		}
		sn.offOpens.Unlock()
		if n == 0 {
			if first {
				sn.waitProvRelease(ctx, i) // an open made before going offline
			}
			return
		}
		select {
		case <-wait.released:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// offSized records size (and the time) in i's attributes: written or
// truncated (exact) or extended.
func (sn *snfsFS) offSized(i *vfs.Inode, size uint64, exact bool) {
	now := vfs.NFSTime(time.Now())
	i.Mu.Lock()
	if exact || size > i.Attr.Size {
		// Used as a file system of 4 KiB blocks (the usual export's) will
		// count it once the data is there: the blocks a stat shows do not
		// change when the file reaches the server.
		i.Attr.Size, i.Attr.Used = size, (size+4095)&^4095
	}
	i.Attr.Mtime, i.Attr.Ctime = now, now
	i.Mu.Unlock()
}

// offReal is the real open behind of once its data was pushed.
func (sn *snfsFS) offReal(ctx context.Context, f *vfs.File, of *offFile) (*vfs.File, error) {
	of.mu.Lock()
	defer of.mu.Unlock()
	if of.real != nil {
		return of.real, nil
	}
	ri, err := sn.Resolve(ctx, f.I, false)
	if err != nil {
		return nil, err
	}
	rf, _, err := sn.Open(ctx, ri, f.Cred, of.flags)
	if err != nil {
		return nil, err
	}
	of.real = rf
	return rf, nil
}

// offRead is Read of of.
func (sn *snfsFS) offRead(ctx context.Context, f *vfs.File, of *offFile, off uint64, buf []byte) (int, error) {
	od := of.od
	od.mu.Lock()
	if !od.pushed {
		defer od.mu.Unlock()
		n, err := od.f.ReadAt(buf, int64(off))
		if errors.Is(err, io.EOF) {
			err = nil
		}
		return n, err
	}
	od.mu.Unlock()
	rf, err := sn.offReal(ctx, f, of)
	if err != nil {
		return 0, err
	}
	return sn.Read(ctx, rf, off, buf)
}

// offWrite is Write (append: Append, at the end) of of.
func (sn *snfsFS) offWrite(ctx context.Context, f *vfs.File, of *offFile, off uint64, data []byte, app bool) (uint64, int, error) {
	od := of.od
	od.mu.Lock()
	if !od.pushed {
		defer od.mu.Unlock()
		if app {
			f.I.Mu.Lock()
			off = f.I.Attr.Size
			f.I.Mu.Unlock()
		}
		if len(data) > 0 {
			od.changed = true // even if it fails: it may have written some
		}
		n, err := od.f.WriteAt(data, int64(off))
		if n > 0 {
			sn.offSized(f.I, off+uint64(n), false)
			od.dropTimes()
		}
		return off, n, localDataErr(err)
	}
	od.mu.Unlock()
	rf, err := sn.offReal(ctx, f, of)
	if err != nil {
		return 0, 0, err
	}
	if app {
		return sn.Append(ctx, rf, data)
	}
	n, err := sn.Write(ctx, rf, off, data)
	return off, n, err
}

// offSync makes of's data and the log's records durable (close, fsync);
// flush marks a close.
func (sn *snfsFS) offSync(ctx context.Context, f *vfs.File, of *offFile, close bool) error {
	if close {
		of.mu.Lock()
		of.flushed = true
		of.mu.Unlock()
	}
	od := of.od
	od.mu.Lock()
	if !od.pushed && !od.changed {
		// Nothing was ever written to the data file: the file's data is
		// empty, which the log's records alone say (a restart that finds
		// no data file for a file the log made knows no local data of it
		// and the server's CREATE makes it empty), so neither the data
		// file nor its name needs flushing, only the log.
		od.mu.Unlock()
		return sn.permits.syncLog()
	}
	if !od.pushed {
		// The data, the data file's name and the log's records go to
		// disk at once: one journal commit can serve the three where
		// one after the other would wait for three (any of them may
		// reach the disk before the others either way: an unsynced
		// write can be written back at any time).
		var dirErr, logErr error
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); dirErr = syncDirOf(od.path) }()
		go func() { defer wg.Done(); logErr = sn.permits.syncLog() }()
		err := syncDataFile(od.f)
		od.mu.Unlock()
		wg.Wait()
		return errors.Join(err, dirErr, logErr)
	}
	od.mu.Unlock()
	of.mu.Lock()
	rf := of.real
	of.mu.Unlock()
	if rf == nil {
		return nil
	}
	if close {
		return sn.Flush(ctx, rf)
	}
	return sn.Fsync(ctx, rf)
}

// syncDataFile flushes a data file (a variable: tests count the flushes).
var syncDataFile = (*os.File).Sync

// syncDirOf flushes the directory of path (a new data file's name).
func syncDirOf(path string) error {
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// offRelease ends the open f of a file made offline.
func (sn *snfsFS) offRelease(ctx context.Context, f *vfs.File, of *offFile) error {
	of.mu.Lock()
	rf := of.real
	of.mu.Unlock()
	var err error
	if rf != nil {
		err = sn.Release(ctx, rf)
	}
	od := of.od
	od.mu.Lock()
	if od.refs--; od.refs == 0 && od.f != nil {
		od.f.Close()
		od.f = nil
	}
	od.mu.Unlock()
	// Removed while open (through the server, online: permitdata.go):
	// the hidden name goes at the last release, as provRelease's.
	sn.FS.DropOpen(ctx, f)
	i := f.I
	sn.offOpens.Lock()
	if set := sn.offOpens.m[string(i.FH)]; set != nil {
		delete(set, of)
		if len(set) == 0 {
			delete(sn.offOpens.m, string(i.FH))
		}
	}
	sn.offOpens.Unlock()
	close(of.released)
	return err
}

// localDataErr is err of a write or truncation of a file's local data as
// the server's would have been: the sizes and the space the local file
// system refuses are the application's errors (EFBIG, ENOSPC, EDQUOT), not
// an EIO (the bridge makes any error without an NFS status EIO).
func localDataErr(err error) error {
	for _, m := range []struct {
		errno syscall.Errno
		st    nfs3.Status
	}{{syscall.EFBIG, nfs3.ErrFBig}, {syscall.ENOSPC, nfs3.ErrNoSpc}, {syscall.EDQUOT, nfs3.ErrDQuot}} {
		if errors.Is(err, m.errno) {
			return fmt.Errorf("the local data of a file made locally: %w (%w)", m.st, err)
		}
	}
	return err
}

// offTruncate is a SETATTR of the size of a file made offline whose data
// is not pushed (done false otherwise).
func (sn *snfsFS) offTruncate(i *vfs.Inode, s vfs.SetAttr) (nfs3.Fattr, bool, error) {
	p := sn.permits
	if p == nil || s.Size == nil || s.Mode != nil || s.UID != nil || s.GID != nil || s.Atime != nil || s.Mtime != nil {
		return nfs3.Fattr{}, false, nil
	}
	o, ok := p.made.of(i.FH)
	if !ok || !o.live {
		return nfs3.Fattr{}, false, nil
	}
	od := p.offDataOf(o.id)
	if od == nil {
		return nfs3.Fattr{}, false, nil
	}
	od.mu.Lock()
	defer od.mu.Unlock()
	if od.pushed {
		return nfs3.Fattr{}, false, nil
	}
	od.changed = true
	if err := os.Truncate(od.path, int64(*s.Size)); err != nil {
		return nfs3.Fattr{}, true, localDataErr(err)
	}
	sn.offSized(i, *s.Size, true)
	od.dropTimes()
	i.Mu.Lock()
	a := i.ReportLocked()
	i.Mu.Unlock()
	return a, true, nil
}
