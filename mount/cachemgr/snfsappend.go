package cachemgr

import (
	"context"
	"errors"
	"fmt"
	"time"

	"snfs/mount/cachedir"
	"snfs/mount/vfs"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/sunrpc"
)

// Appends in snfs mode (append.go has the core's): at the cache file's end
// while the file is cached, placed by the server (SNFS APPEND) while it is
// write-shared, or written through at the server's size without APPEND.

// snfsAppend is Append in snfs mode.
func (fs *snfsFS) snfsAppend(ctx context.Context, f *vfs.File, data []byte) (uint64, int, error) {
	i := f.I
	// One append at a time: the size read and the write are one step, and a
	// callback that stops caching waits for it (Callback).
	i.AppendMu.Lock()
	var off int64
	var n int
	cached, err := fs.whileCaching(i, func() error {
		cf, err := fs.cacheFile(i)
		if err != nil {
			return err
		}
		off = cf.Size()
		i.Mu.Lock()
		noteWriterLocked(i, cf, f.Cred) // before the data: an index commit between carries it
		i.Mu.Unlock()
		n, err = cf.WriteAt(data, off)
		if n > 0 {
			// Recorded dirty before a callback can stop caching
			// (whileCaching): its write-back then takes these bytes.
			i.Mu.Lock()
			snOf(i).mtime = time.Now()
			i.Mu.Unlock()
			fs.markDirty(i)
		}
		return err
	})
	i.AppendMu.Unlock()
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
func (fs *snfsFS) serverAppend(ctx context.Context, f *vfs.File, data []byte) (uint64, int, error) {
	i := f.I
	if err := i.Flush(ctx, false); err != nil {
		return 0, 0, err
	}
	if len(data) > int(fs.WriteSize()) {
		data = data[:fs.WriteSize()] // the kernel sends the rest next (a short write)
	}
	res, err := fs.sendAppend(ctx, f, data)
	var rerr *sunrpc.RPCError
	if errors.As(err, &rerr) && (rerr.Accept == sunrpc.ProcUnavail || rerr.Accept == sunrpc.ProgUnavail) {
		if fs.noAppend.CompareAndSwap(false, true) {
			fs.Logger().Warn("the server has no SNFS APPEND: appends to write-shared files go at the size last seen", "err", err)
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
func (sn *snfsFS) appendThrough(ctx context.Context, f *vfs.File, data []byte) (uint64, int, error) {
	fs := sn.FS
	if err := fs.RevalidateSize(ctx, f); err != nil {
		return 0, 0, err
	}
	off, n, err := fs.Buffered(ctx, f, 0, data, true)
	if err == nil {
		err = f.I.Flush(ctx, false)
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
func (sn *snfsFS) sendAppend(ctx context.Context, f *vfs.File, data []byte) (*snfs1.AppendRes, error) {
	fs := sn.FS
	i := f.I
	i.FlushMu.Lock()
	defer i.FlushMu.Unlock()
	if err := sn.writeBackFirst(ctx, i); err != nil {
		return nil, err
	}
	c := fs.Client(f.Cred)
	fs.Stats().Writes.Add(1)
	res, err := vfs.RPC(ctx, fs, func() (*snfs1.AppendRes, error) { return c.Append(ctx, i.FH, data, nfs3.Unstable) })
	if err != nil {
		return nil, err
	}
	n := min(int(res.Count), len(data))
	i.Mu.Lock()
	defer i.Mu.Unlock()
	i.WccLocked(&res.Wcc, time.Now())
	if n > 0 && res.Committed == nfs3.Unstable {
		i.WState.Unstable = append(i.WState.Unstable, vfs.SentRun{Extent: vfs.Extent{Off: res.Offset, Data: append([]byte(nil), data[:n]...)}, Verf: res.Verf})
	}
	i.WState.Cred, i.WState.Mtime = f.Cred, time.Now()
	return res, nil
}
