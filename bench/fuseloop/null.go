package main

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// With -null, fuseloop serves no directory: an in-memory tree whose
// creates, unlinks, mkdirs and rmdirs do nothing but keep the names, with
// 1 h timeouts. It is the floor of the create/close/unlink and mkdir/rmdir
// loops for any FUSE file system: the kernel sends every create, flush,
// release, unlink, mkdir and rmdir (and the lookup of each new name) to the
// daemon whatever the daemon does with them, and this daemon does nothing.
// Only for the loops: its files keep their data in memory and it has no
// rename, links or extended attributes.

// nullDir is a directory of the in-memory tree.
type nullDir struct{ fs.Inode }

var (
	_ fs.NodeCreater   = (*nullDir)(nil)
	_ fs.NodeMkdirer   = (*nullDir)(nil)
	_ fs.NodeUnlinker  = (*nullDir)(nil)
	_ fs.NodeRmdirer   = (*nullDir)(nil)
	_ fs.NodeGetattrer = (*nullDir)(nil)
)

func (n *nullDir) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFDIR | 0o777
	out.Nlink = 2
	return 0
}

func (n *nullDir) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	f := &fs.MemRegularFile{Attr: fuse.Attr{Mode: mode & 0o7777}}
	ch := n.NewInode(ctx, f, fs.StableAttr{Mode: syscall.S_IFREG})
	out.Mode = syscall.S_IFREG | mode&0o7777
	out.Nlink = 1
	return ch, nil, fuse.FOPEN_KEEP_CACHE, 0
}

func (n *nullDir) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	out.Mode = syscall.S_IFDIR | 0o777
	out.Nlink = 2
	return n.NewInode(ctx, &nullDir{}, fs.StableAttr{Mode: syscall.S_IFDIR}), 0
}

// Unlink and Rmdir: the bridge drops the child once they succeed.
func (n *nullDir) Unlink(ctx context.Context, name string) syscall.Errno { return 0 }

func (n *nullDir) Rmdir(ctx context.Context, name string) syscall.Errno {
	if ch := n.GetChild(name); ch != nil && len(ch.Children()) > 0 {
		return syscall.ENOTEMPTY
	}
	return 0
}
