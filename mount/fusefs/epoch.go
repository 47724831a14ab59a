package fusefs

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// The kernel's names (dentries) of directories the mount lets it keep
// (vfs.Ops.EntryTTLLocked above 0: snfs mode's directories under a
// write-back permit) are dropped all at once, without any directory's lock,
// by FUSE_NOTIFY_INC_EPOCH (Linux 6.16, protocol 7.44): every dentry
// looked up before the notification is stale at its next use, and one
// whose lookup was in flight is too (the kernel reads the epoch before it
// sends the lookup). FUSE_NOTIFY_INVAL_ENTRY would take the directory's
// lock, which a request of the kernel's waiting on this mount may hold
// (docs/mount.md "The name cache"). go-fuse has no call for it, so the
// mount writes the notification on its own duplicate of the connection's
// descriptor, found when the mount is made (newServer).

// notifyIncEpoch is FUSE_NOTIFY_INC_EPOCH's code (include/uapi/linux/fuse.h).
const notifyIncEpoch = 8

// minorIncEpoch is the first protocol minor version with it.
const minorIncEpoch = 44

// epoch is one mount's FUSE_NOTIFY_INC_EPOCH.
type epoch struct {
	mu sync.Mutex // guards fd against close
	fd int        // a close-on-exec duplicate of the connection's descriptor; -1: none (closed, or not found)
}

// bump drops every name the kernel keeps; false when it cannot.
func (e *epoch) bump() bool {
	if e == nil {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fd < 0 {
		return false
	}
	var msg [16]byte // fuse_out_header: len, error (the notify code), unique 0
	binary.LittleEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.LittleEndian.PutUint32(msg[4:], notifyIncEpoch)
	_, err := syscall.Write(e.fd, msg[:])
	return err == nil
}

// close forgets the descriptor (the mount is gone).
func (e *epoch) close() {
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fd >= 0 {
		syscall.Close(e.fd)
		e.fd = -1
	}
}

// usable reports whether the kernel takes FUSE_NOTIFY_INC_EPOCH; if not,
// the descriptor is closed.
func (e *epoch) usable(srv *fuse.Server) bool {
	if e == nil {
		return false
	}
	if srv.KernelSettings().Minor < minorIncEpoch {
		e.close()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.fd >= 0
}

// fuseFDs are this process's /dev/fuse descriptors.
func fuseFDs() map[int]bool {
	out := map[int]bool{}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return out
	}
	for _, ent := range ents {
		link, err := os.Readlink(filepath.Join("/proc/self/fd", ent.Name()))
		if err != nil || link != "/dev/fuse" {
			continue
		}
		if fd, err := strconv.Atoi(ent.Name()); err == nil {
			out[fd] = true
		}
	}
	return out
}

// newEpoch duplicates the one /dev/fuse descriptor in after that is not in
// before (a mount made by newServer, which makes one at a time); with none
// or more than one, the mount has no epoch to bump.
func newEpoch(before, after map[int]bool) *epoch {
	found := -1
	for fd := range after {
		if before[fd] {
			continue
		}
		if found >= 0 {
			return &epoch{fd: -1}
		}
		found = fd
	}
	if found < 0 {
		return &epoch{fd: -1}
	}
	dup, err := unix.FcntlInt(uintptr(found), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return &epoch{fd: -1}
	}
	return &epoch{fd: dup}
}
