package cachemgr

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/snfs1"
)

// Lost locks in snfs mode (locklost.go says how the mount learns of a loss
// and has the mode-neutral half): the lock lease, its loop, and the watch
// that refuses a lost lock's passthrough I/O.

// NoteLockPid records that thread pid (FUSE's request pid) took the lock f
// just got (the bridge calls it after a granted SETLK or SETLKW): if the lock
// is lost, the passthrough reads and writes of the file by its process are
// refused.
func (sn *snfsFS) NoteLockPid(f *vfs.File, pid uint32) {
	if pid == 0 {
		return
	}
	l := &sn.locks
	l.Mu.Lock()
	defer l.Mu.Unlock()
	if h := l.Held[f]; h != nil {
		if h.Pids == nil {
			h.Pids = map[uint32]bool{}
		}
		h.Pids[pid] = true
	}
}

// LockLease is snfs mode's Ops.lockLease: f's lock, held, is found lost
// after a server restart whose reclaim is over (no round trip), or else
// after renewing the lock lease if it is due.
func (fs *snfsFS) LockLease(ctx context.Context, f *vfs.File) (lost bool, err error) {
	l := &fs.locks
	verf := l.LockVerf()
	fs.LocksLost("the server restarted", &verf, false)
	if lost, _ = l.HeldState(f); lost {
		return true, nil
	}
	if _, err := fs.renewLocks(ctx, f.I); err != nil {
		return false, err
	}
	lost, _ = l.HeldState(f)
	return lost, nil
}

// LockLostLocked: f's lock was lost; if the kernel reads and writes f's
// file itself (passthrough), its cache file is watched (its ignore mark
// removed: pinned.go), so that every access of it raises an event, which
// pinHandler.Pre refuses for the processes that took f's locks
// (lockLostAccess). Under l.Mu: f is still open (its release drops it from
// held, under l.Mu, before closing fsnOf(f).pt).
// It is snfs mode's Ops.lockLostLocked (nfs mode has no passthrough).
func (fs *snfsFS) LockLostLocked(f *vfs.File, h *vfs.HeldLocks) {
	if !snfsOpened(f) || fsnOf(f).pt == nil || fs.pin.w == nil {
		return
	}
	st, err := fsnOf(f).pt.Stat()
	if err == nil {
		err = fs.pin.w.Watch(fsnOf(f).pt)
	}
	if err != nil {
		fs.Logger().Warn("lost lock: watching the passthrough file", "fileid", f.I.FileID, "err", err)
		return
	}
	h.PtIno = fileIno(st)
	// FUSE names the thread that locked: its process is the one to stop
	// (a thread gone since stays as it was; it matches no access).
	procs := map[uint32]bool{}
	for p := range h.Pids {
		if g := tgidOf(int32(p)); g != 0 {
			p = g
		}
		procs[p] = true
	}
	h.Pids = procs
}

// lockLostAccess tells whether thread tid's access of the cache file ino
// must be refused: its process took a lock, since lost, through a
// passthrough descriptor of the file that has not unlocked the whole file
// nor closed. Called by the watch for each access of a watched file.
func (fs *snfsFS) lockLostAccess(ino uint64, tid int32) bool {
	l := &fs.locks
	if l.NHeld.Load() == 0 {
		return false
	}
	var pids []uint32
	l.Mu.Lock()
	for _, h := range l.Held {
		if h.Lost && h.PtIno == ino {
			for p := range h.Pids {
				pids = append(pids, p)
			}
		}
	}
	l.Mu.Unlock()
	if len(pids) == 0 {
		return false
	}
	tgid := tgidOf(tid)
	for _, p := range pids {
		if p == tgid {
			return true
		}
	}
	return false
}

// tgidOf is the process of thread tid (the watch reports threads), 0 if
// it is gone.
func tgidOf(tid int32) uint32 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", tid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Tgid:"); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
			return uint32(n)
		}
	}
	return 0
}

// renewLocks renews this client's lock lease if the last renewal was sent
// more than half a callback timeout ago: a LOCKT of i (one at a time). It
// returns the files of the descriptors whose loss it learned, whose kernel
// pages the caller drops when it is outside a read or write (locksLost):
// not here, under renewMu, which a read the kernel holds the file for may
// be waiting for.
func (fs *snfsFS) renewLocks(ctx context.Context, i *vfs.Inode) ([]*vfs.Inode, error) {
	l := &fs.locks
	l.renewMu.Lock()
	defer l.renewMu.Unlock()
	if time.Since(l.renewed) < fs.sess.CallbackTimeout()/2 {
		return nil, nil
	}
	start := time.Now()
	var lost []*vfs.Inode
	_, err := fs.sess.LockT(ctx, snfs1.LockTArgs{File: i.FH, Type: snfs1.LockRead, Offset: 0, Length: 1})
	switch {
	case errors.Is(err, snfs1.ErrFenced):
		lost = fs.MarkLost("the server revoked this client's locks", nil)
	case errors.Is(err, nfs3.ErrStale):
		return nil, nil // the file is gone on the server: its I/O says so
	case err != nil:
		return nil, fmt.Errorf("vfs: renewing the lock lease: %w", err)
	}
	verf := l.LockVerf()
	lost = append(lost, fs.MarkLost("the server restarted", &verf)...)
	l.renewed = start
	return lost, nil
}

// lockLeaseLoop renews the lock lease while this client holds locks, every
// quarter of a callback timeout (a renewal goes when the last is half a
// callback timeout old), until the FS closes: reads the kernel serves from
// its pages, and reads and writes it makes to passthrough cache files, never
// reach the mount, so without it a lost lock would go unnoticed while the
// process reads and writes unprotected. A loss the loop learns drops the
// kernel's pages of the files and watches their passthrough files
// (locksLost).
func (fs *snfsFS) lockLeaseLoop() {
	defer close(fs.leaseDone)
	for {
		t := time.NewTimer(max(fs.sess.CallbackTimeout()/4, 10*time.Millisecond))
		select {
		case <-fs.stop:
			t.Stop()
			return
		case <-t.C:
		}
		i := fs.locks.AnyHeld()
		if i == nil {
			continue
		}
		lost, err := fs.renewLocks(fs.life, i)
		if err != nil && fs.life.Err() == nil {
			fs.Logger().Debug("lock lease", "err", err)
		}
		for _, i := range lost {
			fs.NotifyData(i)
		}
	}
}

// reclaimLocks is the session's ReclaimLocks in snfs mode: every owner's
// ranges, as LOCKs with reclaim TRUE through lock. An owner of a file whose
// ranges are not all taken back has lost its locks of the file. The locks
// reclaimed are then the ones held under verf.
func (fs *snfsFS) reclaimLocks(ctx context.Context, verf snfs1.Verifier, lock func(a *snfs1.LockArgs) (*snfs1.LockRes, error)) error {
	l := &fs.locks
	held := l.SnapshotRanges()
	lost := 0
	for _, h := range held {
		why := ""
		for _, s := range h.Spans {
			off, n := s.OffLen()
			typ := snfs1.LockRead
			if s.Write {
				typ = snfs1.LockWrite
			}
			res, err := lock(&snfs1.LockArgs{File: h.Inode.FH, Owner: h.Owner, Type: typ, Offset: off, Length: n})
			if err != nil {
				return err // the connection broke: the whole reclaim runs again
			}
			switch {
			case res.Status != 0:
				why = fmt.Sprint(res.Status)
			case res.Stat != snfs1.LockGranted:
				why = fmt.Sprint(res.Stat)
			default:
				continue
			}
			break
		}
		if why == "" {
			continue
		}
		lost++
		fs.Logger().Warn("a lock was not reclaimed after the server restarted: its descriptors' reads and writes fail with EIO until they unlock",
			"fileid", h.Inode.FileID, "owner", h.Owner, "answer", why)
		if l.OwnerLost(h.Inode, h.Owner) {
			l.Mu.Lock()
			l.LostNotify = append(l.LostNotify, h.Inode) // by OnServerRestart (serverRestarted)
			l.Mu.Unlock()
		}
	}
	// What is still held (and not lost) was reclaimed: it is held under the
	// new verifier from now on.
	l.Mu.Lock()
	for _, h := range l.Held {
		if !h.Lost {
			h.Verf = verf
		}
	}
	l.Verf = verf
	l.Mu.Unlock()
	if len(held) > 0 {
		fs.Logger().Info("locks reclaimed after the server restarted", "owners", len(held)-lost, "lost", lost)
	}
	return nil
}
