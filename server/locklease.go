package server

import (
	"context"
	"fmt"
	"sync"

	"snfs/consist"
	"snfs/lockmgr"
	"snfs/snfs1"
	"snfs/state"
)

// Lock leases (docs/protocol.md, "Lock leases"): an snfs client that holds a
// lock another client's request meets is probed (CB_NULL on its callback
// path); if no answer comes within the callback timeout, every lock it holds
// or waits for is revoked (lockd.Driver.ClientGone: the waiters behind it are
// granted) and the client is fenced for its locks: its next LOCK, LOCKT or
// LOCKU is answered SNFS_ERR_FENCED, once, so that it learns its locks were
// lost (the mount then fails the I/O of the descriptors that held them).
// Caching is not touched: its callbacks fence it for files as before.

// errLocksRevoked: the client's locks were revoked (its callback path was
// dead past the callback timeout).
var errLocksRevoked = fmt.Errorf("server: this client's locks were revoked: %w", consist.ErrFenced)

// lockLease is the server's lock lease state. Its probes are goroutines
// tracked by wg and ended by stop.
type lockLease struct {
	mu      sync.Mutex
	probing map[state.ClientID]bool // a probe is out; guarded by mu
	revoked map[state.ClientID]bool // locks revoked, not yet told; guarded by mu
	stopped bool                    // guarded by mu
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

func (l *lockLease) init() {
	l.probing, l.revoked = map[state.ClientID]bool{}, map[state.ClientID]bool{}
	l.ctx, l.cancel = context.WithCancel(context.Background())
}

// stop ends the probes and waits for them.
func (l *lockLease) stop() {
	l.mu.Lock()
	l.stopped = true
	l.mu.Unlock()
	l.cancel()
	l.wg.Wait()
}

// forget drops what is known of client c (its registration ended).
func (l *lockLease) forget(c state.ClientID) {
	l.mu.Lock()
	delete(l.revoked, c)
	l.mu.Unlock()
}

// locksRevoked reports (and forgets) that client c's locks were revoked
// since it last heard: its LOCK, LOCKT or LOCKU is answered
// SNFS_ERR_FENCED.
func (s *Server) locksRevoked(c state.ClientID) error {
	l := &s.lockLease
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.revoked[c] {
		return nil
	}
	delete(l.revoked, c)
	return errLocksRevoked
}

// lockProbing reports whether a probe of client c is out (LOCKT, the
// client's lease renewal, is answered NFS3ERR_JUKEBOX meanwhile).
func (s *Server) lockProbing(c state.ClientID) bool {
	l := &s.lockLease
	l.mu.Lock()
	probing := l.probing[c]
	l.mu.Unlock()
	return probing || s.delegs.recalling(c) // a lock delegation's recall (lockdeleg.go)
}

// probeLockHolders probes the snfs clients other than c whose locks on file
// k conflict with the lock c asked for (type t over r), after c's request met
// a conflict (LOCK answered denied or blocked): only a holder in c's way need
// prove it is alive, and a holder elsewhere in the file is not held up (its
// LOCKT waits while it is probed). One probe per client is out at a time.
func (s *Server) probeLockHolders(c state.ClientID, k lockmgr.FileKey, t lockmgr.LockType, r lockmgr.Range) {
	seen := map[lockmgr.ClientID]bool{}
	for _, h := range s.locks.Holders(k) {
		hc := h.Owner.Client
		if hc == lockmgr.ClientID(c) || hc&nlmClientBit != 0 || seen[hc] {
			continue
		}
		inWay := h.Range.Start <= r.End && r.Start <= h.Range.End &&
			(t == lockmgr.Write || h.Type == lockmgr.Write)
		if !inWay {
			continue
		}
		seen[hc] = true
		s.probeLockHolder(state.ClientID(hc))
	}
}

func (s *Server) probeLockHolder(c state.ClientID) {
	l := &s.lockLease
	l.mu.Lock()
	if l.stopped || l.probing[c] {
		l.mu.Unlock()
		return
	}
	l.probing[c] = true
	l.wg.Add(1)
	l.mu.Unlock()
	go func() {
		defer l.wg.Done()
		defer func() {
			l.mu.Lock()
			delete(l.probing, c)
			l.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(l.ctx, s.consist.CallbackTimeout())
		err := s.consist.CallClient(ctx, c, snfs1.CBProcNull, nil, nil)
		cancel()
		if err == nil || l.ctx.Err() != nil || !s.consist.Registered(c) {
			return // alive, stopping, or gone (its locks went with it)
		}
		s.log.Warn("lock holder's callback path is dead past the callback timeout: its locks are revoked",
			"client", c, "err", err)
		s.revokeLocks(c)
	}()
}

// revokeLocks releases every lock and waiting request of client c and
// fences it for its locks (it is told once).
func (s *Server) revokeLocks(c state.ClientID) {
	l := &s.lockLease
	l.mu.Lock()
	l.revoked[c] = true
	l.mu.Unlock()
	s.locks.ClientGone(lockmgr.ClientID(c))
}
