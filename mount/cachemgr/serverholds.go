package cachemgr

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"snfs/mount/cachedir"
	"snfs/mount/vfs"
	"snfs/nfs3"
)

// Recovery's test of what the server already holds (docs/mount.md
// "Recovery"). A restarted mount (or a fenced one) finds records with data to
// write back whose server file no longer has the recorded base. Most of them
// are this client's own doing: a write-back that reached the server (all of
// it, or part of it before the kill) whose clean state did not reach the
// index before the crash. A conflict copy is made only when somebody else
// changed the file and data of this client's is still missing from it.

// ownChange reports whether the server's file, which no longer has cf's
// recorded base, was changed by nobody but this client since cf's data was
// labelled: the file's version (docs/protocol.md section 9) is still the one
// cf carries. Every OPEN for writing by another client takes a fresh
// version, and every plain NFSv3 change, a server restart and the loss of
// the file's entry drop it; so an unchanged version means that the change
// is a write-back of this client's (complete or cut off), and writing the
// dirty data back again completes it. ok is the reintegration's OPEN for
// writing, whose old_cache_version is the version before it.
func ownChange(cf *cachedir.File, oldVersion uint64) bool {
	v := cf.Version()
	return v != 0 && v == oldVersion
}

// serverHolds reports whether the server's file (attributes a) already
// holds every change of wb (cf's pending changes, from Dirty): its size is
// wb's, the bytes of wb's dirty ranges are the server's at the same offsets,
// and so are the zeros of a pending truncation (from the smallest size set
// up to the size). Then a write-back would change nothing, whoever made the
// server's file so, and wb can be marked clean (MarkClean keeps what was
// written since Dirty dirty). It reads those ranges from the server (root's
// identity, as reintegration writes) in rsize pieces.
func (sn *snfsFS) serverHolds(ctx context.Context, fh nfs3.FH, cf *cachedir.File, wb cachedir.WriteBack, a *nfs3.Fattr) (bool, error) {
	fs := sn.FS
	if a == nil || int64(a.Size) != wb.Size {
		return false, nil
	}
	ranges := wb.Ranges
	if wb.Truncated && wb.TruncTo < wb.Size {
		ranges = append(ranges, cachedir.Range{Off: wb.TruncTo, Len: wb.Size - wb.TruncTo})
	}
	c := fs.Client(vfs.Cred{})
	ours := make([]byte, fs.ReadSize())
	for _, r := range ranges {
		for off := r.Off; off < r.End(); {
			n := min(int64(fs.ReadSize()), r.End()-off)
			k, unknown, err := cf.ReadKnown(ours[:n], off)
			if errors.Is(err, io.EOF) {
				return false, nil // cut since Info: not what was compared
			}
			if err != nil {
				return false, fmt.Errorf("reading the cache file: %w", err)
			}
			if unknown > 0 || int64(k) != n {
				return false, nil // a change the cache cannot show: not provably held
			}
			var res *nfs3.ReadRes
			res, err = vfs.RPC(ctx, fs, func() (*nfs3.ReadRes, error) { return c.Read(ctx, fh, uint64(off), uint32(n)) })
			if err != nil {
				return false, fmt.Errorf("READ: %w", err)
			}
			if len(res.Data) == 0 || !bytes.Equal(res.Data, ours[:len(res.Data)]) {
				return false, nil
			}
			off += int64(len(res.Data))
		}
	}
	return true, nil
}

// reconcile decides, at a reintegration of i whose server file (attributes
// a, from the reintegration's OPEN for writing, whose old_cache_version is
// oldVersion) no longer has cf's recorded base, whether the difference is
// this client's own doing: the file's version is still cf's (ownChange), or
// the server's file already holds every change cf has to write back
// (serverHolds; then they are marked clean, durably). If so it moves cf's
// base to a and returns true: the caller writes back what is left (nothing,
// or the rest of a write-back cut off part way), and makes no conflict copy.
// Called with i.FlushMu held, so no write-back of i runs meanwhile.
func (fs *snfsFS) reconcile(ctx context.Context, i *vfs.Inode, cf *cachedir.File, a *nfs3.Fattr, oldVersion uint64, reason string) (bool, error) {
	if ownChange(cf, oldVersion) {
		fs.stats.Reconciled.Add(1)
		fs.Logger().Info("reintegration: the server's file changed only by this client's own write-back (same version): completing it",
			fs.PathAttr(i), "fileid", i.FileID, "reason", reason)
		return true, cf.SetBase(baseOf(a))
	}
	wb := cf.Dirty()
	held, err := fs.serverHolds(ctx, i.FH, cf, wb, a)
	if err != nil {
		return false, fmt.Errorf("reintegration: comparing with the server's file: %w", err)
	}
	if !held {
		return false, nil
	}
	if err := cf.MarkClean(wb, cf.Version()); err != nil {
		return false, fmt.Errorf("reintegration: %w", err)
	}
	if err := cf.SetBase(baseOf(a)); err != nil {
		return false, fmt.Errorf("reintegration: %w", err)
	}
	if err := cf.Sync(); err != nil {
		return false, fmt.Errorf("reintegration: %w", err)
	}
	fs.stats.Reconciled.Add(1)
	fs.Logger().Info("reintegration: the server's file already holds this client's data (written back before the restart): nothing to write, no conflict",
		fs.PathAttr(i), "fileid", i.FileID, "reason", reason)
	return true, nil
}
