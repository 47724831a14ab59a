package fusefs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
)

// Extended attributes: the vfs's (snfs mode: the protocol's user namespace;
// vfs/xattr.go). In nfs mode the mount asks go-fuse to answer ENOSYS
// (MountOptions.DisableXAttrs), which the kernel remembers for the mount and
// turns into EOPNOTSUPP without asking again. A value or list larger than the
// caller's buffer is ERANGE with its size (a zero-sized buffer asks for the
// size: go-fuse answers that size).

var (
	_ fs.NodeGetxattrer    = (*node)(nil)
	_ fs.NodeSetxattrer    = (*node)(nil)
	_ fs.NodeListxattrer   = (*node)(nil)
	_ fs.NodeRemovexattrer = (*node)(nil)
)

func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	rctx, cancel := n.b.reqCtx(ctx)
	defer cancel()
	// An object made locally under a write-back permit and not yet
	// reintegrated has none (only setxattr, which resolves it, sets one):
	// snfs mode answers without resolving it, so the kernel's check of
	// security.capability before a write or a chown leaves the write to
	// resolve it through its open, and a chown local.
	vi, errno := n.vino(rctx, true)
	if errno != 0 {
		return 0, errno
	}
	v, err := n.b.ops.GetXattr(rctx, vi, n.cred(ctx), attr)
	if err != nil {
		return 0, errnoOf(err)
	}
	if len(v) > len(dest) {
		return uint32(len(v)), syscall.ERANGE
	}
	return uint32(copy(dest, v)), 0
}

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	bctx, err := n.b.begun(ctx)
	if err != nil {
		return errnoOf(err)
	}
	vi, errno := n.vino(bctx, false)
	if errno != 0 {
		return errno
	}
	return errnoOf(n.b.ops.SetXattr(bctx, vi, n.cred(ctx), attr, data, flags))
}

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	bctx, err := n.b.begun(ctx)
	if err != nil {
		return errnoOf(err)
	}
	vi, errno := n.vino(bctx, false)
	if errno != 0 {
		return errno
	}
	return errnoOf(n.b.ops.RemoveXattr(bctx, vi, n.cred(ctx), attr))
}

func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	rctx, cancel := n.b.reqCtx(ctx)
	defer cancel()
	// An object made locally has none yet (snfs mode answers): local.
	vi, errno := n.vino(rctx, true)
	if errno != 0 {
		return 0, errno
	}
	names, err := n.b.ops.ListXattrs(rctx, vi, n.cred(ctx))
	if err != nil {
		return 0, errnoOf(err)
	}
	size := 0
	for _, name := range names {
		size += len(name) + 1
	}
	if size > len(dest) {
		return uint32(size), syscall.ERANGE
	}
	k := 0
	for _, name := range names {
		k += copy(dest[k:], name)
		dest[k] = 0
		k++
	}
	return uint32(k), 0
}
