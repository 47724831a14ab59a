package cachemgr

import (
	"context"
	"errors"
	"syscall"
	"time"

	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/state"
	"snfs/state/clientfile"
)

// Offline opens for writing of files the server made (docs/mount.md, "What
// is served offline"; Coda's disconnected operation, Kistler and
// Satyanarayanan 1992 section 4.4: a disconnected client writes what it
// caches, and conflicts are found by versions at reintegration). Offline,
// an open for writing that needs an OPEN (the mount holds no write open of
// the file it could take over) is granted here when the file's data is
// wholly and validly cached: caching (an open held or kept, so the server
// would have called back any change before the disconnection), at the
// version the cache holds, with a base (the server's size and mtime the
// cached data is in sync with). The machine counts the open as one the
// server forgot (GrantedLocally): its release sends no CLOSE. The OPEN is
// owed: at reconnection, before the file's write-back, the dirty data is
// reintegrated (reintegrate: an OPEN for writing as the data's writer, the
// base compared with the server's file, the data written back, or kept as a
// conflict copy if another client changed the file meanwhile, and a CLOSE),
// and an open still held is OPENed again (the server counts it, as the
// machine does). A mount killed offline leaves the dirty data with its base
// in the cache directory: the restarted mount's recovery reintegrates it the
// same way.

// offlineWriteOpen ends an open for writing that OpenBegin asked an OPEN
// for, offline: granted locally if the file may be written offline (keep:
// the kernel's pages stay valid), else ErrDisconnected. Called with
// i's openMu held; it releases it.
func (sn *snfsFS) offlineWriteOpen(i *vfs.Inode, o *clientfile.Open) (keep bool, err error) {
	defer snOf(i).openMu.Unlock()
	i.Mu.Lock()
	cf := snOf(i).cf
	v := stOf(i).Version()
	ok := i.Type == nfs3.TypeReg && !isProvFH(i.FH) && stOf(i).Caching() && cf != nil && v != 0 &&
		cf.Version() == v && attrKnownLocked(i) && !i.WState.Pending()
	i.Mu.Unlock()
	if ok {
		_, based := cf.Base()
		ok = based && cf.Missing() == nil
	}
	i.Mu.Lock()
	defer i.Mu.Unlock()
	if !ok || !stOf(i).Caching() || snOf(i).cf != cf {
		stOf(i).OpenAnswered(o, state.OpenReply{}, ErrDisconnected)
		sn.Logger().Debug("disconnected: an open for writing of a file not wholly and validly cached", sn.PathAttr(i), "fileid", i.FileID)
		return false, ErrDisconnected
	}
	r := state.OpenReply{CacheEnabled: true, Version: v}
	stOf(i).OpenAnswered(o, r, nil)
	keep, acts := stOf(i).OpenCached(o, r, true)
	if len(acts) != 0 {
		// Caching was taken away meanwhile (there is no callback offline):
		// not granted.
		stOf(i).OpenUndone(state.Write)
		return false, ErrDisconnected
	}
	stOf(i).GrantedLocally(state.Write)
	sn.disc.oweOpen(i)
	sn.Logger().Debug("disconnected: open for writing granted locally, its OPEN owed", "fileid", i.FileID, "version", v)
	return keep, nil
}

// offlineGrantUndo gives back an open offlineWriteOpen granted when the
// application's open fails after all: no CLOSE (the server never counted
// it), none owed.
func (sn *snfsFS) offlineGrantUndo(i *vfs.Inode) {
	snOf(i).openMu.Lock()
	i.Mu.Lock()
	acts := sn.applyLocked(i, stOf(i).GrantUndone(state.Write))
	i.Mu.Unlock()
	snOf(i).openMu.Unlock()
	sn.notify(i, acts)
}

// oweOpen records that i was opened for writing offline with no OPEN.
func (d *discState) oweOpen(i *vfs.Inode) {
	d.mu.Lock()
	d.owedOpens[i] = true
	d.mu.Unlock()
}

// owesOpen reports whether i has an OPEN owed since the disconnection: its
// write-back waits for sendOwedOpens (the reintegration's OPEN first).
func (d *discState) owesOpen(i *vfs.Inode) bool {
	if d == nil {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.owedOpens[i]
}

// sendOwedOpens settles the files opened for writing offline (reconnected,
// before the other write-backs; each stays owing, its delayed write-back
// held back, until settled here): their dirty data is reintegrated (its
// OPEN, the base check, the write-back or a conflict copy, its CLOSE), their
// kept opens are given back (CLOSEd: a callback the server could not deliver
// while offline fenced the mount for the file, and the server then counts
// none of them, nor calls this client back about the file, while a kept open
// would serve its cached data again with no OPEN; the reintegration's OPEN
// unfenced the mount without saying so), and their opens still held are
// OPENed again. A file left owing (offline again) is settled at the next
// reconnection; one whose reintegration failed otherwise by its delayed
// write-back's own base check (checkBase).
func (sn *snfsFS) sendOwedOpens(ctx context.Context) {
	d := sn.disc
	d.mu.Lock()
	owed := make([]*vfs.Inode, 0, len(d.owedOpens))
	for i := range d.owedOpens {
		owed = append(owed, i)
	}
	d.mu.Unlock()
	settled := 0
	for _, i := range owed {
		if sn.settleOwed(ctx, i) {
			settled++
			d.mu.Lock()
			delete(d.owedOpens, i)
			d.mu.Unlock()
		}
	}
	if settled > 0 {
		sn.Logger().Info("files opened for writing while disconnected settled", "files", settled)
	}
}

// settleOwed is sendOwedOpens for i; false: offline again, i still owes.
func (sn *snfsFS) settleOwed(ctx context.Context, i *vfs.Inode) bool {
	if cf := cacheFileOrNil(i); cf != nil && cf.NeedsWriteBack() {
		if err := sn.reintegrate(ctx, i.FH, cf, "disconnected"); err != nil {
			if errors.Is(err, ErrDisconnected) || sn.disc.offline() {
				return false
			}
			sn.Logger().Warn("reintegration of a file written offline (its data stays dirty)", sn.PathAttr(i), "fileid", i.FileID, "err", err)
		}
	}
	sn.closeDelayed(i, true) // delayclose.go
	return sn.reopenGranted(ctx, i)
}

// reopenGranted OPENs i for writing once for each open granted offline and
// still held (the machine's Forgotten): the server counts them from then
// on, as the machine does. False: offline again before it was done. The answer's caching is applied: a grant at the
// version the cache holds (reintegrate relabelled it) keeps it, anything
// else stops caching as a callback would (its dirty data written back).
func (sn *snfsFS) reopenGranted(ctx context.Context, i *vfs.Inode) bool {
	snOf(i).openMu.Lock()
	stop, owing := false, false
	for {
		i.Mu.Lock()
		left := stOf(i).Forgotten(state.Write) > 0
		c := snOf(i).openCred[state.Write]
		i.Mu.Unlock()
		if !left {
			break
		}
		ok, err := sn.sess.OpenAs(ctx, c.UID, c.GID, c.Groups, i.FH, state.Write)
		if err != nil {
			sn.Logger().Warn("OPEN owed since the disconnection", sn.PathAttr(i), "fileid", i.FileID, "err", err)
			owing = errors.Is(err, ErrDisconnected)
			break
		}
		i.Mu.Lock()
		stOf(i).Reopened(state.Write)
		cf := snOf(i).cf
		r := replyOf(ok)
		if !r.CacheEnabled || cf == nil || !clientfile.Valid(cf.Version(), r) {
			stop = true
		} else if err := cf.Relabel(r.Version); err != nil {
			stop = true
		} else {
			stOf(i).Reintegrated(r.Version)
		}
		i.Mu.Unlock()
	}
	snOf(i).openMu.Unlock()
	if stop {
		sn.Logger().Info("OPEN owed since the disconnection: caching not granted at the cached version, stopping", sn.PathAttr(i), "fileid", i.FileID)
		sn.callback(ctx, i.FH, state.WritebackInvalidate, nil)
	}
	return !owing
}

// offlineTruncate is truncate(2) offline of a file not open for writing
// here: the size of a file the mount caches whole and validly is set as
// through an open for writing granted offline (offlineWriteOpen: its OPEN
// owed, its data reintegrated at reconnection as any written offline), the
// open made for it and closed at once. done false: not such a file, or a
// change with more than a size (ErrDisconnected, as before).
func (sn *snfsFS) offlineTruncate(ctx context.Context, i *vfs.Inode, c vfs.Cred, s vfs.SetAttr) (a nfs3.Fattr, ttl time.Duration, done bool, err error) {
	if s.Size == nil || s.Mode != nil || s.UID != nil || s.GID != nil || s.Atime != nil || s.Mtime != nil ||
		i.Type != nfs3.TypeReg || isProvFH(i.FH) {
		return nfs3.Fattr{}, 0, false, nil
	}
	f, _, err := sn.FS.Open(ctx, i, c, syscall.O_WRONLY)
	if err != nil {
		if errors.Is(err, ErrDisconnected) {
			return nfs3.Fattr{}, 0, false, nil
		}
		return nfs3.Fattr{}, 0, true, err
	}
	a, ttl, done, err = sn.snfsSetattrLocal(i, c, s)
	if ferr := sn.FS.Flush(ctx, f); err == nil && done {
		err = ferr // its close: the new size durable in the cache directory
	}
	sn.FS.Release(ctx, f)
	return a, ttl, done, err
}
