package cachemgr

import (
	"context"
	"sync"
	"syscall"
	"time"

	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/state"
)

// Regular files made locally under a write-back permit (permitmake.go's
// provisional objects): CREATE logged, the new file open for its creator
// with a provisional open (provFile) that holds no data. Closing it, and
// removing it once closed (LocalRemove: the optimiser cancels the pair),
// cost no call. The first operation that needs the file's data or the
// server (a write, an append, an allocation, an fsync, a lock; a read once
// the object is no longer live) resolves it: the log is reintegrated (the
// server makes the file, and records this client as its closed dirty
// holder: docs/protocol.md section 21.3), the real file is opened with the
// creator's flags, and this open's operations go to that open from then on.
// Until then the file is empty: a read returns nothing.

// provFile is a provisional open (File.Ext): the only open of its
// provisional inode (another open of the name resolves it first).
type provFile struct {
	flags int
	mu    sync.Mutex
	real  *vfs.File // the real file's open, once resolved
	// flushed: a close(2) of a descriptor of it was seen (FLUSH);
	// released is closed at its RELEASE.
	flushed  bool
	released chan struct{}
}

// provReleaseWait bounds how long an unlink of a file made locally waits
// for the RELEASE of its open after a close was seen: the kernel sends
// RELEASE after close(2) returns, without waiting, so a create, close and
// unlink may find the open not yet released (an unlink then goes through
// the server: a removed open file is hidden by a RENAME). A descriptor that
// is still open (a dup, a fork) costs the unlink this much.
const provReleaseWait = 50 * time.Millisecond

// waitProvRelease waits, for an unlink of i (a provisional inode, open),
// for its open's RELEASE if a close of it was seen, at most provReleaseWait.
func (sn *snfsFS) waitProvRelease(ctx context.Context, i *vfs.Inode) {
	sn.provOpens.Lock()
	pf := sn.provOpens.m[string(i.FH)]
	sn.provOpens.Unlock()
	if pf == nil {
		return
	}
	pf.mu.Lock()
	flushed := pf.flushed
	pf.mu.Unlock()
	if !flushed {
		return
	}
	t := time.NewTimer(provReleaseWait)
	defer t.Stop()
	select {
	case <-pf.released:
	case <-t.C:
	case <-ctx.Done():
	}
}

// provOpenSet is the provisional opens not released, by inode handle.
type provOpenSet struct {
	sync.Mutex
	m map[string]*provFile
}

// provOf is f's provisional open, if it is one.
func provOf(f *vfs.File) *provFile {
	pf, _ := f.Ext.(*provFile)
	return pf
}

// localCreate makes name in dir locally (localMake) and opens it as a
// provisional open; done false: the core's CREATE.
func (sn *snfsFS) localCreate(ctx context.Context, dir *vfs.Inode, c vfs.Cred, name string, mode uint32, flags int) (vfs.Entry, *vfs.File, bool, error) {
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY && mode&0o200 == 0 {
		// A creator may write through its open of a file whose mode
		// forbids writing (cp of a read-only file); the real file's open,
		// made when the first write resolves it, would be refused.
		return vfs.Entry{}, nil, false, nil
	}
	e, done, err := sn.localMake(ctx, dir, c, name, nfs3.TypeReg, mode, func(i *vfs.Inode) {
		i.Mu.Lock()
		i.Opens++
		i.Mu.Unlock()
	})
	if !done || err != nil {
		return vfs.Entry{}, nil, done, err
	}
	if f := sn.provDataCreate(e.Inode, c, flags); f != nil {
		return e, f, true, nil // its data kept locally: permitdata.go
	}
	app := vfs.IsAppend(flags)
	pf := &provFile{flags: flags &^ (syscall.O_CREAT | syscall.O_EXCL | syscall.O_TRUNC), released: make(chan struct{})}
	f := &vfs.File{I: e.Inode, Cred: c, Write: flags&syscall.O_ACCMODE != syscall.O_RDONLY, Appending: app,
		DirectIO: app, Ext: pf}
	sn.provOpens.Lock()
	if sn.provOpens.m == nil {
		sn.provOpens.m = map[string]*provFile{}
	}
	sn.provOpens.m[string(e.Inode.FH)] = pf
	sn.provOpens.Unlock()
	return e, f, true, nil
}

// provReal is the real open behind the provisional open f: made at the
// first call (the object resolved, the real file opened as f was).
func (sn *snfsFS) provReal(ctx context.Context, f *vfs.File, pf *provFile) (*vfs.File, error) {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	if pf.real != nil {
		return pf.real, nil
	}
	// The reintegration that makes the file opens it too (permitopen.go),
	// for a write open whose CREATE is still in the log.
	var co *createOpened
	if o, ok := sn.permits.made.of(f.I.FH); ok && o.live && openModeOf(pf.flags) == state.Write {
		co = sn.createOpens.begin(sn.AttrStart())
		co.epoch = sn.openEpochNow()
		co.open.Status = nfs3.ErrNotSupp // not opened, unless the reply says so
		defer sn.permits.opens.wait(o.id, co)()
	}
	ri, err := sn.Resolve(ctx, f.I, false)
	if err != nil {
		if co != nil {
			sn.giveBackCreateOpened(ctx, co)
		}
		return nil, err
	}
	var rf *vfs.File
	if co != nil {
		rf, _, err = sn.snfsOpenWith(ctx, ri, f.Cred, pf.flags, co)
	} else {
		rf, _, err = sn.Open(ctx, ri, f.Cred, pf.flags)
	}
	if err != nil {
		return nil, err
	}
	pf.real = rf
	return rf, nil
}

// provEmpty reports whether a read of the provisional open f may answer
// that the file is empty: nothing was written through it (every write
// resolves it) and its object is not on the server yet.
func (sn *snfsFS) provEmpty(f *vfs.File, pf *provFile) bool {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	return pf.real == nil && sn.permits != nil && sn.permits.made.live(f.I.FH)
}

// provRelease ends the provisional open f (and its real open, if any).
func (sn *snfsFS) provRelease(ctx context.Context, f *vfs.File, pf *provFile) error {
	pf.mu.Lock()
	rf := pf.real
	pf.mu.Unlock()
	var err error
	if rf != nil {
		err = sn.Release(ctx, rf)
	}
	// Removed while open (through the server, after the object was
	// resolved: LocalRemove refuses an open file): the hidden name goes at
	// the last release, as the core's (vfs.FS.ReleaseCore).
	sn.FS.DropOpen(ctx, f)
	i := f.I
	sn.provOpens.Lock()
	if sn.provOpens.m[string(i.FH)] == pf {
		delete(sn.provOpens.m, string(i.FH))
	}
	sn.provOpens.Unlock()
	close(pf.released)
	return err
}

// provFlush is a close of the provisional open f: its real open's, if any.
func (sn *snfsFS) provFlush(ctx context.Context, pf *provFile) error {
	pf.mu.Lock()
	rf := pf.real
	pf.flushed = true
	pf.mu.Unlock()
	if rf == nil {
		return nil
	}
	return sn.Flush(ctx, rf)
}

// provMapped is the real inode of the provisional inode i if its object is
// made and known here (no call), else nil.
func (sn *snfsFS) provMapped(i *vfs.Inode) *vfs.Inode {
	if sn.permits == nil {
		return nil
	}
	o, ok := sn.permits.made.of(i.FH)
	if !ok || o.real == nil {
		return nil
	}
	return sn.FS.LookupInode(o.real)
}
