package vfs

import (
	"context"
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
func (o NFSOps) Append(ctx context.Context, f *File, data []byte) (uint64, int, error) {
	if err := o.FS.RefuseChange(); err != nil {
		return 0, 0, err
	}
	return o.FS.AppendCore(ctx, f, data)
}

// AppendCore is nfs mode's append (also snfs mode's by a file the protocol
// did not open).
func (fs *FS) AppendCore(ctx context.Context, f *File, data []byte) (uint64, int, error) {
	if err := fs.RevalidateSize(ctx, f); err != nil {
		return 0, 0, err
	}
	return fs.Buffered(ctx, f, 0, data, true)
}

// Append reports whether f's writes go at the end of file (opened O_APPEND
// for writing): the bridge calls FS.Append for them.
func (f *File) Append() bool { return f.Appending }

// RevalidateSize fetches f's attributes when the cached ones have expired.
func (fs *FS) RevalidateSize(ctx context.Context, f *File) error {
	i := f.I
	i.Mu.Lock()
	fresh := i.TTLLocked(fs.Now()) > 0
	i.Mu.Unlock()
	if fresh {
		return nil
	}
	start := fs.AttrStart()
	a, err := fs.GetattrFH(ctx, f.Cred, i.FH)
	if err != nil {
		return err
	}
	i.Mu.Lock()
	i.PostOpLocked(a, start, fs.Now())
	i.Mu.Unlock()
	return nil
}
