package fusefs

import (
	"context"
	"errors"
	"syscall"

	"snfs/mount/cachemgr"
	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/sunrpc"
)

// errnoOf is the one place vfs errors become errno values for the kernel.
func errnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	// A disconnected mount's miss (cachemgr, disconnected.go): EHOSTDOWN,
	// not ENOTCONN, which is what a dead FUSE daemon's mount answers.
	if errors.Is(err, cachemgr.ErrDisconnected) {
		return syscall.EHOSTDOWN
	}
	// First: a call abandoned because the request was interrupted (ctx.go)
	// may also carry the last NFS status it retried on (jukebox, grace).
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return syscall.EINTR
	}
	var st nfs3.Status
	if errors.As(err, &st) {
		switch st {
		case nfs3.ErrPerm:
			return syscall.EPERM
		case nfs3.ErrNoEnt:
			return syscall.ENOENT
		case nfs3.ErrIO:
			return syscall.EIO
		case nfs3.ErrNXIO:
			return syscall.ENXIO
		case nfs3.ErrAcces:
			return syscall.EACCES
		case nfs3.ErrExist:
			return syscall.EEXIST
		case nfs3.ErrXDev:
			return syscall.EXDEV
		case nfs3.ErrNoDev:
			return syscall.ENODEV
		case nfs3.ErrNotDir:
			return syscall.ENOTDIR
		case nfs3.ErrIsDir:
			return syscall.EISDIR
		case nfs3.ErrInval:
			return syscall.EINVAL
		case nfs3.ErrFBig:
			return syscall.EFBIG
		case nfs3.ErrNoSpc:
			return syscall.ENOSPC
		case nfs3.ErrROFS:
			return syscall.EROFS
		case nfs3.ErrMLink:
			return syscall.EMLINK
		case nfs3.ErrNameTooLong:
			return syscall.ENAMETOOLONG
		case nfs3.ErrNotEmpty:
			return syscall.ENOTEMPTY
		case nfs3.ErrDQuot:
			return syscall.EDQUOT
		case nfs3.ErrStale, nfs3.ErrBadHandle:
			return syscall.ESTALE
		case nfs3.ErrRemote:
			return syscall.EREMOTE
		case nfs3.ErrNotSupp, nfs3.ErrBadType:
			return syscall.EOPNOTSUPP
		case nfs3.ErrTooSmall, nfs3.ErrBadCookie, nfs3.ErrNotSync:
			return syscall.EIO
		case nfs3.ErrJukebox:
			return syscall.EAGAIN
		case snfs1.ErrNoXattr:
			return syscall.ENODATA
		case snfs1.ErrXattr2Big:
			return syscall.E2BIG
		}
		return syscall.EIO
	}
	switch {
	case errors.Is(err, vfs.ErrNotSupported):
		return syscall.EOPNOTSUPP
	case errors.Is(err, vfs.ErrInvalid):
		return syscall.EINVAL
	case errors.Is(err, cachemgr.ErrBusy):
		return syscall.EBUSY
	case errors.Is(err, syscall.EFBIG):
		// A size or offset the cache's local file system refuses (a file
		// cached for writing is truncated and written there first): the
		// application's error, as the server's NFS3ERR_FBIG would be.
		return syscall.EFBIG
	case errors.Is(err, sunrpc.ErrClientClosed):
		return syscall.EIO
	}
	return syscall.EIO
}
