package server

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"snfs/lockd"
	"snfs/lockmgr"
	"snfs/snfs1"
	"snfs/state"
	"snfs/store"
)

// Locks of the snfs protocol (docs/protocol.md, "LOCK"): a client is its
// registration's table client (state.ClientID, as lockmgr.ClientID), a lock
// owner is (that client, the client's 64-bit owner), a file is its handle's
// bytes. The lock driver (package lockd) mirrors every lock on the backing
// file with F_OFD_SETLK on a description of the file opened by handle, and
// sends the grants of blocked requests back here (Granted: CB_GRANTED).
//
// Other front ends (NLM) name their clients with ClientIDs that have
// nlmClientBit set, so the two never meet.
const nlmClientBit = lockmgr.ClientID(1) << 63

// newLocks starts the lock driver, its grace shared with the consistency
// protocol's: while that lasts only reclaims are granted.
func (s *Server) newLocks(cfg Config, grace time.Duration) {
	lc := lockmgr.Config{MaxPerClient: cfg.MaxLocksPerClient}
	// NLM clients recorded before the restart (nsm.go) reclaim with no
	// end-of-reclaim message: then the grace period runs its whole bound.
	nlmGrace := grace > 0 && len(s.nlm.nsm.loaded) > 0
	if s.consist.InGrace() || nlmGrace {
		lc.Grace = grace // else ended early with the consistency protocol's (EndGraceOn)
	}
	s.locks = lockd.New(lockd.Config{Lock: lc, Open: s.openForLocks(false), OpenNow: s.openForLocks(true),
		Granter: lockGranter{s}, Logger: s.log,
		GrantTimeout: 2 * s.consist.CallbackTimeout()})
	if !nlmGrace {
		s.locks.EndGraceOn(s.consist.GraceOver())
	}
	s.lockLease.init()
	s.consist.OnClientGone(func(c state.ClientID) {
		s.locks.ClientGone(lockmgr.ClientID(c))
		s.delegs.clientGone(c)
		s.lockLease.forget(c)
		s.reintOpens.forget(c)
	})
}

// mayLock checks that the caller may lock r: a regular file it could open,
// for reading or for writing. A write lock does not need write access: the
// protocol does not tell flock (whose exclusive lock a reader may take on a
// local file) from fcntl, whose write lock the client's kernel refuses on a
// descriptor not open for writing.
func (s *Server) mayLock(r *req) error {
	if err := regularFile(r); err != nil {
		return err
	}
	if err := s.store.OpenIO(r.node); err != nil {
		return err
	}
	return store.As(r.cred, func() error {
		if err := s.store.MayIO(r.node, r.cred.UID, false); err == nil {
			return nil
		}
		return s.store.MayIO(r.node, r.cred.UID, true)
	})
}

// syncLockGrace ends the lock manager's grace period if the consistency
// protocol's has ended, before a request is decided (EndGraceOn's goroutine
// may not have run yet).
func (s *Server) syncLockGrace() {
	if !s.consist.InGrace() {
		s.locks.EndGrace()
	}
}

// openForLocks opens a new description of the file a lock key (a handle)
// names; now: without waiting for a lease break (lockd.Config.OpenNow).
func (s *Server) openForLocks(now bool) func(lockmgr.FileKey) (int, error) {
	return func(k lockmgr.FileKey) (int, error) {
		n, err := s.store.Resolve([]byte(k))
		if err != nil {
			return -1, err
		}
		defer n.Release()
		if now {
			return s.store.OpenDescriptionNow(n)
		}
		return s.store.OpenDescription(n)
	}
}

// snfsOwner is the lock owner of an snfs client's owner.
func snfsOwner(c state.ClientID, owner uint64) lockmgr.Owner {
	return lockmgr.Owner{Client: lockmgr.ClientID(c), ID: string(binary.BigEndian.AppendUint64(nil, owner))}
}

// lockRange is the lock manager's range of a protocol (offset, length).
func lockRange(off, length uint64) lockmgr.Range { return lockmgr.RangeOf(off, length) }

func lockType(t snfs1.LockType) lockmgr.LockType {
	if t == snfs1.LockWrite {
		return lockmgr.Write
	}
	return lockmgr.Read
}

func protoLockType(t lockmgr.LockType) snfs1.LockType {
	if t == lockmgr.Write {
		return snfs1.LockWrite
	}
	return snfs1.LockRead
}

// lockResult fills a LOCK or LOCKT result from the lock manager's answer.
func lockResult(r lockmgr.Result, res *snfs1.LockRes) {
	switch r.Verdict {
	case lockmgr.Granted:
		res.Stat = snfs1.LockGranted
	case lockmgr.Denied:
		res.Stat = snfs1.LockDenied
		res.Holder = snfs1.LockHolder{Type: protoLockType(r.Holder.Type), Offset: r.Holder.Range.Offset(),
			Length: r.Holder.Range.Length(), Local: r.Local}
	case lockmgr.Blocked:
		res.Stat = snfs1.LockBlocked
	case lockmgr.Deadlock:
		res.Stat = snfs1.LockDeadlock
	case lockmgr.Grace:
		res.Stat = snfs1.LockGrace
	case lockmgr.NoLocks:
		res.Stat = snfs1.LockNoLocks
	default: // Acquiring is answered by the driver before it returns
		res.Stat = snfs1.LockDenied
	}
}

// lockGranter sends the grants of blocked requests: CB_GRANTED to snfs
// clients.
type lockGranter struct{ s *Server }

// Granted implements lockd.Granter.
func (g lockGranter) Granted(ctx context.Context, a lockmgr.Action) error {
	if a.Owner.Client&nlmClientBit != 0 {
		return g.s.nlm.granted(ctx, a) // NLM4 GRANTED (nlm.go)
	}
	if len(a.Owner.ID) != 8 {
		return fmt.Errorf("server: no front end for lock owner %v", a.Owner)
	}
	args := snfs1.GrantedArgs{File: []byte(a.File), Owner: binary.BigEndian.Uint64([]byte(a.Owner.ID)),
		Type: protoLockType(a.Type), Offset: a.Range.Offset(), Length: a.Range.Length()}
	var res snfs1.GrantedRes
	if err := g.s.consist.CallClient(ctx, state.ClientID(a.Owner.Client), snfs1.CBProcGranted, &args, &res); err != nil {
		return err
	}
	if res.Status != snfs1.GrantedOK {
		return fmt.Errorf("server: CB_GRANTED answered %d: nobody waits for the lock", res.Status)
	}
	return nil
}

// LockStats returns the lock manager's counters and census (for tests and
// metrics).
func (s *Server) LockStats() lockmgr.Stats { return s.locks.Stats() }
