package vfs

import (
	"context"
	"errors"
	"syscall"
	"time"

	"snfs/mount/cachedir"
	"snfs/nfs3"
	"snfs/snfs1"
)

// snfs mode callbacks (docs/protocol.md section 11): each becomes cache
// invalidations (ours and, through the Notifier, the kernel's) before it is
// answered; and what a server restart changes.

// Callback serves the server's callbacks (client.CallbackHandler): the work
// first, then the answer.
func (fs *FS) Callback(ctx context.Context, fh nfs3.FH, mode snfs1.CallbackMode, attr *nfs3.Fattr) snfs1.CallbackStatus {
	fs.sn.stats.Callbacks.Add(1)
	fs.sn.stats.callback(mode)
	i := fs.lookupInode(fh)
	var cf *cachedir.File
	if i != nil {
		cf = i.cacheFileOrNil()
	}
	if cf == nil {
		cf, _ = fs.sn.cache.File(fh)
	}
	held := cf != nil && cf.Holds()
	if i != nil {
		i.mu.Lock()
		held = held || i.snfsHeldLocked() > 0 || i.sn.caching || i.w.pending()
		i.mu.Unlock()
	}
	if !held {
		fs.sn.stats.CallbacksStale.Add(1)
		return snfs1.CBStale
	}
	if mode.WritesBack() && i != nil {
		i.mu.Lock()
		pending := i.w.pending()
		i.mu.Unlock()
		if pending {
			if err := i.flush(ctx, true); err != nil {
				fs.log.Warn("callback write-back", "fileid", i.FileID, "err", err)
			}
		}
		if err := fs.writeBackInode(ctx, i); err != nil {
			fs.log.Warn("callback write-back", "fileid", i.FileID, "mode", mode, "err", err)
		}
	}
	if mode.Invalidates() {
		if i != nil {
			i.mu.Lock()
			i.sn.caching, i.sn.kernVer = false, 0
			i.invalidateLocked()
			i.mu.Unlock()
		}
		if cf != nil {
			if err := cf.Invalidate(); err != nil && !errors.Is(err, cachedir.ErrRemoved) {
				fs.log.Warn("cache directory: invalidate", "err", err)
			}
		}
		if i != nil {
			fs.notifyData(i)
		}
	}
	if st, ok := fs.delayedCallback(ctx, i); ok {
		return st
	}
	if mode == snfs1.CBRelinquish {
		if i == nil {
			return snfs1.CBTreatAsClosed
		}
		i.mu.Lock()
		idle := i.sn.opens[snfs1.Read]+i.sn.opens[snfs1.Write] == 0 && i.sn.opening == 0
		i.mu.Unlock()
		if idle {
			return snfs1.CBTreatAsClosed
		}
	}
	return snfs1.CBOK
}

// linksOf is i's link count as last seen (0 if i is nil).
func linksOf(i *Inode) uint32 {
	if i == nil {
		return 0
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.attr.Nlink
}

// snfsCreated finishes Create in snfs mode: the new file is opened for
// writing with the protocol.
func (fs *FS) snfsCreated(ctx context.Context, e Entry, c Cred) (Entry, *File, error) {
	i := e.Inode
	keep, direct, err := fs.snfsOpenProto(ctx, i, c, snfs1.Write)
	_ = keep
	if err != nil {
		i.mu.Lock()
		i.opens--
		i.mu.Unlock()
		return Entry{}, nil, err
	}
	now := time.Now()
	i.mu.Lock()
	e.Attr, e.AttrTTL = i.reportLocked(), i.ttlLocked(now)
	i.mu.Unlock()
	f := &File{i: i, cred: c, write: true, sn: snfsFile{mode: snfs1.Write, direct: direct}}
	if err := fs.snfsIOMode(ctx, f, syscall.O_WRONLY); err != nil {
		fs.snfsRelease(ctx, f)
		return Entry{}, nil, err
	}
	return e, f, nil
}

// snfsSetattr is a local size change (snfsSetattrLocal).
func (fs *FS) snfsSetattr(i *Inode, c Cred, size uint64) (nfs3.Fattr, time.Duration, error) {
	if err := fs.snfsTruncate(i, c, size); err != nil {
		return nfs3.Fattr{}, 0, err
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.reportLocked(), i.ttlLocked(time.Now()), nil
}

// snfsSized brings the cache file to a size set on the server.
func (fs *FS) snfsSized(i *Inode, size *uint64) {
	if size == nil {
		return
	}
	if cf := i.cacheFileOrNil(); cf != nil && !cf.NeedsWriteBack() {
		cf.SetVersion(cf.Version(), int64(*size))
	}
}

// serverRestarted: the server restarted and lost every open and caching
// record of this client (docs/protocol.md section 7). Nothing cached here is
// protected by a callback any more: caching stops (the kernel's pages and
// attributes go; files are cached again from their next OPEN), and dirty
// data is written back at once. Files open here go on, written through.
func (fs *FS) serverRestarted() {
	fs.log.Warn("snfs server restarted: dropping cached state and writing back dirty data")
	fs.stopCaching()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	go func() {
		select {
		case <-fs.sn.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := fs.snfsSync(ctx); err != nil {
		fs.log.Error("write-back after a server restart", "err", err)
	}
}

// stopCaching is serverRestarted's first step: no file is cached any more
// (the kernel's pages and attributes go too). Dirty data stays in the cache
// directory until the write-back that follows, which runs while applications
// go on using their open files: until it has run, reads and writes through
// the server write it back first (writeBackFirst).
func (fs *FS) stopCaching() {
	fs.mu.Lock()
	all := make([]*Inode, 0, len(fs.inodes))
	for _, i := range fs.inodes {
		all = append(all, i)
	}
	fs.mu.Unlock()
	for _, i := range all {
		i.mu.Lock()
		was := i.sn.caching || i.sn.kernVer != 0
		i.sn.caching, i.sn.kernVer = false, 0
		if was {
			i.invalidateLocked()
		}
		i.mu.Unlock()
		if was {
			fs.notifyData(i)
		}
	}
}
