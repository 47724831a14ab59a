package vfs

import (
	"context"
	"fmt"
	"syscall"

	"snfs/snfs1"
)

// Lost locks (docs/mount.md, "Lost locks"; docs/protocol.md, "Lock leases"):
// the server revokes the locks of a client whose callback path stays dead past
// the callback timeout, and a server restart loses the locks the mount could
// not reclaim in its grace period (lockreclaim.go). A descriptor through which a lock was taken then fails its
// reads and writes with EIO, as the Linux NFS client fails the I/O of a lost
// lock, instead of going on unprotected; it works again once its owners have
// unlocked the whole file (or closed it).
//
// The mount learns of a loss by renewing its lock lease: before the I/O of a
// descriptor that holds locks, if the last renewal was sent more than half a
// callback timeout ago, it sends LOCKT; SNFS_ERR_FENCED means the server
// revoked this client's locks. After a server restart the reclaim marks the
// locks it could not take back lost, and then moves the others to the new
// server verifier (locks.verf); a descriptor whose locks were granted under
// another verifier than that one (granted by the old server, but recorded
// after the reclaim looked) lost them too (checked at every I/O). A LOCK or LOCKU answered SNFS_ERR_FENCED
// tells the same as a renewal's. The server revokes only after a probe went
// unanswered for a whole callback timeout, and a renewal answered within half
// of it vouches for the locks until then.
//
// I/O that never reaches the mount: a loop (lockLeaseLoop) renews the lease
// while descriptors hold locks, so that a loss is learned without it; then
// the kernel's pages of the files are dropped (their next read reaches the
// mount), and a passthrough descriptor's cache file is watched (pinned.go's
// watch), whose events refuse with EIO the accesses of the processes that
// took the lost locks (all passthrough opens of an inode share one backing
// file: the process, not the descriptor, is what the event tells).

// ErrLockLost: the descriptor's lock was lost (revoked by the server, or a
// server restart); its I/O fails with EIO.
var ErrLockLost = fmt.Errorf("vfs: this descriptor's lock was lost: %w", syscall.EIO)

// heldLocks is what a descriptor holds: its lock owners, the server verifier
// their locks were granted under, and whether they were lost.
type heldLocks struct {
	owners map[uint64]bool
	verf   snfs1.Verifier
	lost   bool
	// pids: the threads that took the locks (NoteLockPid), their processes
	// once lost (lockLostLocked); ptIno, once
	// lost, the inode number of the descriptor's passthrough cache file (0:
	// none). The watch refuses those processes' accesses to that file.
	pids  map[uint32]bool
	ptIno uint64
}

// noteHeld records that owner took a lock through f.
func (fs *FS) noteHeld(f *File, owner uint64) {
	l := fs.lockTable()
	l.mu.Lock()
	defer l.mu.Unlock()
	verf := l.verf
	if l.held == nil {
		l.held = map[*File]*heldLocks{}
	}
	h := l.held[f]
	if h == nil { // a lost descriptor stays lost until its owners unlock
		h = &heldLocks{owners: map[uint64]bool{}, verf: verf}
		l.held[f] = h
	}
	h.owners[owner] = true
	l.nheld.Store(int64(len(l.held)))
}

// dropHeld forgets owner's locks on i (it unlocked the whole file, or closed
// it); with f non-nil, every owner's locks through f (its release).
func (fs *FS) dropHeld(i *Inode, f *File, owner uint64) {
	l := fs.lockTable()
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if f != nil {
		delete(l.held, f)
		l.nheld.Store(int64(len(l.held)))
		return
	}
	for hf, h := range l.held {
		if hf.i == i {
			delete(h.owners, owner)
			if len(h.owners) == 0 {
				delete(l.held, hf)
			}
		}
	}
	l.nheld.Store(int64(len(l.held)))
}

// locksLost marks every descriptor's locks lost (the server revoked this
// client's locks), or with verf set only those granted under another server
// verifier (the server restarted). Outside a read or write (notify), the
// kernel's pages of their files are dropped, so that their next read reaches
// the mount; inside one the kernel holds the file, and the notification
// would wait for it. A passthrough descriptor's cache file is watched from
// now on (lockLostLocked), whatever notify.
func (fs *FS) locksLost(why string, verf *snfs1.Verifier, notify bool) {
	inodes := fs.markLost(why, verf)
	if notify {
		for _, i := range inodes {
			fs.notifyData(i)
		}
	}
}

// markLost is locksLost without the notifications: it returns the files of
// the descriptors it marked.
func (fs *FS) markLost(why string, verf *snfs1.Verifier) []*Inode {
	l := fs.lockTable()
	fs.ops.dropDelegations(verf)
	var inodes []*Inode
	l.mu.Lock()
	for f, h := range l.held {
		if h.lost || verf != nil && h.verf == *verf {
			continue
		}
		h.lost = true
		fs.ops.lockLostLocked(f, h)
		inodes = append(inodes, f.i)
		for o := range h.owners {
			l.dropRangesLocked(f.i, o) // nothing to reclaim
		}
	}
	l.mu.Unlock()
	if len(inodes) > 0 {
		fs.log.Warn("file locks lost: their descriptors' reads and writes fail with EIO until they unlock", "why", why, "files", len(inodes))
	}
	return inodes
}

// lockCheck is called before f's reads and writes: ErrLockLost if f's lock
// was lost, after renewing the lock lease if it is due.
func (fs *FS) lockCheck(ctx context.Context, f *File) error {
	l := fs.lockTable()
	if l == nil || l.nheld.Load() == 0 {
		return nil
	}
	lost, ok := l.heldState(f)
	if !ok {
		return nil
	}
	if !lost {
		var err error
		if lost, err = fs.ops.lockLease(ctx, f); err != nil {
			return err
		}
	}
	if lost {
		return ErrLockLost
	}
	return nil
}

// lockTable is the mode's lock state (FS.lockTab; nil without server locks).
func (fs *FS) lockTable() *locks { return fs.lockTab }

// lockVerf is the server verifier the locks held are held under.
func (l *locks) lockVerf() snfs1.Verifier {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.verf
}

func (l *locks) heldState(f *File) (lost, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.held[f]
	if h == nil {
		return false, false
	}
	return h.lost, true
}

// anyHeld is the file of a descriptor that holds locks not lost, or nil.
func (l *locks) anyHeld() *Inode {
	if l.nheld.Load() == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for f, h := range l.held {
		if !h.lost {
			return f.i
		}
	}
	return nil
}
