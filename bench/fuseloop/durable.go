package main

import (
	"context"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// durableFile is a loopback file that makes its data durable at every close
// of an open for writing (fdatasync of the backing file in FLUSH), while its
// reads and writes still pass through to the backing file. With -durable,
// fuseloop is the floor of a FUSE file system that caches writes on the
// local disk and, like snfs mode, returns from close(2) only once they are
// on it: what such a durable close costs whatever else the file system does.
// So that the close waits for as little as it can, a write open also starts
// the disk writes of its dirty pages as it goes (sync_file_range
// SYNC_FILE_RANGE_WRITE every few milliseconds, the kernel's background
// write-back being far behind on a machine with this much memory): at the
// close only what was written since is still to go.
type durableFile struct {
	daemonFile // forwards to the loopback file; PassthroughFd below lets it pass through
	fd         int
	write      bool
	stop       chan struct{} // closed by Release; nil for a read open
	done       sync.WaitGroup
	once       sync.Once
}

// writeBehind starts the disk writes of d's dirty pages every interval until
// Release.
func (d *durableFile) writeBehind(interval time.Duration) {
	d.stop = make(chan struct{})
	d.done.Add(1)
	go func() {
		defer d.done.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-d.stop:
				return
			case <-t.C:
				unix.SyncFileRange(d.fd, 0, 0, unix.SYNC_FILE_RANGE_WRITE)
			}
		}
	}()
}

func (d *durableFile) PassthroughFd() (int, bool) {
	return d.f.(fs.FilePassthroughFder).PassthroughFd()
}

func (d *durableFile) Flush(ctx context.Context) syscall.Errno {
	if d.write {
		if err := syscall.Fdatasync(d.fd); err != nil {
			return fs.ToErrno(err)
		}
	}
	return d.f.(fs.FileFlusher).Flush(ctx)
}

func (d *durableFile) Release(ctx context.Context) syscall.Errno {
	if d.stop != nil {
		d.once.Do(func() { close(d.stop) })
		d.done.Wait()
	}
	return d.f.(fs.FileReleaser).Release(ctx)
}

// durableNode is a loopback node whose files are durableFiles; a write open
// starts its disk writes every writeBehind (0: never).
type durableNode struct {
	*fs.LoopbackNode
	writeBehind time.Duration
}

func (n *durableNode) durable(fh fs.FileHandle, flags uint32) fs.FileHandle {
	fd, _ := fh.(fs.FilePassthroughFder).PassthroughFd()
	d := &durableFile{daemonFile: daemonFile{fh}, fd: fd, write: flags&syscall.O_ACCMODE != syscall.O_RDONLY}
	if d.write && n.writeBehind > 0 {
		d.writeBehind(n.writeBehind)
	}
	return d
}

func (n *durableNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return n.durable(fh, flags), fl, 0
}

func (n *durableNode) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	in, fh, fl, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	return in, n.durable(fh, flags), fl, 0
}
