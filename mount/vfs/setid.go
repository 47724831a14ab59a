package vfs

import (
	"context"
	"syscall"
)

// ClearSetID is what a write by a caller without CAP_FSETID owes POSIX when
// the file is set-user-ID (or set-group-ID and group-executable): the bits
// go, as on a local disk. The kernel says so (FUSE_WRITE_KILL_SUIDGID) after
// handing the write to Write. Only the owner may chmod, so the writer cannot
// clear them with SETATTR; the server clears them when the writer's data
// arrives (a WRITE by anyone but root does, as knfsd's does), which the
// Linux NFS client also relies on. So the data goes to the server now, as
// the writer, and the reply's post-op attributes carry the new mode for the
// writer's next fstat. A write-through (snfs mode, write-shared) was sent
// already.
func (fs *FS) ClearSetID(ctx context.Context, f *File) error {
	if err := fs.RefuseChange(); err != nil {
		return err
	}
	i := f.I
	i.Mu.Lock()
	setID := i.Attr.Mode&(syscall.S_ISUID|syscall.S_ISGID) != 0
	i.Mu.Unlock()
	if !setID {
		return nil
	}
	return fs.ops.SendSetID(ctx, f)
}
