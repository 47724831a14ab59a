package cachemgr

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"

	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/sunrpc"
)

// Byte-range locks in snfs mode (docs/protocol.md, "LOCK"; docs/mount.md,
// "Locks"): FUSE's GETLK, SETLK and SETLKW (and flock, which the kernel sends
// as SETLK of the whole file with its open file description as the owner)
// become LOCKT, LOCK and LOCKU for the kernel's lock owner. A blocking request
// waits here, not on the server, for CB_GRANTED (Granted); an interrupted one
// is cancelled on the server. A lock request writes the file's dirty data back
// first and a grant drops what the kernel cached of the file, as the Linux NFS
// client does: locking is how applications such as SQLite ask for
// consistency.

// snfsGetlk is Getlk in snfs mode.
func (fs *snfsFS) snfsGetlk(ctx context.Context, i *vfs.Inode, owner uint64, kind vfs.LockKind, off, n uint64) (*vfs.LockHolder, error) {
	if h, ok := fs.delegGetlk(i, owner, kind, off, n); ok {
		return h, nil
	}
	var res *snfs1.LockRes
	err := vfs.GraceRetry(ctx, func() (snfs1.LockStat, error) {
		var err error
		res, err = fs.sess.LockT(ctx, snfs1.LockTArgs{File: i.FH, Owner: owner, Type: vfs.ProtoLockType(kind), Offset: off, Length: n})
		if err != nil {
			return 0, err
		}
		return res.Stat, nil
	})
	if err != nil {
		return nil, lockCallErr(err)
	}
	switch res.Stat {
	case snfs1.LockGranted:
		return nil, nil
	case snfs1.LockDenied:
		return holderOf(res.Holder), nil
	}
	return nil, fmt.Errorf("vfs: LOCKT: %v: %w", res.Stat, vfs.ErrNoLocks)
}

func holderOf(h snfs1.LockHolder) *vfs.LockHolder {
	k := vfs.ReadLock
	if h.Type == snfs1.LockWrite {
		k = vfs.WriteLock
	}
	return &vfs.LockHolder{Kind: k, Offset: h.Offset, Length: h.Length}
}

// snfsSetlk is Setlk in snfs mode.
func (fs *snfsFS) snfsSetlk(ctx context.Context, f *vfs.File, owner uint64, kind vfs.LockKind, off, n uint64, wait bool) error {
	i := f.I
	l := &fs.locks
	var ask bool
	for {
		handled, err := fs.delegSetlk(ctx, f, owner, kind, off, n, wait)
		if handled {
			return err
		}
		l.Mu.Lock()
		if l.delegWaitLocked(i) == nil {
			ask = l.serverBegin(i, kind != vfs.Unlock && !l.delegOff)
			l.Mu.Unlock()
			break
		}
		l.Mu.Unlock()
	}
	// The request is at the server until its answer (not while a blocked
	// one waits for CB_GRANTED).
	var endOnce sync.Once
	end := func(delegated bool) {
		endOnce.Do(func() { fs.serverEnd(i, ask, delegated, owner, kind, off, n) })
	}
	defer end(false)
	if err := fs.Fsync(ctx, f); err != nil {
		return err
	}
	if kind == vfs.Unlock {
		err := fs.sess.LockU(ctx, snfs1.LockUArgs{File: i.FH, Owner: owner, Offset: off, Length: n})
		if errors.Is(err, snfs1.ErrFenced) {
			// The server revoked this client's locks: nothing is held.
			fs.LocksLost("the server revoked this client's locks", nil, true)
			err = nil
		}
		if err == nil {
			fs.locks.NoteRange(i, owner, off, n, false, true)
		}
		if err == nil && off == 0 && n == 0 {
			fs.locks.ForgetOwner(i, owner)
			fs.DropHeld(i, nil, owner)
		}
		return err
	}
	typ := vfs.ProtoLockType(kind)
	fs.locks.NoteOwner(i, owner)
	var w *vfs.LockWait
	key := vfs.WaitKey{FH: string(i.FH), Owner: owner, Type: typ, Offset: off, Length: n}
	if wait {
		// Before the LOCK: its CB_GRANTED may come before its reply.
		w = fs.locks.AddWait(key)
		defer fs.locks.DropWait(key, w)
	}
	var res *snfs1.LockRes
	var err error
	for try := 0; try < 2; try++ {
		err = vfs.GraceRetry(ctx, func() (snfs1.LockStat, error) {
			var err error
			res, err = fs.sess.Lock(ctx, snfs1.LockArgs{File: i.FH, Owner: owner, Type: typ, Offset: off, Length: n, Block: wait, Delegate: ask})
			if err != nil {
				return 0, err
			}
			return res.Stat, nil
		})
		if !errors.Is(err, snfs1.ErrFenced) {
			break
		}
		// The server revoked this client's locks (and says so once): the
		// descriptors that held them are told; this request goes again.
		fs.LocksLost("the server revoked this client's locks", nil, true)
	}
	if err != nil {
		if wait && ctx.Err() != nil {
			// Interrupted before the answer: the server may have queued
			// the request already (its BLOCKED reply in flight), and it
			// would wait there until granted, for a process that is gone.
			// A CB_GRANTED answered before the reply means the lock is
			// held: it is recorded as granted, as below.
			if !fs.locks.GiveUp(w) {
				fs.snfsGranted(f, owner, kind, off, n)
				return nil
			}
			fs.cancelWait(i, owner, typ, off, n)
			return syscall.EINTR
		}
		return lockCallErr(err)
	}
	end(ask && res.Stat == snfs1.LockGranted && res.Delegated)
	switch res.Stat {
	case snfs1.LockGranted:
		fs.snfsGranted(f, owner, kind, off, n)
		return nil
	case snfs1.LockDenied:
		return syscall.EAGAIN
	case snfs1.LockDeadlock:
		return syscall.EDEADLK
	case snfs1.LockBlocked:
	default:
		return fmt.Errorf("vfs: LOCK: %v: %w", res.Stat, vfs.ErrNoLocks)
	}
	select {
	case <-w.Granted:
		fs.snfsGranted(f, owner, kind, off, n)
		return nil
	case <-ctx.Done():
	}
	if !fs.locks.GiveUp(w) {
		fs.snfsGranted(f, owner, kind, off, n) // the grant came first: the lock is held
		return nil
	}
	fs.cancelWait(i, owner, typ, off, n)
	return syscall.EINTR
}

// cancelWait withdraws owner's blocking LOCK on (off, n) given up (its
// process interrupted or killed) before the FUSE request is answered, so that
// the server holds no waiter for it once the process is gone.
func (fs *snfsFS) cancelWait(i *vfs.Inode, owner uint64, typ snfs1.LockType, off, n uint64) {
	cctx, cancel := fs.stopCtx(fs.sess.CallbackTimeout())
	defer cancel()
	if err := fs.sess.LockU(cctx, snfs1.LockUArgs{File: i.FH, Owner: owner, Offset: off, Length: n, Cancel: true, Type: typ}); err != nil {
		fs.Logger().Warn("cancelling a waiting lock", "fileid", i.FileID, "err", err)
	}
}

// snfsGranted records owner's lock of kind on (off, n) granted through f.
func (fs *snfsFS) snfsGranted(f *vfs.File, owner uint64, kind vfs.LockKind, off, n uint64) {
	fs.NoteHeld(f, owner)
	fs.locks.NoteRange(f.I, owner, off, n, kind == vfs.WriteLock, false)
	fs.LockGranted(f.I)
}

// lockCallErr is the error of a failed LOCK or LOCKT: a server without the
// lock procedures (an older snfs serve: PROC_UNAVAIL) is ErrNoLocks
// (ENOLCK, as a Linux NFS mount without lockd gives).
func lockCallErr(err error) error {
	var re *sunrpc.RPCError
	if errors.As(err, &re) && re.Accept == sunrpc.ProcUnavail {
		return fmt.Errorf("vfs: the server has no locks: %w: %w", vfs.ErrNoLocks, err)
	}
	return err
}

// snfsUnlockOwner is UnlockOwner in snfs mode.
func (fs *snfsFS) snfsUnlockOwner(ctx context.Context, i *vfs.Inode, owner uint64) error {
	fs.DropHeld(i, nil, owner)
	// Not reclaimed after a server restart even if the unlock below fails:
	// the owner has let its locks of the file go.
	fs.locks.DropRanges(i, owner)
	if !fs.locks.HasOwner(i, owner) {
		return nil
	}
	if fs.delegUnlockOwner(i, owner) {
		return nil // the owner stays known: a recall unlocks what the server held for it
	}
	err := fs.sess.LockU(ctx, snfs1.LockUArgs{File: i.FH, Owner: owner})
	if errors.Is(err, snfs1.ErrFenced) {
		fs.LocksLost("the server revoked this client's locks", nil, false) // in a FLUSH or RELEASE
		err = nil
	}
	if err == nil || errors.Is(err, nfs3.ErrStale) {
		fs.locks.ForgetOwner(i, owner)
	}
	return err
}

// Granted serves CB_GRANTED (client.GrantHandler): the oldest request of the
// lock that still waits takes it.
func (sn *snfsFS) Granted(ctx context.Context, a *snfs1.GrantedArgs) snfs1.GrantedStat {
	l := &sn.locks
	l.Mu.Lock()
	defer l.Mu.Unlock()
	for _, w := range l.Waiting[vfs.WaitKey{FH: string(a.File), Owner: a.Owner, Type: a.Type, Offset: a.Offset, Length: a.Length}] {
		if !w.Done {
			w.Done = true
			close(w.Granted)
			return snfs1.GrantedOK
		}
	}
	return snfs1.GrantedUnwanted
}
