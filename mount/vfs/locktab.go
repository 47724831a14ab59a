package vfs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"snfs/snfs1"
)

// LockKind is a lock request's type.
type LockKind uint8

// Lock kinds.
const (
	Unlock LockKind = iota
	ReadLock
	WriteLock
)

// LockHolder is the lock a GETLK or a refused SETLK met.
type LockHolder struct {
	Kind           LockKind
	Offset, Length uint64 // Length 0: to the end of the file
}

// ErrNoLocks: the server refused the lock for its grace period or this
// client's bound; the caller answers ENOLCK.
var ErrNoLocks = errors.New("vfs: no locks available")

// locks is the lock table of the mode's server locks (snfs mode's, which
// adds its delegations in snfsLocks, or nfs mode's NLM): the blocked requests waiting for
// their CB_GRANTED, and the owners that have taken locks on each inode (so
// that the last close of an owner's descriptor, FLUSH, releases its locks).
type LockTable struct {
	Mu      sync.Mutex
	Waiting map[WaitKey][]*LockWait    // guarded by Mu
	Owners  map[*Inode]map[uint64]bool // guarded by Mu
	// Held: the descriptors that took locks (locklost.go); guarded by Mu.
	Held  map[*File]*HeldLocks
	NHeld atomic.Int64 // len(held), read without Mu by every read and write
	// ranges: what each owner holds on each file, for its reclaim after a
	// server restart (lockreclaim.go); guarded by Mu.
	ranges map[*Inode]map[uint64][]heldSpan
	// Verf: in snfs mode, the server verifier the locks held are held
	// under - the session's, once the locks were reclaimed after a restart
	// (lockreclaim.go); guarded by Mu.
	Verf snfs1.Verifier
	// LostNotify: files whose locks the reclaim found lost, whose kernel
	// pages are yet to be dropped (serverRestarted); guarded by Mu.
	LostNotify []*Inode
}

type WaitKey struct {
	FH             string
	Owner          uint64
	Type           snfs1.LockType
	Offset, Length uint64
}

// lockWait is a blocked request: granted by CB_GRANTED, or given up
// (interrupted: a grant that comes after is unwanted).
type LockWait struct {
	Granted chan struct{}
	Done    bool // granted or given up; guarded by locks.Mu
}

func ProtoLockType(k LockKind) snfs1.LockType {
	if k == WriteLock {
		return snfs1.LockWrite
	}
	return snfs1.LockRead
}

// Getlk is GETLK: the lock that would stop owner's lock of kind on (off, n),
// or nil.
func (fs *FS) Getlk(ctx context.Context, i *Inode, owner uint64, kind LockKind, off, n uint64) (*LockHolder, error) {
	return fs.ops.Getlk(ctx, i, owner, kind, off, n)
}

// Setlk is SETLK (wait false) and SETLKW (wait true) of owner on (off, n):
// an unlock, or a lock that is granted, refused (EAGAIN), refused as a
// deadlock (EDEADLK), or, with wait, waited for until CB_GRANTED or until ctx
// ends (the process was interrupted: EINTR, and the request is withdrawn on
// the server). f's dirty data is written back first.
func (fs *FS) Setlk(ctx context.Context, f *File, owner uint64, kind LockKind, off, n uint64, wait bool) error {
	return fs.ops.Setlk(ctx, f, owner, kind, off, n, wait)
}

// graceWait is how long a request the server refused for its grace period
// waits before it is sent again.
const graceWait = time.Second

// GraceRetry sends a LOCK or LOCKT again while the server answers
// LOCK_GRACE (its grace period after a restart: the Linux NFS client waits
// it out too), until ctx ends.
func GraceRetry(ctx context.Context, call func() (snfs1.LockStat, error)) error {
	for {
		st, err := call()
		if err != nil || st != snfs1.LockGrace {
			return err
		}
		t := time.NewTimer(graceWait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("vfs: waiting for the server's grace period to end: %w", syscall.EINTR)
		}
	}
}

// LockGranted drops what the kernel cached of i: another client may have
// changed the file while this one waited for the lock.
func (fs *FS) LockGranted(i *Inode) {
	i.Mu.Lock()
	i.InvalidateLocked()
	i.Mu.Unlock()
	fs.NotifyData(i)
}

// UnlockOwner releases every lock owner holds on i (FLUSH: a process closed a
// descriptor of the file, or died; RELEASE of an open with flock locks). It
// sends nothing unless owner took a lock on i.
func (fs *FS) UnlockOwner(ctx context.Context, i *Inode, owner uint64) error {
	return fs.ops.UnlockOwner(ctx, i, owner)
}

func (l *LockTable) NoteOwner(i *Inode, owner uint64) {
	l.Mu.Lock()
	defer l.Mu.Unlock()
	l.NoteOwnerLocked(i, owner)
}

func (l *LockTable) NoteOwnerLocked(i *Inode, owner uint64) {
	if l.Owners == nil {
		l.Owners = map[*Inode]map[uint64]bool{}
	}
	if l.Owners[i] == nil {
		l.Owners[i] = map[uint64]bool{}
	}
	l.Owners[i][owner] = true
}

func (l *LockTable) ForgetOwner(i *Inode, owner uint64) {
	l.Mu.Lock()
	defer l.Mu.Unlock()
	delete(l.Owners[i], owner)
	if len(l.Owners[i]) == 0 {
		delete(l.Owners, i)
	}
}

func (l *LockTable) DropRanges(i *Inode, owner uint64) {
	l.Mu.Lock()
	defer l.Mu.Unlock()
	l.dropRangesLocked(i, owner)
}

func (l *LockTable) HasOwner(i *Inode, owner uint64) bool {
	l.Mu.Lock()
	defer l.Mu.Unlock()
	return l.Owners[i][owner]
}

func (l *LockTable) AddWait(k WaitKey) *LockWait {
	w := &LockWait{Granted: make(chan struct{})}
	l.Mu.Lock()
	defer l.Mu.Unlock()
	if l.Waiting == nil {
		l.Waiting = map[WaitKey][]*LockWait{}
	}
	l.Waiting[k] = append(l.Waiting[k], w)
	return w
}

func (l *LockTable) DropWait(k WaitKey, w *LockWait) {
	l.Mu.Lock()
	defer l.Mu.Unlock()
	ws := l.Waiting[k]
	for j, x := range ws {
		if x == w {
			ws = append(ws[:j], ws[j+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(l.Waiting, k)
	} else {
		l.Waiting[k] = ws
	}
}

// GiveUp marks w given up; false if it was granted first.
func (l *LockTable) GiveUp(w *LockWait) bool {
	l.Mu.Lock()
	defer l.Mu.Unlock()
	if w.Done {
		return false
	}
	w.Done = true
	return true
}
