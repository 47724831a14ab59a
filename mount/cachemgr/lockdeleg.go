package cachemgr

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"time"

	"snfs/lockmgr"
	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
)

// Lock delegation in snfs mode (docs/protocol.md, "Lock delegation"): a LOCK
// sent with delegate TRUE may come back with delegated TRUE, and from then
// on this mount serves the file's locks itself, in a lock manager of its own
// for the file (package lockmgr, with no backing file), until the server
// recalls them (CB_CALLBACK, CB_RECALL_LOCKS): every lock held then is sent
// as a LOCK, every range an owner does not hold is unlocked (LOCKU), and only
// then is the callback answered; from then on the file's locks go to the
// server again.
//
// Ordering: a LOCK asks for the delegation only when no other lock request
// of the file is in flight or waiting on the server, and while it is in
// flight the file's other lock requests wait for its answer (so the
// manager starts with exactly what the server holds: the one lock); a
// recall waits for it too (its answer may come after the recall). While
// delegated, no other snfs client has the file open and no other process
// on the server does, so a local grant neither writes back nor drops the
// cache (the consistency protocol keeps them right); the lock lease is
// renewed before a local grant as before the I/O of a locked descriptor
// (a renewal answered within half a callback timeout vouches for the
// delegation as for the locks: a recall unanswered for a whole callback
// timeout is what revokes them).

// inodeDeleg is a delegated file's local lock state.
type inodeDeleg struct {
	m         *lockmgr.Machine
	verf      snfs1.Verifier // the server's, when granted
	recalling bool
	done      chan struct{}                   // closed when the delegation ends
	waits     map[lockmgr.ReqID]chan struct{} // local blocked requests
	nextReq   lockmgr.ReqID
}

// delegFileKey is the local manager's one file.
const delegFileKey = lockmgr.FileKey("f")

func delegOwner(owner uint64) lockmgr.Owner {
	return lockmgr.Owner{Client: 1, ID: string([]byte{byte(owner >> 56), byte(owner >> 48), byte(owner >> 40),
		byte(owner >> 32), byte(owner >> 24), byte(owner >> 16), byte(owner >> 8), byte(owner)})}
}

func ownerOf(o lockmgr.Owner) uint64 {
	var v uint64
	for _, b := range []byte(o.ID) {
		v = v<<8 | uint64(b)
	}
	return v
}

func mgrType(k vfs.LockKind) lockmgr.LockType {
	if k == vfs.WriteLock {
		return lockmgr.Write
	}
	return lockmgr.Read
}

// delegWaitLocked waits (mu held, released while waiting) while a request
// asking for i's delegation is in flight or its recall is being answered.
// It reports i's delegation, nil if none.
func (l *snfsLocks) delegWaitLocked(i *vfs.Inode) *inodeDeleg {
	if l.cond == nil {
		l.cond = sync.NewCond(&l.Mu)
	}
	for l.asking[i] || (l.delegs[i] != nil && l.delegs[i].recalling) {
		l.cond.Wait()
	}
	return l.delegs[i]
}

// serverBegin counts a lock request of i going to the server, and reports
// whether it may ask for the delegation (nothing else of i in flight or
// waiting there). The caller ends it with serverEnd.
func (l *snfsLocks) serverBegin(i *vfs.Inode, mayAsk bool) (ask bool) {
	if l.inflight == nil {
		l.inflight, l.asking = map[*vfs.Inode]int{}, map[*vfs.Inode]bool{}
	}
	ask = mayAsk && l.inflight[i] == 0 && !l.waitingOn(i)
	l.inflight[i]++
	if ask {
		l.asking[i] = true
	}
	return ask
}

func (l *snfsLocks) waitingOn(i *vfs.Inode) bool {
	for k, ws := range l.Waiting {
		if k.FH == string(i.FH) && len(ws) > 0 {
			return true
		}
	}
	return false
}

// serverEnd ends a lock request of i to the server; with a delegation
// granted by it, the local manager starts with its lock.
func (fs *snfsFS) serverEnd(i *vfs.Inode, ask, delegated bool, owner uint64, kind vfs.LockKind, off, n uint64) {
	l := &fs.locks
	l.Mu.Lock()
	defer l.Mu.Unlock()
	if l.inflight[i]--; l.inflight[i] <= 0 {
		delete(l.inflight, i)
	}
	if !ask {
		return
	}
	delete(l.asking, i)
	if l.cond != nil {
		l.cond.Broadcast()
	}
	if !delegated {
		return
	}
	d := &inodeDeleg{m: lockmgr.New(lockmgr.Config{MaxPerClient: 1 << 30}, time.Now()), verf: fs.sess.ServerVerifier(),
		done: make(chan struct{}), waits: map[lockmgr.ReqID]chan struct{}{}}
	d.nextReq++
	r, acts := d.m.Lock(time.Now(), lockmgr.LockArgs{Req: d.nextReq, File: delegFileKey, Owner: delegOwner(owner),
		Type: mgrType(kind), Range: lockmgr.RangeOf(off, n)})
	d.exec(acts, d.nextReq, &r)
	if l.delegs == nil {
		l.delegs = map[*vfs.Inode]*inodeDeleg{}
	}
	l.delegs[i] = d
	fs.stats.LockDelegations.Add(1)
}

// exec carries out the local manager's actions: there is no backing file
// (every acquisition succeeds) and a grant wakes its waiter. mine's final
// result goes into res.
func (d *inodeDeleg) exec(acts []lockmgr.Action, mine lockmgr.ReqID, res *lockmgr.Result) {
	for len(acts) > 0 {
		a := acts[0]
		acts = acts[1:]
		switch a.Kind {
		case lockmgr.ActBacking:
			if a.Acquire {
				r, more := d.m.BackingDone(time.Now(), a.Req, true)
				if a.Req == mine && res != nil {
					*res = r
				}
				acts = append(more, acts...)
			}
		case lockmgr.ActGranted:
			ch := d.waits[a.Req]
			if ch != nil {
				delete(d.waits, a.Req)
				close(ch)
			}
			acts = append(acts, d.m.GrantDone(time.Now(), a.Req, ch != nil)...)
		}
	}
}

// delegSetlk serves Setlk from i's delegation; handled false: i is not
// delegated (the caller goes to the server, and may ask for it: ask).
func (fs *snfsFS) delegSetlk(ctx context.Context, f *vfs.File, owner uint64, kind vfs.LockKind, off, n uint64, wait bool) (handled bool, err error) {
	i := f.I
	l := &fs.locks
	if kind != vfs.Unlock {
		// The lease vouches for a local grant as for a held lock's I/O.
		l.Mu.Lock()
		d := l.delegWaitLocked(i)
		l.Mu.Unlock()
		if d == nil {
			return false, nil
		}
		if _, err := fs.renewLocks(ctx, i); err != nil {
			return true, err
		}
	}
	l.Mu.Lock()
	d := l.delegWaitLocked(i)
	if d == nil {
		l.Mu.Unlock()
		return false, nil
	}
	now := time.Now()
	o, rg := delegOwner(owner), lockmgr.RangeOf(off, n)
	if kind == vfs.Unlock {
		_, acts := d.m.Unlock(now, delegFileKey, o, rg)
		d.exec(acts, 0, nil)
		l.Mu.Unlock()
		if off == 0 && n == 0 {
			fs.DropHeld(i, nil, owner)
		}
		return true, nil
	}
	d.nextReq++
	req := d.nextReq
	var ch chan struct{}
	if wait {
		ch = make(chan struct{})
		d.waits[req] = ch
	}
	r, acts := d.m.Lock(now, lockmgr.LockArgs{Req: req, File: delegFileKey, Owner: o, Type: mgrType(kind), Range: rg, Block: wait})
	d.exec(acts, req, &r)
	if r.Verdict != lockmgr.Blocked {
		delete(d.waits, req)
	}
	if r.Verdict == lockmgr.Granted {
		l.NoteOwnerLocked(i, owner)
	}
	done := d.done
	l.Mu.Unlock()
	switch r.Verdict {
	case lockmgr.Granted:
		fs.NoteHeld(f, owner)
		return true, nil
	case lockmgr.Denied:
		return true, syscall.EAGAIN
	case lockmgr.Deadlock:
		return true, syscall.EDEADLK
	case lockmgr.Blocked:
	default:
		return true, vfs.ErrNoLocks
	}
	select {
	case <-ch:
		l.Mu.Lock()
		l.NoteOwnerLocked(i, owner)
		l.Mu.Unlock()
		fs.NoteHeld(f, owner)
		return true, nil
	case <-done:
		// Recalled while waiting: the request goes to the server (its grant,
		// if it came first, was sent there with the other locks).
		l.Mu.Lock()
		_, granted := d.waits[req]
		granted = !granted
		if granted {
			l.NoteOwnerLocked(i, owner)
		}
		l.Mu.Unlock()
		if granted {
			fs.NoteHeld(f, owner)
			return true, nil
		}
		return false, nil
	case <-ctx.Done():
	}
	l.Mu.Lock()
	if _, waiting := d.waits[req]; !waiting {
		l.NoteOwnerLocked(i, owner)
		l.Mu.Unlock()
		fs.NoteHeld(f, owner)
		return true, nil // granted first
	}
	defer l.Mu.Unlock()
	delete(d.waits, req)
	if !d.recalling && l.delegs[i] == d {
		_, acts := d.m.Cancel(time.Now(), lockmgr.CancelArgs{File: delegFileKey, Owner: o, Type: mgrType(kind), Range: rg})
		d.exec(acts, 0, nil)
	}
	return true, syscall.EINTR
}

// delegGetlk serves Getlk from i's delegation.
func (fs *snfsFS) delegGetlk(i *vfs.Inode, owner uint64, kind vfs.LockKind, off, n uint64) (holder *vfs.LockHolder, handled bool) {
	l := &fs.locks
	l.Mu.Lock()
	defer l.Mu.Unlock()
	d := l.delegWaitLocked(i)
	if d == nil {
		return nil, false
	}
	r := d.m.Test(time.Now(), delegFileKey, delegOwner(owner), mgrType(kind), lockmgr.RangeOf(off, n))
	if r.Verdict != lockmgr.Denied {
		return nil, true
	}
	k := vfs.ReadLock
	if r.Holder.Type == lockmgr.Write {
		k = vfs.WriteLock
	}
	return &vfs.LockHolder{Kind: k, Offset: r.Holder.Range.Offset(), Length: r.Holder.Range.Length()}, true
}

// delegUnlockOwner serves UnlockOwner from i's delegation.
func (fs *snfsFS) delegUnlockOwner(i *vfs.Inode, owner uint64) bool {
	l := &fs.locks
	l.Mu.Lock()
	defer l.Mu.Unlock()
	d := l.delegWaitLocked(i)
	if d == nil {
		return false
	}
	_, acts := d.m.Unlock(time.Now(), delegFileKey, delegOwner(owner), lockmgr.RangeOf(0, 0))
	d.exec(acts, 0, nil)
	return true
}

// recallLocks answers CB_RECALL_LOCKS for fh: the delegation's locks go to
// the server as LOCKs (and the ranges its owners do not hold as LOCKUs)
// before the answer. CBStale: the file is not delegated here.
func (fs *snfsFS) recallLocks(ctx context.Context, fh nfs3.FH) state.Outcome {
	i := fs.LookupInode(fh)
	if i == nil {
		return state.Stale
	}
	l := &fs.locks
	l.Mu.Lock()
	d := l.delegWaitLocked(i)
	if d == nil {
		l.Mu.Unlock()
		return state.Stale
	}
	d.recalling = true
	held := d.m.Holders(delegFileKey)
	owners := map[uint64]bool{}
	for o := range l.Owners[i] {
		owners[o] = true
	}
	l.Mu.Unlock()
	fs.stats.LockRecalls.Add(1)
	byOwner := map[uint64][]lockmgr.Lock{}
	for _, h := range held {
		o := ownerOf(h.Owner)
		owners[o] = true
		byOwner[o] = append(byOwner[o], h)
	}
	fenced := false // the server revoked this client's locks (all of them)
	// First what the owners no longer hold goes (what the server held for
	// them when the delegation came), then what they hold is taken: the
	// other way round an owner's new lock could meet another owner's old
	// one. Nobody else can take a lock of the file meanwhile: the server
	// holds every other request about it until this callback is answered.
	for o := range owners {
		var start uint64
		gaps := [][2]uint64{}
		toEnd := false
		for _, h := range byOwner[o] { // Holders: by start, an owner's records disjoint
			if h.Range.Start > start {
				gaps = append(gaps, [2]uint64{start, h.Range.Start - start})
			}
			if h.Range.End == lockmgr.ToEnd {
				toEnd = true
				break
			}
			start = h.Range.End + 1
		}
		if !toEnd {
			gaps = append(gaps, [2]uint64{start, 0})
		}
		for _, g := range gaps {
			err := fs.sess.LockU(ctx, snfs1.LockUArgs{File: i.FH, Owner: o, Offset: g[0], Length: g[1]})
			if errors.Is(err, snfs1.ErrFenced) {
				fenced = true
			} else if err != nil && !errors.Is(err, nfs3.ErrStale) {
				fs.Logger().Warn("lock delegation recall: an unlock failed", "fileid", i.FileID, "err", err)
			}
		}
	}
	lost := false
	// What the server now holds for the owners is what they held here: the
	// ranges a reclaim after a server restart sends again (lockreclaim.go).
	for o := range owners {
		l.DropRanges(i, o)
	}
	for _, h := range held {
		typ := snfs1.LockRead
		if h.Type == lockmgr.Write {
			typ = snfs1.LockWrite
		}
		res, err := fs.sess.Lock(ctx, snfs1.LockArgs{File: i.FH, Owner: ownerOf(h.Owner), Type: typ,
			Offset: h.Range.Offset(), Length: h.Range.Length()})
		if errors.Is(err, snfs1.ErrFenced) {
			fenced = true
		} else if err != nil || res.Stat != snfs1.LockGranted {
			fs.Logger().Warn("lock delegation recall: a lock could not be handed back", "fileid", i.FileID, "err", err)
			lost = true
		} else {
			l.NoteRange(i, ownerOf(h.Owner), h.Range.Offset(), h.Range.Length(), h.Type == lockmgr.Write, false)
		}
	}
	l.Mu.Lock()
	if l.delegs[i] == d {
		delete(l.delegs, i)
	}
	d.recalling = false
	close(d.done)
	l.cond.Broadcast()
	l.Mu.Unlock()
	switch {
	case fenced:
		fs.LocksLost("the server revoked this client's locks", nil, false)
	case lost:
		fs.inodeLocksLost(i)
	}
	return state.OK
}

// dropDelegs forgets every delegation (the server revoked this client's
// locks), or with verf set those granted under another server verifier
// (the server restarted): the server holds none of them. Local waiters go
// to the server.
func (l *snfsLocks) dropDelegs(verf *snfs1.Verifier) {
	l.Mu.Lock()
	defer l.Mu.Unlock()
	for i, d := range l.delegs {
		if verf != nil && d.verf == *verf {
			continue
		}
		delete(l.delegs, i)
		if !d.recalling {
			close(d.done)
		}
	}
	if l.cond != nil {
		l.cond.Broadcast()
	}
}

// inodeLocksLost marks the locks of i's descriptors lost (a recalled lock
// could not be handed back): their I/O fails with EIO until they unlock.
func (fs *snfsFS) inodeLocksLost(i *vfs.Inode) {
	l := &fs.locks
	l.Mu.Lock()
	for f, h := range l.Held {
		if f.I == i {
			h.Lost = true
		}
	}
	l.Mu.Unlock()
	fs.Logger().Warn("file locks lost: a recalled lock delegation's lock was refused", "fileid", i.FileID)
}

// snfsLocks is snfs mode's lock table: the core's (locks, whose mu guards
// the fields below too) with the lock delegations and the lock lease.
type snfsLocks struct {
	vfs.LockTable
	// Lock delegation (lockdeleg.go), guarded by mu: the delegated files,
	// the lock requests of each file at the server, whether one of them asks
	// for the delegation, and cond (on mu), broadcast when an asking request
	// or a recall ends.
	delegs   map[*vfs.Inode]*inodeDeleg
	inflight map[*vfs.Inode]int
	asking   map[*vfs.Inode]bool
	cond     *sync.Cond
	// delegOff: never ask for delegations (the mount's option).
	delegOff bool
	// renewMu serializes the lock lease's renewals; renewed is when the
	// last one answered was sent (guarded by renewMu).
	renewMu sync.Mutex
	renewed time.Time
}
