package vfs

import (
	"fmt"
	"syscall"

	"snfs/nfs3"
)

// A read-only mount (Config.ReadOnly, `snfs mount -o ro`) refuses every
// change with EROFS before anything reaches the server, as a read-only
// mount of the Linux NFS client does. The kernel refuses them first (the
// FUSE mount is MS_RDONLY, package fusefs): this is the file system's own
// guard, for a caller that is not the kernel. In snfs mode an open is then
// always a read open, so the server never records this client as a writer
// (docs/protocol.md), and the mount starts only from a cache directory with
// nothing left to write back (OpenSNFS).

// errReadOnly is the error of a change on a read-only mount.
var errReadOnly = fmt.Errorf("read-only mount: %w", nfs3.ErrROFS)

// ReadOnly says whether the mount is read-only.
func (fs *FS) ReadOnly() bool { return fs.Cfg.ReadOnly }

// RefuseChange is errReadOnly on a read-only mount, else nil.
func (fs *FS) RefuseChange() error {
	if fs.Cfg.ReadOnly {
		return errReadOnly
	}
	return nil
}

// ChangesFile says whether an open with flags may change the file: open for
// writing, or truncating.
func ChangesFile(flags int) bool {
	return flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0
}

// accessChanges says whether ACCESS3 bits want ask for a change.
func accessChanges(want uint32) bool {
	return want&(nfs3.AccessModify|nfs3.AccessExtend|nfs3.AccessDelete) != 0
}
