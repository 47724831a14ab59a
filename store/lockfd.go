package store

import (
	"errors"

	"golang.org/x/sys/unix"

	"snfs/rawsys"
)

// OpenDescriptionNow is OpenDescription that does not wait: where the open
// would wait for a lease to be broken (a client's dirty data being written
// back), it fails with EWOULDBLOCK (the break has started).
func (s *Store) OpenDescriptionNow(n *Node) (int, error) {
	if n.Stat.Mode&unix.S_IFMT != unix.S_IFREG {
		return -1, opErr("open for locks", unix.EINVAL)
	}
	open := rawsys.Open
	if s.gated.Load() > 0 {
		open = unix.Open // an open gate's answer may be waited for (openperm.go)
	}
	fd, err := open(n.procPath(), unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil && !errors.Is(err, unix.EWOULDBLOCK) {
		fd, err = open(n.procPath(), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	}
	if err != nil {
		return -1, opErr("open for locks", err)
	}
	return fd, nil
}

// OpenDescription opens a new open file description of the regular file n,
// read-write, or read-only where the file system refuses writing: the lock
// driver holds each lock owner's locks on a description of its own
// (F_OFD_SETLK), so that processes on the server meet them. The caller closes
// it. Call it with root credentials (outside As).
func (s *Store) OpenDescription(n *Node) (int, error) {
	if n.Stat.Mode&unix.S_IFMT != unix.S_IFREG {
		return -1, opErr("open for locks", unix.EINVAL)
	}
	fd, err := openFileGated(n.procPath(), unix.O_RDWR|unix.O_CLOEXEC, s.gated.Load() > 0)
	if err != nil {
		fd, err = openFileGated(n.procPath(), unix.O_RDONLY|unix.O_CLOEXEC, s.gated.Load() > 0)
	}
	if err != nil {
		return -1, opErr("open for locks", err)
	}
	return fd, nil
}
