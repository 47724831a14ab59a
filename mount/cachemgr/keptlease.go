package cachemgr

import (
	"context"
	"errors"
	"time"

	"snfs/mount/cachedir"
	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
	"snfs/state/clientfile"
)

// The lease of kept opens (docs/protocol.md 10, "Kept opens and the
// lease"; the rule of directory promises, section 20.4, applied to them).
//
// A kept open (a delayed close) is taken over by an application open with
// no OPEN, and the cache (and the kernel's pages) serve it. That is right
// only while the server would still call this client back about the file.
// A mount cut off from the server for longer than the callback timeout,
// while another client opened the file, was fenced for it (section 13): the
// server forgot its opens and let the other client write. The mount learns
// of it only from its next request about the file, which a takeover never
// sends. So a kept open is taken over only if:
//
//   - the protocol open of its mode was granted (OPEN, CREATE_OPEN, or a
//     RECLAIM the server took after its restart) on the session's current
//     registration and connection: no REGISTER and no lost connection since
//     the call was sent (a callback written to a broken connection is sent
//     again on the next one, but perhaps after its deadline); and
//   - the lease holds: a call this mount sent on that connection less than
//     callback_timeout/2 ago was answered, and no callback read on it is
//     still being served (client.Session.CallbacksServing). A callback the
//     server wrote before it read that call arrived before its reply (one
//     connection, in order), so it has been acted on; one written after
//     cannot have timed out yet. Without the second half, a partition that
//     heals delivered the callbacks written during it (timed out already)
//     just before the reply, and a takeover raced their handling (found by
//     tests/keptlease_test.go, one run in several).
//
// A lease that only lapsed (the mount idle) is renewed with a NULL, as
// nameCache.usable renews a directory's. Otherwise the file's kept opens
// are given back (CLOSE; SNFS_ERR_FENCED says the server forgot them
// already: the client is fenced for the file, and its dirty data goes
// through the fenced path, reintegrated or kept as a conflict copy) and the
// application's open sends a real OPEN, whose version answer applies the
// cache validity rule (section 9) to what the cache holds. The check is the
// cache manager's: the file's machine (state/clientfile) stays clock-free,
// and it sees only kept opens that passed it, or none.
//
// Offline (disconnected operation, disconnected.go) kept opens are served
// as before, with no server: that is the point of disconnected operation,
// and what it risks is documented (docs/mount.md). Once the mount is
// online again its registration is a new one, so the first open of each
// kept file gives its kept opens back and OPENs.
//
// Opens shared with an application's live open (the machine's Shared) are
// not checked: such an open joins one held across whatever happened, whose
// reads the cache serves with no RPC anyway, so the newcomer sees what the
// application holding the file sees (one view per mount). An OPEN there
// would not make the held open the server's again either. That is the
// remaining limitation docs/mount.md states: an application open held
// across a partition sees the cache until the mount learns of the fencing.

// openEpoch is a registration of the session: its REGISTER count (the
// lease watch's) and its count of lost connections. The zero value is no
// registration.
type openEpoch struct{ regs, lost uint64 }

// openEpochNow is the session's registration now; sampled before an OPEN
// is sent, it is the one the open is granted under (a reconnection while
// the call is out moves the current one: the open is then distrusted, a
// cost, never a risk).
func (sn *snfsFS) openEpochNow() openEpoch {
	lw := sn.lease()
	if lw == nil {
		return openEpoch{}
	}
	regs, _ := lw.state()
	return openEpoch{regs: regs, lost: sn.sess.ConnectionsLost()}
}

// keptVerdict is what the lease of kept opens allows.
type keptVerdict uint8

const (
	keptTrusted keptVerdict = iota // may be taken over
	keptLapsed                     // same registration, idle: a NULL answered renews
	keptLost                       // another registration, no lease, or callbacks being served: give back
)

// keptLease checks kept opens granted under ep at now.
func (sn *snfsFS) keptLease(ep openEpoch, now time.Time) keptVerdict {
	lw := sn.lease()
	cbt := sn.sess.CallbackTimeout()
	if lw == nil || cbt <= 0 || ep.regs == 0 {
		return keptLost
	}
	regs, sent := lw.state()
	if (openEpoch{regs: regs, lost: sn.sess.ConnectionsLost()}) != ep {
		return keptLost
	}
	if now.Sub(sent) >= cbt/2 {
		return keptLapsed
	}
	if sn.sess.CallbacksServing() > 0 {
		// One may be about this file, sent before the reply that renewed
		// the lease and timed out already: not acted on yet.
		return keptLost
	}
	return keptTrusted
}

// keptVerdictLocked is the lease's verdict on i's kept opens (the worst of
// their modes'; trusted when there are none; i.Mu held).
func (sn *snfsFS) keptVerdictLocked(i *vfs.Inode, now time.Time) keptVerdict {
	v := keptTrusted
	for _, m := range []state.Mode{state.Read, state.Write} {
		if stOf(i).Kept(m) > 0 {
			v = max(v, sn.keptLease(snOf(i).granted[m], now))
		}
	}
	return v
}

// noteGrantedLocked records that the protocol open of mode of i's OPEN (or
// CREATE_OPEN) sent under ep was answered (i.Mu held).
func noteGrantedLocked(i *vfs.Inode, m state.Mode, ep openEpoch) {
	snOf(i).granted[m] = ep
}

// reclaimGrantedLocked: the server took this client's reclaim after its
// restart (docs/protocol.md 4.5): the opens the RECLAIM reported of i are
// the new server's, as if granted by OPENs on the registration the RECLAIM
// was sent on (i.Mu held). A later connection loss or REGISTER moves the
// session's registration past it, as for any grant.
func reclaimGrantedLocked(i *vfs.Inode) {
	if ep := snOf(i).reclaimedUnder; ep.regs != 0 {
		snOf(i).granted = [state.Write + 1]openEpoch{state.Read: ep, state.Write: ep}
		snOf(i).reclaimedUnder = openEpoch{}
	}
}

// lockOpenTrusted takes i's openMu for an application's open, once i's
// kept opens, if any, may be taken over (the lease above), else after
// giving them back. Offline, kept opens are served as they are.
func (sn *snfsFS) lockOpenTrusted(ctx context.Context, i *vfs.Inode) {
	renewed := false
	for {
		snOf(i).openMu.Lock()
		if sn.disc.offline() {
			return
		}
		i.Mu.Lock()
		v := sn.keptVerdictLocked(i, time.Now())
		i.Mu.Unlock()
		if v == keptTrusted {
			return
		}
		if v == keptLapsed && !renewed {
			// Idle for half the callback timeout: a NULL answered renews
			// (and the check above runs again: same registration, and
			// the callbacks read before its reply served).
			snOf(i).openMu.Unlock()
			renewed = true
			sn.stats.KeptRenewals.Add(1)
			if err := sn.sess.Null(ctx); err != nil && ctx.Err() != nil {
				// Interrupted: the open fails at its OPEN, or takes its
				// kept open over offline.
				sn.Logger().Debug("lease renewal for a kept open", "fileid", i.FileID, "err", err)
			}
			continue
		}
		acts, fenced, kept := sn.giveBackUntrustedLocked(ctx, i)
		if kept {
			return // offline now: served offline
		}
		snOf(i).openMu.Unlock()
		sn.notify(i, acts)
		if fenced {
			// The server forgot this client's opens and dirty record of
			// the file: its clean data goes, its dirty data is
			// reintegrated (written back if the server's file is unchanged,
			// kept as a conflict copy otherwise) before the application's
			// OPEN unfences the file.
			if err := sn.fenced(ctx, i); err != nil {
				sn.Logger().Warn("reintegration of a fenced file's kept data", sn.PathAttr(i), "fileid", i.FileID, "err", err)
			}
		}
		// Again: a release meanwhile may have kept another open (it is
		// then trusted: granted under this registration, or given back).
	}
}

// giveBackUntrustedLocked CLOSEs i's kept opens, which the lease does not
// vouch for (openMu held), and reports whether the server answered
// SNFS_ERR_FENCED (it had forgotten them); the kernel is to be told of acts
// once openMu is released (as closeDelayed does). The kept opens leave the
// file's machine only once their first CLOSE is answered: if the mount went
// offline meanwhile (disconnected operation, the CLOSE refused with
// ErrDisconnected), they stay kept, and serve the open offline as any kept
// open does (kept reports it).
func (sn *snfsFS) giveBackUntrustedLocked(ctx context.Context, i *vfs.Inode) (acts []clientfile.Action, fenced, kept bool) {
	fs := sn
	i.Mu.Lock()
	dirtyLocked(i)
	var modes []state.Mode
	for _, m := range []state.Mode{state.Read, state.Write} {
		for range stOf(i).Kept(m) {
			modes = append(modes, m)
		}
	}
	dirty := stOf(i).Dirty() // as the machine's CLOSEs of kept opens say
	cf := snOf(i).cf
	i.Mu.Unlock()
	if cf != nil && cf.NeedsWriteBack() {
		// Durable here before the CLOSE says where the data is.
		if err := cf.Sync(); err != nil && !errors.Is(err, cachedir.ErrRemoved) {
			fs.Logger().Warn("cache directory: sync", fs.PathAttr(i), "fileid", i.FileID, "err", err)
		}
	}
	for n, m := range modes {
		if !dirty {
			fs.recordWrittenBack()
		}
		_, err := fs.sess.Close(ctx, i.FH, m, dirty)
		fs.Logger().Debug("CLOSE of a kept open the lease does not vouch for", "fileid", i.FileID, "mode", m, "dirty", dirty, "err", err)
		if n == 0 && errors.Is(err, ErrDisconnected) {
			return nil, false, true // offline: still kept, served offline
		}
		if fs.disc.owe(i.FH, m, dirty, err) {
			continue // offline: sent on reconnection (disconnected.go)
		}
		switch {
		case errors.Is(err, snfs1.ErrFenced):
			fenced = true
		case err != nil && !errors.Is(err, nfs3.ErrStale):
			fs.Logger().Warn("CLOSE of a kept open", fs.PathAttr(i), "fileid", i.FileID, "err", err)
		}
	}
	fs.stats.KeptDistrusted.Add(1)
	// The machine gives them up (their CLOSEs are sent: those it asks for
	// again are not): with no other open, caching ends until the OPEN.
	i.Mu.Lock()
	for _, a := range stOf(i).CloseAllDelayed() {
		if a.Kind != clientfile.ActSendClose {
			acts = append(acts, a)
		}
	}
	acts = fs.applyLocked(i, acts)
	i.Mu.Unlock()
	fs.delayed.remove(i)
	return acts, fenced, false
}
