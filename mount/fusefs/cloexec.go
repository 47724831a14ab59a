package fusefs

import (
	"os"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// newServer is fuse.NewServer with the /dev/fuse descriptor kept out of
// every program this process runs.
//
// Why: go-fuse's mount(2) path (DirectMount, root's) opens /dev/fuse
// without O_CLOEXEC and leaves it so, unlike its fusermount path. Every
// child exec'd after it (a test's helper, a lock child, an NFS tool, the
// fsx child) then holds the FUSE connection open: once this process is
// gone, the connection is not aborted, and a child waiting on the mount
// (a page fault on a mapped file) waits for good, with its memory map
// locked, so that reading its /proc entries hangs ps(1) and every /proc
// scan on the machine (seen twice in CI runs this way).
//
// As root the mount is made while syscall.ForkLock is held for reading, so
// no exec starts between the open and the flag being set; DirectMountStrict
// keeps go-fuse from falling back to exec'ing fusermount3 under the lock
// (which would wait for the lock it is under). As another user go-fuse
// runs fusermount3 and sets the flag itself.
//
// It also returns the mount's epoch (epoch.go): its own duplicate of the
// new /dev/fuse descriptor, told from the others by making one mount at a
// time (newServerMu).
func newServer(fsys fuse.RawFileSystem, dir string, mo *fuse.MountOptions) (*fuse.Server, *epoch, error) {
	newServerMu.Lock()
	defer newServerMu.Unlock()
	before := fuseFDs()
	if !mo.DirectMount || os.Geteuid() != 0 {
		srv, err := fuse.NewServer(fsys, dir, mo)
		if err != nil {
			return nil, nil, err
		}
		return srv, newEpoch(before, fuseFDs()), nil
	}
	mo.DirectMountStrict = true
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	srv, err := fuse.NewServer(fsys, dir, mo)
	closeFUSEOnExec()
	if err != nil {
		return nil, nil, err
	}
	return srv, newEpoch(before, fuseFDs()), nil
}

// newServerMu: one mount made at a time in this process (newServer).
var newServerMu sync.Mutex

// closeFUSEOnExec sets close-on-exec on this process's /dev/fuse
// descriptors.
func closeFUSEOnExec() {
	for fd := range fuseFDs() { // epoch.go
		syscall.CloseOnExec(fd)
	}
}

// waitMount is srv.WaitMount with no program started meanwhile. Why:
// go-fuse then opens the mount's root file .go-fuse-epoll-hack without
// O_CLOEXEC (its poll hack) and closes it at once; a child forked in between
// keeps it for its whole life, and the mount stays busy for as long (seen in
// CI: an sqlite3 of another test held it, and the unmount failed).
func waitMount(srv *fuse.Server) error {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	return srv.WaitMount()
}
