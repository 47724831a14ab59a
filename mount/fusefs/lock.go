package fusefs

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"snfs/mount/vfs"
)

// File locks in snfs mode (vfs/lock.go) and in nfs mode with NLM
// (vfs/nlmlock.go): the mount asks the kernel to send POSIX locks and flock to
// it (MountOptions.EnableLocks); nfs mode with --locks=local keeps the
// kernel's local locks. FLUSH carries the closing process's lock owner: its
// locks on the file go (a process that dies closes its files too); RELEASE
// with FUSE_RELEASE_FLOCK_UNLOCK ends the flock of the open file description.

var (
	_ fs.NodeGetlker  = (*node)(nil)
	_ fs.NodeSetlker  = (*node)(nil)
	_ fs.NodeSetlkwer = (*node)(nil)
)

// offsetMax is the kernel's OFFSET_MAX: the End of a lock to the end of file.
const offsetMax = math.MaxInt64

func lockKind(typ uint32) vfs.LockKind {
	switch typ {
	case syscall.F_RDLCK:
		return vfs.ReadLock
	case syscall.F_WRLCK:
		return vfs.WriteLock
	}
	return vfs.Unlock
}

// lockRange is FUSE's [Start, End] as (offset, length), length 0 to the end.
func lockRange(lk *fuse.FileLock) (off, n uint64) {
	if lk.End >= offsetMax || lk.End < lk.Start {
		return lk.Start, 0
	}
	return lk.Start, lk.End - lk.Start + 1
}

func lockErrno(err error) syscall.Errno {
	var en syscall.Errno
	switch {
	case errors.Is(err, vfs.ErrNoLocks):
		return syscall.ENOLCK
	case errors.As(err, &en): // EAGAIN, EDEADLK, EINTR
		return en
	}
	return errnoOf(err)
}

// Getlk reports the conflicting lock; its pid is 0 (the holder may be a
// process of another machine), which the kernel reports as is.
func (n *node) Getlk(ctx context.Context, fh fs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	off, l := lockRange(lk)
	wctx, cancel := n.interruptible(ctx, false)
	defer cancel()
	vi, errno := n.vino(wctx, false)
	if errno != 0 {
		return errno
	}
	h, err := n.b.ops.Getlk(wctx, vi, owner, lockKind(lk.Typ), off, l)
	if err != nil {
		return lockErrno(err)
	}
	if h == nil {
		*out = fuse.FileLock{Typ: syscall.F_UNLCK}
		return 0
	}
	out.Typ = syscall.F_RDLCK
	if h.Kind == vfs.WriteLock {
		out.Typ = syscall.F_WRLCK
	}
	out.Start, out.End, out.Pid = h.Offset, offsetMax, 0
	if h.Length != 0 && h.Offset+h.Length-1 < offsetMax {
		out.End = h.Offset + h.Length - 1
	}
	if out.Start > offsetMax {
		out.Start = offsetMax
	}
	return 0
}

func (n *node) Setlk(ctx context.Context, fh fs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return n.setlk(ctx, fh, owner, lk, false)
}

// Setlkw waits for the grant; ctx ends when the process is interrupted
// (FUSE INTERRUPT): the waiting request is then cancelled on the server.
func (n *node) Setlkw(ctx context.Context, fh fs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return n.setlk(ctx, fh, owner, lk, true)
}

func (n *node) setlk(ctx context.Context, fh fs.FileHandle, owner uint64, lk *fuse.FileLock, wait bool) syscall.Errno {
	n.known() // its grant drops the kernel's pages of this node
	f, ok := fileOf(fh)
	if !ok {
		return syscall.EBADF
	}
	off, l := lockRange(lk)
	wctx, cancel := n.interruptible(ctx, wait)
	defer cancel()
	kind := lockKind(lk.Typ)
	if err := n.b.ops.Setlk(wctx, f, owner, kind, off, l, wait); err != nil {
		return lockErrno(err)
	}
	if fc, ok := ctx.(*fuse.Context); ok && kind != vfs.Unlock && n.b.sn != nil {
		// The process whose passthrough I/O stops if the lock is lost.
		n.b.sn.NoteLockPid(f, fc.Caller.Pid)
	}
	return 0
}

// interruptible is the context of a lock call: the mount's life, ended also,
// for a call that waits for another process's lock (wait: F_SETLKW), when
// the kernel interrupts it (a signal to the waiting process). A call that
// does not wait (F_SETLK, F_GETLK, an unlock) is not cut short: any signal
// with a handler interrupts the request (a Go program's preemption signal
// does, all the time), and EINTR from a non-blocking lock call is not what
// its caller handles; it ends when the server answers, as NFS's hard
// mounts' calls do. Cancel it when the call is done.
func (n *node) interruptible(ctx context.Context, wait bool) (context.Context, context.CancelFunc) {
	wctx, cancel := context.WithCancel(n.b.life)
	if fc, ok := ctx.(*fuse.Context); ok && fc.Cancel != nil && wait {
		go func() { // ends with the call (cancel)
			select {
			case <-fc.Cancel:
				cancel()
			case <-wctx.Done():
			}
		}()
	}
	return wctx, cancel
}

// lockCall is what ptRaw keeps of a FLUSH or a RELEASE for the node's method:
// the lock owner whose locks go.
type lockCall struct{ owner uint64 }

func (r *ptRaw) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	key := make(chan struct{})
	r.mu.Lock()
	r.lockCalls[key] = lockCall{in.LockOwner}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.lockCalls, key)
		r.mu.Unlock()
	}()
	return r.RawFileSystem.Flush(key, in)
}

// lockOwnerOf returns, from inside a node's Flush or Release, the owner whose
// locks the call releases.
func (r *ptRaw) lockOwnerOf(ctx context.Context) (uint64, bool) {
	fc, ok := ctx.(*fuse.Context)
	if r == nil || !ok {
		return 0, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.lockCalls[fc.Cancel]
	return c.owner, ok
}

// releaseLocks releases the locks of the owner of a FLUSH or RELEASE.
func (n *node) releaseLocks(ctx context.Context) {
	if owner, ok := n.b.pt.lockOwnerOf(ctx); ok {
		// A local inode's locks were taken on its real inode (vino).
		vi := n.objOf(n.EmbeddedInode())
		if err := n.b.ops.UnlockOwner(n.b.life, vi, owner); err != nil {
			slog.Warn("releasing the locks of a closed file", "fileid", vi.FileID, "err", err)
		}
	}
}
