package vfs

import (
	"context"
	"fmt"
	"time"

	"snfs/nfs3"
)

// Times set on a file with unwritten cached data (snfs mode).
//
// An archive extractor writes a file and then sets its times (utimes). The
// times must not be moved by the write-back of data written before them, so
// the plain way is to write the data back first, which costs the delayed
// write-back its point: every extracted file is written back, and committed,
// as it is extracted. Instead, such times go to the server at once (as
// explicit times, with the rest of the SETATTR), the data stays dirty, and
// the write-back re-applies the times after its WRITEs. A local write in
// between moves the mtime as on any file system, and nothing is re-applied.
// A client crash before the write-back leaves the server's mtime that of the
// write-back that follows the restart (the data itself is kept).

// snfsTimesLater reports whether a SETATTR that sets times sa (and no size)
// can go to the server without writing i's dirty cached data back first. If
// so, it returns with i.flushMu held, so that no write-back runs before the
// SETATTR is done and recorded (snfsTimesSet).
func (fs *FS) snfsTimesLater(i *Inode, sa *nfs3.Sattr) bool {
	if fs.sn == nil || sa.Size != nil || sa.Atime.How == nfs3.SetToServerTime || sa.Mtime.How == nfs3.SetToServerTime ||
		(sa.Atime.How != nfs3.SetToClientTime && sa.Mtime.How != nfs3.SetToClientTime) {
		return false
	}
	if fs.pinnedOf(i) != nil {
		return false // its kernel's writes go to the server one by one
	}
	// What passthrough writers wrote so far is dirty data older than the
	// times; what they write later is seen as a local write (NoteExternal)
	// and cancels the times' re-application.
	if _, err := fs.snfsNoteExternalLocal(i); err != nil {
		return false
	}
	i.flushMu.Lock()
	i.mu.Lock()
	cf := i.sn.cf
	// Cached, or closed with its data dirty: either way the server has this
	// client as the file's dirty holder and calls it back (to write back,
	// re-applying the times) before anyone else sees the file.
	held := i.sn.caching || i.snfsHeldLocked() == 0 && i.sn.opening == 0
	ok := held && cf != nil && !i.w.pending() && !i.sn.wbMoving
	i.mu.Unlock()
	if ok && cf.NeedsWriteBack() {
		return true
	}
	i.flushMu.Unlock()
	return false
}

// snfsTimesSet records times sa that the server took while i's data stays
// dirty: the write-back re-applies them. The server's mtime is the file's
// now, not the time of the last local write. Called with i.mu held.
func (i *Inode) snfsTimesSetLocked(sa *nfs3.Sattr) {
	if sa.Atime.How == nfs3.SetToClientTime {
		i.sn.setTimes.atime = sa.Atime
	}
	if sa.Mtime.How == nfs3.SetToClientTime {
		i.sn.setTimes.mtime = sa.Mtime
		i.sn.mtime = time.Time{}
	}
}

// reapplyTimes is the end of a write-back of i's data: times set after the
// data was written (snfsTimesSetLocked) are set again, since the WRITEs moved
// the server's mtime. It returns the server's attributes after it (nil if
// there was nothing to set).
func (fs *FS) reapplyTimes(ctx context.Context, i *Inode, cred Cred) (*nfs3.Fattr, error) {
	i.mu.Lock()
	t := i.sn.setTimes
	i.mu.Unlock()
	if t.atime.How != nfs3.SetToClientTime && t.mtime.How != nfs3.SetToClientTime {
		return nil, nil
	}
	var res *nfs3.WccRes
	err := fs.do(ctx, func() (nfs3.Status, error) {
		var err error
		res, err = fs.client(cred).Setattr(ctx, &nfs3.SetattrArgs{Object: i.FH, New: nfs3.Sattr{Atime: t.atime, Mtime: t.mtime}})
		return status(res, err)
	})
	if res != nil {
		i.mu.Lock()
		i.wccLocked(&res.Wcc, time.Now())
		i.mu.Unlock()
	}
	if err != nil {
		return nil, fmt.Errorf("SETATTR of the times set before the write-back: %w", err)
	}
	i.mu.Lock()
	if i.sn.setTimes == t {
		i.sn.setTimes.atime, i.sn.setTimes.mtime = nfs3.SetTime{}, nfs3.SetTime{}
	}
	i.mu.Unlock()
	return res.Wcc.After, nil
}
