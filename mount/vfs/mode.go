package vfs

import (
	"context"

	"snfs/nfs3"
)

// Ops are the operations on files whose meaning depends on the mount's mode:
// the plain NFSv3 core's (close-to-open, writes buffered in memory and sent
// with UNSTABLE WRITEs and a COMMIT) or the snfs cache manager's (the
// protocol's OPEN and CLOSE, the cache directory, delayed write-back and
// close, passthrough). One of them is chosen when the FS is made (New: snfs
// mode if Config.SNFS is set) and never changes; fusefs takes it once, at
// Mount (FS.Ops), and the FS's own methods of the same names go through it.
//
// In snfs mode a file the protocol does not open (not a regular file) is
// the core's: its File says which (File.sn.mode), so the cache manager's
// operations hand such files to the core's.
type Ops interface {
	Open(ctx context.Context, i *Inode, c Cred, flags int) (f *File, keepCache bool, err error)
	Create(ctx context.Context, dir *Inode, c Cred, name string, mode uint32, excl bool, flags int) (Entry, *File, error)
	Read(ctx context.Context, f *File, off uint64, buf []byte) (int, error)
	Write(ctx context.Context, f *File, off uint64, data []byte) (int, error)
	Append(ctx context.Context, f *File, data []byte) (uint64, int, error)
	Flush(ctx context.Context, f *File) error
	Fsync(ctx context.Context, f *File) error
	Release(ctx context.Context, f *File) error
}

// Ops returns the mode's operations (chosen in New).
func (fs *FS) Ops() Ops { return fs.ops }

// nfsOps is the plain NFSv3 core's Ops (file.go, ops.go, append.go).
type nfsOps struct{ fs *FS }

// snfsOps is the snfs cache manager's Ops (snfsio.go, callback.go,
// append.go): the protocol's opens of regular files; anything else is the
// core's.
type snfsOps struct{ fs *FS }

// core is the core's Ops on the same FS.
func (o snfsOps) core() nfsOps { return nfsOps(o) }

// Open is FS.Open in snfs mode.
func (o snfsOps) Open(ctx context.Context, i *Inode, c Cred, flags int) (*File, bool, error) {
	if i.Type != nfs3.TypeReg {
		return o.core().Open(ctx, i, c, flags)
	}
	if changesFile(flags) {
		if err := o.fs.refuseChange(); err != nil {
			return nil, false, err
		}
	}
	return o.fs.snfsOpen(ctx, i, c, flags)
}

// Create is FS.Create in snfs mode: the new file is opened for writing
// with the protocol.
func (o snfsOps) Create(ctx context.Context, dir *Inode, c Cred, name string, mode uint32, excl bool, flags int) (Entry, *File, error) {
	e, err := o.fs.createCore(ctx, dir, c, name, mode, excl, flags)
	if err != nil {
		return Entry{}, nil, err
	}
	return o.fs.snfsCreated(ctx, e, c, flags)
}

// Read is FS.Read in snfs mode.
func (o snfsOps) Read(ctx context.Context, f *File, off uint64, buf []byte) (int, error) {
	if err := o.fs.lockCheck(ctx, f); err != nil {
		return 0, err // its lock was lost (locklost.go)
	}
	if f.sn.mode == 0 {
		return o.fs.readCore(ctx, f, off, buf)
	}
	return o.fs.snfsRead(ctx, f, off, buf)
}

// Write is FS.Write in snfs mode.
func (o snfsOps) Write(ctx context.Context, f *File, off uint64, data []byte) (int, error) {
	if err := o.fs.writeCheck(ctx, f); err != nil {
		return 0, err
	}
	if f.sn.mode == 0 {
		_, n, err := o.fs.buffered(ctx, f, off, data, false)
		return n, err
	}
	return o.fs.snfsWrite(ctx, f, off, data)
}

// Append is FS.Append in snfs mode.
func (o snfsOps) Append(ctx context.Context, f *File, data []byte) (uint64, int, error) {
	if err := o.fs.refuseChange(); err != nil {
		return 0, 0, err
	}
	if f.sn.mode == 0 {
		return o.fs.appendCore(ctx, f, data)
	}
	return o.fs.snfsAppend(ctx, f, data)
}

// Flush is FS.Flush in snfs mode.
func (o snfsOps) Flush(ctx context.Context, f *File) error {
	if f.sn.mode == 0 {
		return f.i.flush(ctx, true)
	}
	return o.fs.snfsFlush(ctx, f)
}

// Fsync is FS.Fsync in snfs mode.
func (o snfsOps) Fsync(ctx context.Context, f *File) error {
	if f.sn.mode == 0 {
		return f.i.flush(ctx, true)
	}
	return o.fs.snfsFsync(ctx, f)
}

// Release is FS.Release in snfs mode.
func (o snfsOps) Release(ctx context.Context, f *File) error {
	o.fs.dropHeld(f.i, f, 0)
	if f.sn.mode == 0 {
		return o.fs.releaseCore(ctx, f)
	}
	return o.fs.snfsRelease(ctx, f)
}
