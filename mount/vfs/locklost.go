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
// server verifier (locks.Verf); a descriptor whose locks were granted under
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
type HeldLocks struct {
	owners map[uint64]bool
	Verf   snfs1.Verifier
	Lost   bool
	// Pids: the threads that took the locks (NoteLockPid), their processes
	// once lost (lockLostLocked); PtIno, once
	// lost, the inode number of the descriptor's passthrough cache file (0:
	// none). The watch refuses those processes' accesses to that file.
	Pids  map[uint32]bool
	PtIno uint64
}

// NoteHeld records that owner took a lock through f.
func (fs *FS) NoteHeld(f *File, owner uint64) {
	l := fs.lockTable()
	l.Mu.Lock()
	defer l.Mu.Unlock()
	verf := l.Verf
	if l.Held == nil {
		l.Held = map[*File]*HeldLocks{}
	}
	h := l.Held[f]
	if h == nil { // a lost descriptor stays lost until its owners unlock
		h = &HeldLocks{owners: map[uint64]bool{}, Verf: verf}
		l.Held[f] = h
	}
	h.owners[owner] = true
	l.NHeld.Store(int64(len(l.Held)))
}

// DropHeld forgets owner's locks on i (it unlocked the whole file, or closed
// it); with f non-nil, every owner's locks through f (its release).
func (fs *FS) DropHeld(i *Inode, f *File, owner uint64) {
	l := fs.lockTable()
	if l == nil {
		return
	}
	l.Mu.Lock()
	defer l.Mu.Unlock()
	if f != nil {
		delete(l.Held, f)
		l.NHeld.Store(int64(len(l.Held)))
		return
	}
	for hf, h := range l.Held {
		if hf.I == i {
			delete(h.owners, owner)
			if len(h.owners) == 0 {
				delete(l.Held, hf)
			}
		}
	}
	l.NHeld.Store(int64(len(l.Held)))
}

// LocksLost marks every descriptor's locks lost (the server revoked this
// client's locks), or with verf set only those granted under another server
// verifier (the server restarted). Outside a read or write (notify), the
// kernel's pages of their files are dropped, so that their next read reaches
// the mount; inside one the kernel holds the file, and the notification
// would wait for it. A passthrough descriptor's cache file is watched from
// now on (lockLostLocked), whatever notify.
func (fs *FS) LocksLost(why string, verf *snfs1.Verifier, notify bool) {
	inodes := fs.MarkLost(why, verf)
	if notify {
		for _, i := range inodes {
			fs.NotifyData(i)
		}
	}
}

// MarkLost is locksLost without the notifications: it returns the files of
// the descriptors it marked.
func (fs *FS) MarkLost(why string, verf *snfs1.Verifier) []*Inode {
	l := fs.lockTable()
	fs.ops.DropDelegations(verf)
	var inodes []*Inode
	l.Mu.Lock()
	for f, h := range l.Held {
		if h.Lost || verf != nil && h.Verf == *verf {
			continue
		}
		h.Lost = true
		fs.ops.LockLostLocked(f, h)
		inodes = append(inodes, f.I)
		for o := range h.owners {
			l.dropRangesLocked(f.I, o) // nothing to reclaim
		}
	}
	l.Mu.Unlock()
	if len(inodes) > 0 {
		fs.log.Warn("file locks lost: their descriptors' reads and writes fail with EIO until they unlock", "why", why, "files", len(inodes))
	}
	return inodes
}

// LockCheck is called before f's reads and writes: ErrLockLost if f's lock
// was lost, after renewing the lock lease if it is due.
func (fs *FS) LockCheck(ctx context.Context, f *File) error {
	l := fs.lockTable()
	if l == nil || l.NHeld.Load() == 0 {
		return nil
	}
	lost, ok := l.HeldState(f)
	if !ok {
		return nil
	}
	if !lost {
		var err error
		if lost, err = fs.ops.LockLease(ctx, f); err != nil {
			return err
		}
	}
	if lost {
		return ErrLockLost
	}
	return nil
}

// lockTable is the mode's lock state (FS.LockTab; nil without server locks).
func (fs *FS) lockTable() *LockTable { return fs.LockTab }

// LockVerf is the server verifier the locks held are held under.
func (l *LockTable) LockVerf() snfs1.Verifier {
	l.Mu.Lock()
	defer l.Mu.Unlock()
	return l.Verf
}

func (l *LockTable) HeldState(f *File) (lost, ok bool) {
	l.Mu.Lock()
	defer l.Mu.Unlock()
	h := l.Held[f]
	if h == nil {
		return false, false
	}
	return h.Lost, true
}

// AnyHeld is the file of a descriptor that holds locks not lost, or nil.
func (l *LockTable) AnyHeld() *Inode {
	if l.NHeld.Load() == 0 {
		return nil
	}
	l.Mu.Lock()
	defer l.Mu.Unlock()
	for f, h := range l.Held {
		if !h.Lost {
			return f.I
		}
	}
	return nil
}
