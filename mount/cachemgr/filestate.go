package cachemgr

import (
	"errors"
	"time"

	"snfs/mount/cachedir"
	"snfs/mount/vfs"
	"snfs/snfs1"
	"snfs/state"
	"snfs/state/clientfile"
)

// The cache manager drives one clientfile.File per inode (snfsInode.st):
// the file's consistency decisions (caching, version, the kernel's pages'
// version, opens, OPENs in flight, delayed closes, the invalidation epoch,
// dirty, write-back in progress, passthrough opens and the pinned phase) are
// the machine's; this package carries out its actions (RPCs, the cache
// directory, the kernel's notifications, timers) and feeds back what it
// learned as the next event. The machine is called with the inode's mu held
// and never across an RPC (state/clientfile's doc has the lock order).

// stOf is i's consistency state machine; call its methods with i.Mu held.
func stOf(i *vfs.Inode) *clientfile.File { return snOf(i).st }

// replyOf is the protocol's view of an OPEN's answer.
func replyOf(ok *snfs1.OpenOK) state.OpenReply {
	if ok == nil {
		return state.OpenReply{}
	}
	return state.OpenReply{CacheEnabled: ok.CacheEnabled, Version: ok.CacheVersion, OldVersion: ok.OldCacheVersion}
}

// applyLocked carries out the actions that belong under i.Mu (the delayed
// close's timer, the attribute cache) and returns the others, in order,
// for the caller to carry out after releasing it.
func (fs *snfsFS) applyLocked(i *vfs.Inode, acts []clientfile.Action) []clientfile.Action {
	var rest []clientfile.Action
	for _, a := range fs.timersLocked(i, acts) {
		if a.Kind == clientfile.ActInvalidateAttr {
			i.InvalidateLocked()
			continue
		}
		rest = append(rest, a)
	}
	return rest
}

// dirtyLocked tells i's machine that its cache holds data not written back
// if the cache directory's record says so and the machine does not know it
// (data no event put there: an earlier mount's, a reintegration's): a CLOSE
// or a callback's answer never says clean over data the record holds.
func dirtyLocked(i *vfs.Inode) {
	if cf := snOf(i).cf; cf != nil && !stOf(i).Dirty() && cf.NeedsWriteBack() {
		stOf(i).CacheFoundDirty()
	}
}

// timersLocked carries out the delayed close's timer actions (under i.Mu)
// and returns the others.
func (fs *snfsFS) timersLocked(i *vfs.Inode, acts []clientfile.Action) []clientfile.Action {
	var rest []clientfile.Action
	for _, a := range acts {
		switch a.Kind {
		case clientfile.ActArmTimer:
			d := max(time.Until(a.At), 0)
			if t := snOf(i).dcTimer; t != nil {
				// One timer per inode, re-armed: a fire of an older arming
				// finds the deadline not reached and arms it again, or the
				// kept opens gone (TimerFired).
				t.Reset(d)
			} else {
				snOf(i).dcTimer = time.AfterFunc(d, func() { fs.closeDelayed(i, false) })
			}
		case clientfile.ActStopTimer:
			if t := snOf(i).dcTimer; t != nil {
				t.Stop()
			}
		default:
			rest = append(rest, a)
		}
	}
	return rest
}

// notify carries out the kernel's notifications among acts (after i.Mu is
// released).
func (fs *snfsFS) notify(i *vfs.Inode, acts []clientfile.Action) {
	for _, a := range acts {
		switch a.Kind {
		case clientfile.ActNotifyData:
			fs.NotifyData(i)
		case clientfile.ActNotifyAttr:
			fs.NotifyAttr(i)
		}
	}
}

// invalidateCache drops cf's clean data (ActInvalidateCache).
func (fs *snfsFS) invalidateCache(cf *cachedir.File) {
	if cf == nil {
		return
	}
	if err := cf.Invalidate(); err != nil && !errors.Is(err, cachedir.ErrRemoved) {
		fs.Logger().Warn("cache directory: invalidate", "err", err)
	}
}

func hasAct(acts []clientfile.Action, k clientfile.ActionKind) bool {
	for _, a := range acts {
		if a.Kind == k {
			return true
		}
	}
	return false
}
