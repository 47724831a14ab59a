package server

import (
	"errors"
	"syscall"

	"snfs/consist"
	"snfs/nfs3"
	"snfs/nlm4"
	"snfs/snfs1"
	"snfs/store"
)

// Sentinel errors of this package, mapped below with the store's and the kernel's.
var (
	errAccess = errors.New("server: client may not use this export")
	errROFS   = errors.New("server: export is read-only")
	// errInsecurePort: a secure export refused a call from an unprivileged port.
	errInsecurePort = errors.New("server: call from a port at or above 1024 to a secure export")
	errJukebox      = errors.New("server: operation would block; try again later")
	errInval        = errors.New("server: invalid argument")
	// errXattrNamespace: an extended attribute outside the user namespace.
	errXattrNamespace = errors.New("server: only user.* extended attributes are served")
)

var errnoStatus = map[syscall.Errno]nfs3.Status{
	syscall.EPERM:        nfs3.ErrPerm,
	syscall.ENOENT:       nfs3.ErrNoEnt,
	syscall.EIO:          nfs3.ErrIO,
	syscall.ENXIO:        nfs3.ErrNXIO,
	syscall.EACCES:       nfs3.ErrAcces,
	syscall.EEXIST:       nfs3.ErrExist,
	syscall.EXDEV:        nfs3.ErrXDev,
	syscall.ENODEV:       nfs3.ErrNoDev,
	syscall.ENOTDIR:      nfs3.ErrNotDir,
	syscall.EISDIR:       nfs3.ErrIsDir,
	syscall.EINVAL:       nfs3.ErrInval,
	syscall.EFBIG:        nfs3.ErrFBig,
	syscall.ENOSPC:       nfs3.ErrNoSpc,
	syscall.EROFS:        nfs3.ErrROFS,
	syscall.EMLINK:       nfs3.ErrMLink,
	syscall.ENAMETOOLONG: nfs3.ErrNameTooLong,
	syscall.ENOTEMPTY:    nfs3.ErrNotEmpty,
	syscall.EDQUOT:       nfs3.ErrDQuot,
	syscall.ESTALE:       nfs3.ErrStale,
	syscall.ELOOP:        nfs3.ErrInval, // a symlink where the server will not follow one
	syscall.ETXTBSY:      nfs3.ErrAcces,
	syscall.EBADF:        nfs3.ErrStale,
	syscall.EOPNOTSUPP:   nfs3.ErrNotSupp,
	syscall.EAGAIN:       nfs3.ErrJukebox,
	syscall.EBUSY:        nfs3.ErrJukebox,
	syscall.ENOSYS:       nfs3.ErrNotSupp,
	syscall.EOVERFLOW:    nfs3.ErrInval,
	syscall.EDEADLK:      nfs3.ErrJukebox,
	// As knfsd's nfserrno: a transient shortage, retried. open_by_handle_at
	// also gives it for a file being freed while its name was replaced.
	syscall.ENOMEM: nfs3.ErrJukebox,
	// Only the extended-attribute procedures meet these.
	syscall.ENODATA: snfs1.ErrNoXattr,
	syscall.E2BIG:   snfs1.ErrXattr2Big,
	syscall.ERANGE:  snfs1.ErrXattr2Big,
}

// statusOf maps an error to nfsstat3. It is the only place that does.
func statusOf(err error) nfs3.Status {
	if err == nil {
		return nfs3.OK
	}
	var st nfs3.Status
	if errors.As(err, &st) {
		return st
	}
	switch {
	case errors.Is(err, store.ErrBadHandle):
		return nfs3.ErrBadHandle
	case errors.Is(err, store.ErrStale):
		return nfs3.ErrStale
	case errors.Is(err, store.ErrNotDir):
		return nfs3.ErrNotDir
	case errors.Is(err, store.ErrBadCookie):
		return nfs3.ErrBadCookie
	case errors.Is(err, store.ErrCrossMount), errors.Is(err, errAccess):
		return nfs3.ErrAcces
	case errors.Is(err, errROFS):
		return nfs3.ErrROFS
	case errors.Is(err, errInsecurePort):
		return nfs3.ErrPerm
	case errors.Is(err, errJukebox):
		return nfs3.ErrJukebox
	case errors.Is(err, errInval):
		return nfs3.ErrInval
	case errors.Is(err, errXattrNamespace):
		return nfs3.ErrNotSupp
	case errors.Is(err, consist.ErrNoGrace):
		return snfs1.ErrNoGrace
	case errors.Is(err, consist.ErrJukebox): // ErrGrace too
		return nfs3.ErrJukebox
	case errors.Is(err, consist.ErrFenced):
		return snfs1.ErrFenced
	case errors.Is(err, consist.ErrStaleClientID):
		return snfs1.ErrStaleClientID
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		if st, ok := errnoStatus[errno]; ok {
			return st
		}
	}
	return nfs3.ErrIO
}

// nlmErrStat maps an error of an NLM call's file (its handle, its type) to
// nlm4_stats, through its NFS status: the only place that does.
func nlmErrStat(err error) nlm4.Stat {
	switch statusOf(err) {
	case nfs3.ErrStale, nfs3.ErrBadHandle:
		return nlm4.StaleFH
	case nfs3.ErrROFS:
		return nlm4.ROFS
	case nfs3.ErrFBig:
		return nlm4.FBig
	case nfs3.ErrJukebox:
		return nlm4.DeniedNoLocks
	}
	return nlm4.Failed
}
