package main

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// daemonFile hides a loopback file's descriptor from go-fuse, which would
// otherwise pass the open through: its reads and writes then come to the
// daemon, one FUSE request each, as a file system's do when it must see
// them (snfs mode's writes). With -daemon-io, fuseloop is the floor of such
// a file system.
type daemonFile struct{ f fs.FileHandle }

func (d *daemonFile) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return d.f.(fs.FileReader).Read(ctx, dest, off)
}

func (d *daemonFile) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	return d.f.(fs.FileWriter).Write(ctx, data, off)
}

func (d *daemonFile) Flush(ctx context.Context) syscall.Errno {
	return d.f.(fs.FileFlusher).Flush(ctx)
}

func (d *daemonFile) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	return d.f.(fs.FileFsyncer).Fsync(ctx, flags)
}

func (d *daemonFile) Release(ctx context.Context) syscall.Errno {
	return d.f.(fs.FileReleaser).Release(ctx)
}

func (d *daemonFile) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return d.f.(fs.FileGetattrer).Getattr(ctx, out)
}

func (d *daemonFile) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return d.f.(fs.FileSetattrer).Setattr(ctx, in, out)
}

func (d *daemonFile) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return d.f.(fs.FileLseeker).Lseek(ctx, off, whence)
}

func (d *daemonFile) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	return d.f.(fs.FileAllocater).Allocate(ctx, off, size, mode)
}

// daemonNode is a loopback node whose files are daemonFiles.
type daemonNode struct{ *fs.LoopbackNode }

func (n *daemonNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return &daemonFile{fh}, fl, 0
}

func (n *daemonNode) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	in, fh, fl, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	return in, &daemonFile{fh}, fl, 0
}
