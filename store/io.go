package store

import (
	"errors"
	"io"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"snfs/rawsys"
	"snfs/store/uring"
)

func procFD(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// OpenIO makes sure n has a descriptor for data and fsync: read-write for regular
// files (read-only when the file system refuses writing), read-only for
// directories. Call it with root credentials (outside As).
func (s *Store) OpenIO(n *Node) error {
	e := n.ent
	e.ioMu.Lock()
	defer e.ioMu.Unlock()
	if e.io >= 0 {
		return nil
	}
	var fd int
	var err error
	switch n.Stat.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		fd, err = openFileGated(n.procPath(), unix.O_RDWR|unix.O_CLOEXEC, s.gated.Load() > 0)
		if err == nil {
			e.ioRW = true
		} else {
			fd, err = openFileGated(n.procPath(), unix.O_RDONLY|unix.O_CLOEXEC, s.gated.Load() > 0)
			e.ioFallback = err == nil // opened for writing again by a write (writeIO)
		}
	case unix.S_IFDIR:
		fd, err = rawsys.Open(n.procPath(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	default:
		return opErr("open", unix.EINVAL)
	}
	if err != nil {
		return opErr("open", err)
	}
	e.io = fd
	return nil
}

// writeIO is n's I/O descriptor for a write, and whether it is open for
// writing. A read-only one OpenIO fell back to (O_RDWR refused: ETXTBSY
// while the file runs as a program on this machine, or a read-only file
// system) is opened for writing again first: kept, it refused every write
// for as long as the object stayed cached, after the program ended too. The
// read-only descriptor stays open until the entry closes (a read may be
// using it: its number must not be reused meanwhile).
func (s *Store) writeIO(n *Node) (int, bool) {
	e := n.ent
	e.ioMu.Lock()
	defer e.ioMu.Unlock()
	if !e.ioRW && e.ioFallback && e.io >= 0 {
		if fd, err := openFileGated(n.procPath(), unix.O_RDWR|unix.O_CLOEXEC, s.gated.Load() > 0); err == nil {
			e.ioOld = append(e.ioOld, e.io)
			e.io, e.ioRW, e.ioFallback = fd, true, false
		}
	}
	return e.io, e.ioRW
}

// openFile opens a regular file. The raw open (rawsys) is non-blocking: the one
// wait an open of a regular file can make, for another process's lease to be
// broken (up to /proc/sys/fs/lease-break-time), turns into EWOULDBLOCK, and
// that open is made again on the scheduler's syscall path. O_NONBLOCK does not
// change reads and writes of a regular file, so the descriptor keeps it.
func openFile(path string, flags int) (int, error) { return openFileGated(path, flags, false) }

// openFileGated is openFile, with gated (an open gate is live: the open may
// wait for it) through the scheduler's system call path only.
func openFileGated(path string, flags int, gated bool) (int, error) {
	if gated {
		return unix.Open(path, flags, 0)
	}
	fd, err := rawsys.Open(path, flags|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.EWOULDBLOCK) {
		fd, err = unix.Open(path, flags, 0)
	}
	return fd, err
}

func (n *Node) io() int {
	n.ent.ioMu.Lock()
	defer n.ent.ioMu.Unlock()
	return n.ent.io
}

// MayIO checks, with the caller's identity (inside As), that cred may read (or
// write) n. The owner of a file may always read and write it, as NFS servers allow
// (a file created read-only is still written by the process that created it).
func (s *Store) MayIO(n *Node, uid uint32, write bool) error {
	if uid == n.Stat.Uid {
		return nil
	}
	mode := uint32(unix.R_OK)
	if write {
		mode = unix.W_OK
	}
	if err := rawsys.Faccessat2(n.FD(), "", mode, unix.AT_EACCESS|unix.AT_EMPTY_PATH); err != nil {
		return opErr("access", err)
	}
	return nil
}

// ReadAt reads into buf at off; it returns the bytes read and whether they reach
// the end of the file. OpenIO must have succeeded.
func (s *Store) ReadAt(n *Node, buf []byte, off int64) (int, bool, error) {
	fd := n.io()
	total := 0
	for total < len(buf) {
		k, err := unix.Pread(fd, buf[total:], off+int64(total))
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return total, false, opErr("read", err)
		}
		if k == 0 {
			return total, true, nil
		}
		total += k
	}
	var st unix.Stat_t
	if err := rawsys.Fstat(fd, &st); err != nil {
		return total, false, opErr("fstat", err)
	}
	return total, off+int64(total) >= st.Size, nil
}

// rawWriteMax is the largest write made as a raw system call (rawsys).
const rawWriteMax = 64 << 10

// ClearSetID clears n's set-user-ID bit, and its set-group-ID bit when it is
// group-executable, as the kernel does when a writer without CAP_FSETID
// writes a file (should_remove_suid): WRITE's data goes through a descriptor
// opened as root, for which the kernel keeps them, so a WRITE by anyone but
// root clears them here first. Run as root.
func (s *Store) ClearSetID(n *Node) error {
	kill := func(m uint32) uint32 {
		k := m & unix.S_ISUID
		if m&(unix.S_ISGID|unix.S_IXGRP) == unix.S_ISGID|unix.S_IXGRP {
			k |= unix.S_ISGID
		}
		if m&unix.S_IFMT != unix.S_IFREG {
			k = 0
		}
		return k
	}
	if kill(n.Stat.Mode) == 0 {
		return nil
	}
	if err := n.Refresh(); err != nil {
		return err
	}
	k := kill(n.Stat.Mode)
	if k == 0 {
		return nil
	}
	defer s.changed([]*Node{n})
	if err := rawsys.Fchmodat(unix.AT_FDCWD, n.procPath(), n.Stat.Mode&0o7777&^k); err != nil {
		return opErr("chmod", err)
	}
	return nil
}

// WriteAt writes data at off. OpenIO must have succeeded.
func (s *Store) WriteAt(n *Node, data []byte, off int64) (int, error) {
	fd, rw := s.writeIO(n)
	if !rw {
		return 0, opErr("write", unix.EROFS)
	}
	defer s.changed([]*Node{n}) // also after a short write
	// A small write only copies into the page cache; a large one may be
	// throttled (balance_dirty_pages), so it takes the scheduler's syscall path.
	pwrite := rawsys.Pwrite
	if len(data) > rawWriteMax {
		pwrite = unix.Pwrite
	}
	total := 0
	for total < len(data) {
		k, err := pwrite(fd, data[total:], off+int64(total))
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return total, opErr("write", err)
		}
		if k == 0 {
			return total, opErr("write", io.ErrShortWrite)
		}
		total += k
	}
	return total, nil
}

// Append writes data at the end of n's file, atomically with respect to
// every other write of the file (the server's and local processes'): one
// write with RWF_APPEND, which the kernel places at the end of file under the
// file's lock. It returns where the data went and how much of it was written
// (less only on an error such as ENOSPC). OpenIO must have succeeded.
//
// Where it went is read back from the I/O descriptor's file offset, which
// such a write moves to its end and which nothing else uses (every other read
// and write names its offset); one append of the file at a time reads it. No
// descriptor of its own: an extra open of the file would break a lease on it,
// and an extra descriptor kept open would refuse one.
//
// before, if not nil, is called with the offset the data is to go to (the
// file's size plus the appends of the file ahead of this one), outside any
// lock, so that the befores of appends made at once run together (the server
// saves there, one commit for all, where a retransmitted append would find its
// data). The writes then run in the order of those offsets; if the size at a
// write's turn is not the offset its before was given (an append ahead failed,
// a local process wrote), before is called again with the size, in the
// one-at-a-time section (a few times, while a local process keeps appending). An error from before is returned and nothing is
// written.
func (s *Store) Append(n *Node, data []byte, before func(off int64) error) (off int64, written int, err error) {
	e := n.ent
	fd, rw := s.writeIO(n)
	if !rw {
		return 0, 0, opErr("append", unix.EROFS)
	}
	defer s.changed([]*Node{n})
	if before == nil {
		e.appendMu.Lock()
		defer e.appendMu.Unlock()
		return appendWrite(fd, data)
	}
	at, turn, err := e.appendReserve(fd, int64(len(data)))
	if err != nil {
		return 0, 0, err
	}
	berr := before(at)
	e.appendMu.Lock()
	defer e.appendMu.Unlock()
	for e.appendTurn != turn {
		e.appendCond.Wait()
	}
	defer func() {
		e.appendTurn++
		e.appendPending--
		e.appendCond.Broadcast()
	}()
	if berr != nil {
		return 0, 0, berr
	}
	// A local process appending meanwhile moves the end again while before
	// runs: a few tries, then the write goes where it goes.
	for range 4 {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return 0, 0, opErr("append: stat", err)
		}
		if st.Size == at {
			break
		}
		at = st.Size
		if err := before(at); err != nil {
			return 0, 0, err
		}
	}
	return appendWrite(fd, data)
}

// appendReserve takes the next place in e's appends: the offset an append of
// n bytes is to go to and its turn to write.
func (e *entry) appendReserve(fd int, n int64) (at int64, turn uint64, err error) {
	e.appendMu.Lock()
	defer e.appendMu.Unlock()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, 0, opErr("append: stat", err)
	}
	if e.appendCond == nil {
		e.appendCond = sync.NewCond(&e.appendMu)
	}
	at = st.Size
	if e.appendPending > 0 && e.appendEnd > at {
		at = e.appendEnd
	}
	e.appendEnd, e.appendPending = at+n, e.appendPending+1
	turn = e.appendNext
	e.appendNext++
	return at, turn, nil
}

// appendWrite is Append's write, with e.appendMu held.
func appendWrite(fd int, data []byte) (off int64, written int, err error) {
	var k int
	for {
		// Offset -1: the descriptor's own offset, which the write updates.
		k, err = unix.Pwritev2(fd, [][]byte{data}, -1, unix.RWF_APPEND)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return 0, 0, opErr("append", err)
	}
	end, err := unix.Seek(fd, 0, io.SeekCurrent)
	if err != nil {
		return 0, k, opErr("append: seek", err)
	}
	return end - int64(k), k, nil
}

// Allocate is fallocate(2) on n's file with mode (0, FALLOC_FL_KEEP_SIZE, or
// FALLOC_FL_PUNCH_HOLE|FALLOC_FL_KEEP_SIZE), through the I/O descriptor, as
// the other writes are: a descriptor of its own would break a lease on the
// file. It is not flushed. OpenIO must have succeeded.
func (s *Store) Allocate(n *Node, mode uint32, off, length int64) error {
	fd, rw := s.writeIO(n)
	if !rw {
		return opErr("fallocate", unix.EROFS)
	}
	defer s.changed([]*Node{n}) // also after a partial allocation
	for {
		err := unix.Fallocate(fd, mode, off, length)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return opErr("fallocate", err)
		}
		return nil
	}
}

// Truncate sets a regular file's size. OpenIO must have succeeded.
func (s *Store) Truncate(n *Node, size int64) error {
	fd, rw := s.writeIO(n)
	if !rw {
		return opErr("truncate", unix.EROFS)
	}
	if err := unix.Ftruncate(fd, size); err != nil {
		return opErr("truncate", err)
	}
	s.changed([]*Node{n})
	return nil
}

// Sync flushes n to stable storage: data and the metadata needed to read it back
// (fdatasync) or everything (fsync). OpenIO must have succeeded.
// Through the store's io_uring when it has one (package uring).
func (s *Store) Sync(n *Node, dataOnly bool) error {
	if s.ring != nil {
		err := s.ring.Fsync(n.io(), dataOnly)
		if err != uring.ErrNotFlushed {
			if err != nil {
				return opErr("fsync", err)
			}
			return nil
		}
	}
	return SyncNode(n, dataOnly)
}

// SyncNode is Sync, for wrappers (fault injection) that stand in for a Store's.
func SyncNode(n *Node, dataOnly bool) error {
	fd := n.io()
	var err error
	if dataOnly {
		err = unix.Fdatasync(fd)
	} else {
		err = unix.Fsync(fd)
	}
	if err != nil {
		return opErr("fsync", err)
	}
	return nil
}

// SyncExport flushes the whole file system an export lives on. A removed
// export (RemoveExport) gives ErrStale: its descriptors are closed.
func (s *Store) SyncExport(e *Export) error {
	if !e.hold() {
		return ErrStale
	}
	defer e.drop()
	if err := unix.Syncfs(e.mountFD); err != nil {
		return opErr("syncfs", err)
	}
	return nil
}

// SyncFS flushes the whole file system of n's export (for objects, such as
// symlinks and devices, that cannot be opened to fsync them).
func (s *Store) SyncFS(n *Node) error { return s.SyncExport(n.Export) }
