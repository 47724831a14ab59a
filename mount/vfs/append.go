package vfs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"snfs/mount/cachedir"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/sunrpc"
)

// O_APPEND (docs/mount.md, "Appends"). Without FUSE's write-back cache the
// kernel sends an append's WRITE at its own idea of the file's size, which is
// stale as soon as another client has extended the file: the mount places an
// O_APPEND open's appends itself (Append; the bridge decides which WRITEs are
// appends, from the request's flags) and the bridge tells the kernel where
// they went. Such an open's I/O is direct (Direct), so that no data
// enters the kernel's page cache at the offset the kernel chose.
//
//   - nfs mode: at the size this client last learned from the server, with
//     its own unwritten data applied; the size is fetched first when the
//     cached attributes have expired (as Linux's NFS client revalidates the
//     size before an append), and every open fetches it (close-to-open). So
//     sequential appends from two mounts keep every byte, and an append never
//     lands before the size last learned. Concurrent appends through two
//     mounts may still overwrite each other, as with any NFSv3 client.
//   - snfs mode, the file cached here: at the cache file's size, which is
//     the file's (no other client writes it while this one caches it).
//   - snfs mode, write-shared: the server places the write at its end of
//     file (SNFS APPEND, docs/protocol.md), one write of its own, so appends
//     from many clients keep every byte, each append whole. A server without
//     APPEND gets nfs mode's placement.

// Append writes data at the end of f's file (an O_APPEND open's write) and
// returns where it went and how much of data was taken.
func (fs *FS) Append(ctx context.Context, f *File, data []byte) (uint64, int, error) {
	return fs.ops.Append(ctx, f, data)
}

// Append is FS.Append in nfs mode.
func (o nfsOps) Append(ctx context.Context, f *File, data []byte) (uint64, int, error) {
	if err := o.fs.refuseChange(); err != nil {
		return 0, 0, err
	}
	return o.fs.appendCore(ctx, f, data)
}

// appendCore is nfs mode's append (also snfs mode's by a file the protocol
// did not open).
func (fs *FS) appendCore(ctx context.Context, f *File, data []byte) (uint64, int, error) {
	if err := fs.revalidateSize(ctx, f); err != nil {
		return 0, 0, err
	}
	return fs.buffered(ctx, f, 0, data, true)
}

// Append reports whether f's writes go at the end of file (opened O_APPEND
// for writing): the bridge calls FS.Append for them.
func (f *File) Append() bool { return f.append }

// revalidateSize fetches f's attributes when the cached ones have expired.
func (fs *FS) revalidateSize(ctx context.Context, f *File) error {
	i := f.i
	i.mu.Lock()
	fresh := i.ttlLocked(time.Now()) > 0
	i.mu.Unlock()
	if fresh {
		return nil
	}
	start := fs.attrStart()
	a, err := fs.getattr(ctx, f.cred, i.FH)
	if err != nil {
		return err
	}
	i.mu.Lock()
	i.postOpLocked(a, start, time.Now())
	i.mu.Unlock()
	return nil
}

// snfsAppend is Append in snfs mode.
func (fs *snfsFS) snfsAppend(ctx context.Context, f *File, data []byte) (uint64, int, error) {
	i := f.i
	// One append at a time: the size read and the write are one step, and a
	// callback that stops caching waits for it (Callback).
	i.appendMu.Lock()
	var off int64
	var n int
	cached, err := fs.whileCaching(i, func() error {
		cf, err := fs.cacheFile(i)
		if err != nil {
			return err
		}
		off = cf.Size()
		n, err = cf.WriteAt(data, off)
		if n > 0 {
			// Recorded dirty before a callback can stop caching
			// (whileCaching): its write-back then takes these bytes.
			i.mu.Lock()
			snOf(i).cred, snOf(i).mtime = f.cred, time.Now()
			i.mu.Unlock()
			fs.markDirty(i)
		}
		return err
	})
	i.appendMu.Unlock()
	if cached {
		switch {
		case err == nil:
			return uint64(off), n, nil
		case errors.Is(err, cachedir.ErrRemoved) && n == 0:
			// Caching stopped meanwhile (a callback): the server places it.
		default:
			return uint64(off), n, fmt.Errorf("cache directory: %w", err)
		}
	}
	if fs.noAppend.Load() {
		return fs.appendThrough(ctx, f, data)
	}
	return fs.serverAppend(ctx, f, data)
}

// serverAppend has the server place data at its end of file (SNFS APPEND,
// UNSTABLE: committed at close or fsync like the file's other writes
// through). This client's own unsent writes go first.
func (fs *snfsFS) serverAppend(ctx context.Context, f *File, data []byte) (uint64, int, error) {
	i := f.i
	if err := i.flush(ctx, false); err != nil {
		return 0, 0, err
	}
	if len(data) > int(fs.wsize) {
		data = data[:fs.wsize] // the kernel sends the rest next (a short write)
	}
	res, err := fs.sendAppend(ctx, f, data)
	var rerr *sunrpc.RPCError
	if errors.As(err, &rerr) && (rerr.Accept == sunrpc.ProcUnavail || rerr.Accept == sunrpc.ProgUnavail) {
		if fs.noAppend.CompareAndSwap(false, true) {
			fs.log.Warn("the server has no SNFS APPEND: appends to write-shared files go at the size last seen", "err", err)
		}
		return fs.appendThrough(ctx, f, data)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("APPEND: %w", err)
	}
	n := min(int(res.Count), len(data))
	if n == 0 {
		return res.Offset, 0, fmt.Errorf("APPEND: %w", nfs3.ErrIO)
	}
	return res.Offset, n, nil
}

// appendThrough is a write-shared file's append to a server without APPEND:
// at the size last seen (revalidated when it expired), written through.
func (fs *FS) appendThrough(ctx context.Context, f *File, data []byte) (uint64, int, error) {
	if err := fs.revalidateSize(ctx, f); err != nil {
		return 0, 0, err
	}
	off, n, err := fs.buffered(ctx, f, 0, data, true)
	if err == nil {
		err = f.i.flush(ctx, false)
	}
	if err != nil {
		return 0, 0, err
	}
	return off, n, nil
}

// sendAppend sends one APPEND of data and records its result: the wcc_data,
// and the bytes the server holds UNSTABLE (data is copied: the caller's
// buffer is the kernel request's), to be committed with the file's other
// writes.
func (fs *FS) sendAppend(ctx context.Context, f *File, data []byte) (*snfs1.AppendRes, error) {
	i := f.i
	i.flushMu.Lock()
	defer i.flushMu.Unlock()
	if err := fs.writeBackFirst(ctx, i); err != nil {
		return nil, err
	}
	c := fs.client(f.cred)
	fs.stats.Writes.Add(1)
	res, err := rpc(ctx, fs, func() (*snfs1.AppendRes, error) { return c.Append(ctx, i.FH, data, nfs3.Unstable) })
	if err != nil {
		return nil, err
	}
	n := min(int(res.Count), len(data))
	i.mu.Lock()
	defer i.mu.Unlock()
	i.wccLocked(&res.Wcc, time.Now())
	if n > 0 && res.Committed == nfs3.Unstable {
		i.w.unstable = append(i.w.unstable, sentRun{extent{res.Offset, append([]byte(nil), data[:n]...)}, res.Verf})
	}
	i.w.cred, i.w.mtime = f.cred, time.Now()
	return res, nil
}
