package rawsys

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// bufPtr is p's first element, or nil for an empty p. (Held as an unsafe.Pointer
// until the call, the buffer stays alive and in place.)
func bufPtr[T any](p []T) unsafe.Pointer {
	if len(p) == 0 {
		return nil
	}
	return unsafe.Pointer(&p[0])
}

// result is a count-returning call's result.
func result(n uintptr, e unix.Errno) (int, error) {
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

func errOf(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// Fstat is fstat(2).
func Fstat(fd int, st *unix.Stat_t) error {
	_, _, e := unix.RawSyscall(unix.SYS_FSTAT, uintptr(fd), uintptr(unsafe.Pointer(st)), 0)
	return errOf(e)
}

// Fstatat is fstatat(2) (newfstatat).
func Fstatat(dirfd int, path string, st *unix.Stat_t, flags int) error {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return err
	}
	_, _, e := unix.RawSyscall6(unix.SYS_NEWFSTATAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(st)), uintptr(flags), 0, 0)
	return errOf(e)
}

// Openat is openat(2).
func Openat(dirfd int, path string, flags int, mode uint32) (int, error) {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return -1, err
	}
	fd, _, e := unix.RawSyscall6(unix.SYS_OPENAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(flags), uintptr(mode), 0, 0)
	if e != 0 {
		return -1, e
	}
	return int(fd), nil
}

// Open is open(2), as openat(AT_FDCWD).
func Open(path string, flags int, mode uint32) (int, error) {
	return Openat(unix.AT_FDCWD, path, flags, mode)
}

// Close is close(2). Not for the last descriptor of a large removed file: that
// close frees its blocks (see the package doc).
func Close(fd int) error {
	_, _, e := unix.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0)
	return errOf(e)
}

// Fchmodat is fchmodat(2) without flags (the kernel's fchmodat takes none).
func Fchmodat(dirfd int, path string, mode uint32) error {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return err
	}
	_, _, e := unix.RawSyscall(unix.SYS_FCHMODAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(mode))
	return errOf(e)
}

// Fchownat is fchownat(2).
func Fchownat(dirfd int, path string, uid, gid, flags int) error {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return err
	}
	_, _, e := unix.RawSyscall6(unix.SYS_FCHOWNAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(uid), uintptr(gid), uintptr(flags), 0)
	return errOf(e)
}

// UtimesNanoAt is utimensat(2); ts holds the access and modification times.
func UtimesNanoAt(dirfd int, path string, ts []unix.Timespec, flags int) error {
	if len(ts) != 2 {
		return unix.EINVAL
	}
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return err
	}
	_, _, e := unix.RawSyscall6(unix.SYS_UTIMENSAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(&ts[0])), uintptr(flags), 0, 0)
	return errOf(e)
}

// Unlinkat is unlinkat(2).
func Unlinkat(dirfd int, path string, flags int) error {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return err
	}
	_, _, e := unix.RawSyscall(unix.SYS_UNLINKAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(flags))
	return errOf(e)
}

// Mkdirat is mkdirat(2).
func Mkdirat(dirfd int, path string, mode uint32) error {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return err
	}
	_, _, e := unix.RawSyscall(unix.SYS_MKDIRAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(mode))
	return errOf(e)
}

// Mknodat is mknodat(2).
func Mknodat(dirfd int, path string, mode uint32, dev int) error {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return err
	}
	_, _, e := unix.RawSyscall6(unix.SYS_MKNODAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(mode), uintptr(dev), 0, 0)
	return errOf(e)
}

// Renameat is renameat(2).
func Renameat(olddirfd int, oldpath string, newdirfd int, newpath string) error {
	op, err := unix.BytePtrFromString(oldpath)
	if err != nil {
		return err
	}
	np, err := unix.BytePtrFromString(newpath)
	if err != nil {
		return err
	}
	_, _, e := unix.RawSyscall6(unix.SYS_RENAMEAT, uintptr(olddirfd), uintptr(unsafe.Pointer(op)), uintptr(newdirfd), uintptr(unsafe.Pointer(np)), 0, 0)
	return errOf(e)
}

// Linkat is linkat(2).
func Linkat(olddirfd int, oldpath string, newdirfd int, newpath string, flags int) error {
	op, err := unix.BytePtrFromString(oldpath)
	if err != nil {
		return err
	}
	np, err := unix.BytePtrFromString(newpath)
	if err != nil {
		return err
	}
	_, _, e := unix.RawSyscall6(unix.SYS_LINKAT, uintptr(olddirfd), uintptr(unsafe.Pointer(op)), uintptr(newdirfd), uintptr(unsafe.Pointer(np)), uintptr(flags), 0)
	return errOf(e)
}

// Symlinkat is symlinkat(2).
func Symlinkat(target string, dirfd int, path string) error {
	tp, err := unix.BytePtrFromString(target)
	if err != nil {
		return err
	}
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return err
	}
	_, _, e := unix.RawSyscall(unix.SYS_SYMLINKAT, uintptr(unsafe.Pointer(tp)), uintptr(dirfd), uintptr(unsafe.Pointer(p)))
	return errOf(e)
}

// Readlinkat is readlinkat(2).
func Readlinkat(dirfd int, path string, buf []byte) (int, error) {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return 0, err
	}
	b := bufPtr(buf)
	n, _, e := unix.RawSyscall6(unix.SYS_READLINKAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(b), uintptr(len(buf)), 0, 0)
	return result(n, e)
}

// Faccessat2 is faccessat2(2).
func Faccessat2(dirfd int, path string, mode uint32, flags int) error {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return err
	}
	_, _, e := unix.RawSyscall6(unix.SYS_FACCESSAT2, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(mode), uintptr(flags), 0, 0)
	return errOf(e)
}

// maxHandleSize is MAX_HANDLE_SZ from <linux/exportfs.h>.
const maxHandleSize = 128

// fileHandle is struct file_handle with room for the largest handle.
type fileHandle struct {
	bytes uint32
	typ   int32
	f     [maxHandleSize]byte
}

// NameToHandleAt is name_to_handle_at(2): the object's handle and its mount id.
func NameToHandleAt(dirfd int, path string, flags int) (unix.FileHandle, int, error) {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return unix.FileHandle{}, 0, err
	}
	var h fileHandle
	h.bytes = maxHandleSize
	var mid int32
	_, _, e := unix.RawSyscall6(unix.SYS_NAME_TO_HANDLE_AT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(&h)), uintptr(unsafe.Pointer(&mid)), uintptr(flags), 0)
	if e != 0 {
		return unix.FileHandle{}, 0, e
	}
	if h.bytes > maxHandleSize {
		return unix.FileHandle{}, 0, unix.EOVERFLOW
	}
	return unix.NewFileHandle(h.typ, h.f[:h.bytes]), int(mid), nil
}

// OpenByHandleAt is open_by_handle_at(2).
func OpenByHandleAt(mountFD int, fh unix.FileHandle, flags int) (int, error) {
	b := fh.Bytes()
	if len(b) > maxHandleSize {
		return -1, unix.EINVAL
	}
	var h fileHandle
	h.bytes, h.typ = uint32(len(b)), fh.Type()
	copy(h.f[:], b)
	fd, _, e := unix.RawSyscall(unix.SYS_OPEN_BY_HANDLE_AT, uintptr(mountFD), uintptr(unsafe.Pointer(&h)), uintptr(flags))
	if e != 0 {
		return -1, e
	}
	return int(fd), nil
}

// Pwrite is pwrite(2). For writes to the page cache small enough not to be
// throttled; see the package doc.
func Pwrite(fd int, p []byte, off int64) (int, error) {
	b := bufPtr(p)
	n, _, e := unix.RawSyscall6(unix.SYS_PWRITE64, uintptr(fd), uintptr(b), uintptr(len(p)), uintptr(off), 0, 0)
	return result(n, e)
}

// Getdents is getdents64(2).
func Getdents(fd int, buf []byte) (int, error) {
	b := bufPtr(buf)
	n, _, e := unix.RawSyscall(unix.SYS_GETDENTS64, uintptr(fd), uintptr(b), uintptr(len(buf)))
	return result(n, e)
}

// Seek is lseek(2).
func Seek(fd int, off int64, whence int) (int64, error) {
	r, _, e := unix.RawSyscall(unix.SYS_LSEEK, uintptr(fd), uintptr(off), uintptr(whence))
	if e != 0 {
		return 0, e
	}
	return int64(r), nil
}

// Read is read(2), for non-blocking descriptors.
func Read(fd int, p []byte) (int, error) {
	b := bufPtr(p)
	n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(b), uintptr(len(p)))
	return result(n, e)
}

// Writev is writev(2), for non-blocking descriptors.
func Writev(fd int, iov []unix.Iovec) (int, error) {
	b := bufPtr(iov)
	n, _, e := unix.RawSyscall(unix.SYS_WRITEV, uintptr(fd), uintptr(b), uintptr(len(iov)))
	return result(n, e)
}

// PollIn is ppoll(2) on one descriptor for POLLIN with a zero timeout: it
// reports whether fd is readable now (or in error, which the next read reports).
func PollIn(fd int) (bool, error) {
	pfd := unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	var zero unix.Timespec
	n, _, e := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&zero)), 0, 0, 0)
	if e != 0 {
		return false, e
	}
	return n > 0, nil
}

// Setgroups is setgroups(2) for the calling thread only: the raw system call,
// where libc and syscall.Setgroups change every thread of the process.
func Setgroups(gids []uint32) error {
	_, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(gids)), uintptr(bufPtr(gids)), 0)
	return errOf(e)
}

// Setfsuid is setfsuid(2) for the calling thread: it returns the previous fsuid
// (it reports no error; pass -1, i.e. ^uint32(0), to read it without a change).
func Setfsuid(uid uint32) uint32 {
	r, _, _ := unix.RawSyscall(unix.SYS_SETFSUID, uintptr(uid), 0, 0)
	return uint32(r)
}

// Setfsgid is setfsgid(2) for the calling thread, as Setfsuid.
func Setfsgid(gid uint32) uint32 {
	r, _, _ := unix.RawSyscall(unix.SYS_SETFSGID, uintptr(gid), 0, 0)
	return uint32(r)
}

// IoUringSubmit is io_uring_enter(2) submitting toSubmit entries without waiting
// for completions (no IORING_ENTER_GETEVENTS): it returns as soon as the kernel has
// taken them.
func IoUringSubmit(ringFD int, toSubmit uint32) (int, error) {
	n, _, e := unix.RawSyscall6(unix.SYS_IO_URING_ENTER, uintptr(ringFD), uintptr(toSubmit), 0, 0, 0, 0)
	return result(n, e)
}
