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
type locks struct {
	mu      sync.Mutex
	waiting map[waitKey][]*lockWait    // guarded by mu
	owners  map[*Inode]map[uint64]bool // guarded by mu
	// held: the descriptors that took locks (locklost.go); guarded by mu.
	held  map[*File]*heldLocks
	nheld atomic.Int64 // len(held), read without mu by every read and write
	// ranges: what each owner holds on each file, for its reclaim after a
	// server restart (lockreclaim.go); guarded by mu.
	ranges map[*Inode]map[uint64][]heldSpan
	// verf: in snfs mode, the server verifier the locks held are held
	// under - the session's, once the locks were reclaimed after a restart
	// (lockreclaim.go); guarded by mu.
	verf snfs1.Verifier
	// lostNotify: files whose locks the reclaim found lost, whose kernel
	// pages are yet to be dropped (serverRestarted); guarded by mu.
	lostNotify []*Inode
}

type waitKey struct {
	fh             string
	owner          uint64
	typ            snfs1.LockType
	offset, length uint64
}

// lockWait is a blocked request: granted by CB_GRANTED, or given up
// (interrupted: a grant that comes after is unwanted).
type lockWait struct {
	granted chan struct{}
	done    bool // granted or given up; guarded by locks.mu
}

func protoLockType(k LockKind) snfs1.LockType {
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

// graceRetry sends a LOCK or LOCKT again while the server answers
// LOCK_GRACE (its grace period after a restart: the Linux NFS client waits
// it out too), until ctx ends.
func graceRetry(ctx context.Context, call func() (snfs1.LockStat, error)) error {
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

// lockGranted drops what the kernel cached of i: another client may have
// changed the file while this one waited for the lock.
func (fs *FS) lockGranted(i *Inode) {
	i.mu.Lock()
	i.invalidateLocked()
	i.mu.Unlock()
	fs.notifyData(i)
}

// UnlockOwner releases every lock owner holds on i (FLUSH: a process closed a
// descriptor of the file, or died; RELEASE of an open with flock locks). It
// sends nothing unless owner took a lock on i.
func (fs *FS) UnlockOwner(ctx context.Context, i *Inode, owner uint64) error {
	return fs.ops.UnlockOwner(ctx, i, owner)
}

func (l *locks) noteOwner(i *Inode, owner uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.noteOwnerLocked(i, owner)
}

func (l *locks) noteOwnerLocked(i *Inode, owner uint64) {
	if l.owners == nil {
		l.owners = map[*Inode]map[uint64]bool{}
	}
	if l.owners[i] == nil {
		l.owners[i] = map[uint64]bool{}
	}
	l.owners[i][owner] = true
}

func (l *locks) forgetOwner(i *Inode, owner uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.owners[i], owner)
	if len(l.owners[i]) == 0 {
		delete(l.owners, i)
	}
}

func (l *locks) dropRanges(i *Inode, owner uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dropRangesLocked(i, owner)
}

func (l *locks) hasOwner(i *Inode, owner uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.owners[i][owner]
}

func (l *locks) addWait(k waitKey) *lockWait {
	w := &lockWait{granted: make(chan struct{})}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.waiting == nil {
		l.waiting = map[waitKey][]*lockWait{}
	}
	l.waiting[k] = append(l.waiting[k], w)
	return w
}

func (l *locks) dropWait(k waitKey, w *lockWait) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ws := l.waiting[k]
	for j, x := range ws {
		if x == w {
			ws = append(ws[:j], ws[j+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(l.waiting, k)
	} else {
		l.waiting[k] = ws
	}
}

// giveUp marks w given up; false if it was granted first.
func (l *locks) giveUp(w *lockWait) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.done {
		return false
	}
	w.done = true
	return true
}
