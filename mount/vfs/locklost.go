package vfs

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"snfs/nfs3"
	"snfs/snfs1"
)

// Lost locks (docs/mount.md, "Lost locks"; docs/protocol.md, "Lock leases"):
// the server revokes the locks of a client whose callback path stays dead past
// the callback timeout, and a server restart loses every lock (they are not
// reclaimed). A descriptor through which a lock was taken then fails its
// reads and writes with EIO, as the Linux NFS client fails the I/O of a lost
// lock, instead of going on unprotected; it works again once its owners have
// unlocked the whole file (or closed it).
//
// The mount learns of a loss by renewing its lock lease: before the I/O of a
// descriptor that holds locks, if the last renewal was sent more than half a
// callback timeout ago, it sends LOCKT; SNFS_ERR_FENCED means the server
// revoked this client's locks, and a server verifier other than the one the
// lock was granted under means the server restarted (checked at every I/O
// against the session's verifier, which the session updates as soon as it
// registers again after a restart). A LOCK or LOCKU answered SNFS_ERR_FENCED
// tells the same as a renewal's. The server revokes only after a probe went
// unanswered for a whole callback timeout, and a renewal answered within half
// of it vouches for the locks until then.

// ErrLockLost: the descriptor's lock was lost (revoked by the server, or a
// server restart); its I/O fails with EIO.
var ErrLockLost = fmt.Errorf("vfs: this descriptor's lock was lost: %w", syscall.EIO)

// heldLocks is what a descriptor holds: its lock owners, the server verifier
// their locks were granted under, and whether they were lost.
type heldLocks struct {
	owners map[uint64]bool
	verf   snfs1.Verifier
	lost   bool
}

// noteHeld records that owner took a lock through f.
func (fs *FS) noteHeld(f *File, owner uint64) {
	l := &fs.sn.locks
	verf := fs.sn.sess.ServerVerifier()
	l.mu.Lock()
	defer l.mu.Unlock()
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
	l := &fs.sn.locks
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
// would wait for it.
func (fs *FS) locksLost(why string, verf *snfs1.Verifier, notify bool) {
	l := &fs.sn.locks
	l.dropDelegs(verf)
	var inodes []*Inode
	l.mu.Lock()
	for f, h := range l.held {
		if h.lost || verf != nil && h.verf == *verf {
			continue
		}
		h.lost = true
		inodes = append(inodes, f.i)
	}
	l.mu.Unlock()
	if len(inodes) == 0 {
		return
	}
	fs.log.Warn("file locks lost: their descriptors' reads and writes fail with EIO until they unlock", "why", why, "files", len(inodes))
	for _, i := range inodes {
		if notify {
			fs.notifyData(i)
		}
	}
}

// lockCheck is called before f's reads and writes: ErrLockLost if f's lock
// was lost, after renewing the lock lease if it is due.
func (fs *FS) lockCheck(ctx context.Context, f *File) error {
	if fs.sn == nil || fs.sn.locks.nheld.Load() == 0 {
		return nil
	}
	l := &fs.sn.locks
	lost, ok := l.heldState(f)
	if !ok {
		return nil
	}
	if !lost {
		// A server restart the session has seen needs no round trip.
		verf := fs.sn.sess.ServerVerifier()
		fs.locksLost("the server restarted", &verf, false)
		lost, _ = l.heldState(f)
	}
	if !lost {
		if err := fs.renewLocks(ctx, f.i); err != nil {
			return err
		}
		lost, _ = l.heldState(f)
	}
	if lost {
		return ErrLockLost
	}
	return nil
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

// renewLocks renews this client's lock lease if the last renewal was sent
// more than half a callback timeout ago: a LOCKT of i (one at a time).
func (fs *FS) renewLocks(ctx context.Context, i *Inode) error {
	l := &fs.sn.locks
	l.renewMu.Lock()
	defer l.renewMu.Unlock()
	if time.Since(l.renewed) < fs.sn.sess.CallbackTimeout()/2 {
		return nil
	}
	start := time.Now()
	_, err := fs.sn.sess.LockT(ctx, snfs1.LockTArgs{File: i.FH, Type: snfs1.LockRead, Offset: 0, Length: 1})
	switch {
	case errors.Is(err, snfs1.ErrFenced):
		fs.locksLost("the server revoked this client's locks", nil, false)
	case errors.Is(err, nfs3.ErrStale):
		return nil // the file is gone on the server: its I/O says so
	case err != nil:
		return fmt.Errorf("vfs: renewing the lock lease: %w", err)
	}
	verf := fs.sn.sess.ServerVerifier()
	fs.locksLost("the server restarted", &verf, false)
	l.renewed = start
	return nil
}
