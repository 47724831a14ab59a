package vfs

import "errors"

// Write-back errors are kept per file, as Linux's errseq_t keeps them per
// address space, not handed to whichever call happens to find them. A
// write-back that fails with an NFS error (ENOSPC, EDQUOT, EIO) drops its
// data; the one call that ran it may not be the application's: the kernel
// sends FLUSH for every close of a descriptor, and a process forked while
// the file is open closes its copy at exec (O_CLOEXEC), where the error is
// ignored. Then the application's own close found nothing left to send and
// returned success for bytes the server never stored.
//
// So the error is latched on the inode (LatchWbErrLocked) with a count, and
// each open (File) remembers the count it has reported up to: every close
// of that open (Flush) returns an error latched since, without moving its
// mark, so a forked child's close cannot take it from the application; an
// fsync returns it and moves the mark (Linux's file_check_and_advance_wb_err).
// An open made after the error sees it too unless someone was told already
// (errseq's "seen" flag: an error nobody has heard of goes to the next one
// to look).

// wbErrs is an inode's latched write-back error; guarded by the Inode's Mu.
type wbErrs struct {
	err  error  // the last write-back error that dropped data
	seq  uint64 // how many such errors there have been
	seen bool   // err has been returned to someone
}

// LatchWbErrLocked records err, a write-back error that dropped data of i,
// for the next close or fsync of each of its opens. Call with i.Mu held.
func (i *Inode) LatchWbErrLocked(err error) {
	i.wbErrs = wbErrs{err: err, seq: i.wbErrs.seq + 1}
}

// sampleWbErrLocked is where a new open starts: before the latched error if
// nobody has been told of it, after it otherwise.
func (i *Inode) sampleWbErrLocked() uint64 {
	if i.wbErrs.seq > 0 && !i.wbErrs.seen {
		return i.wbErrs.seq - 1
	}
	return i.wbErrs.seq
}

// SampleWbErr starts f's mark: every File an application opens calls it as
// it is made (in its mode's Open or Create: the FUSE bridge calls the mode's
// Ops directly, not FS.Open). A File whose mark was never started begins
// before the first error ever latched, and would see it at every close and
// fsync.
func (f *File) SampleWbErr() {
	f.I.Mu.Lock()
	f.wbSeq = f.I.sampleWbErrLocked()
	f.I.Mu.Unlock()
}

// ReportWbErr is what a close (advance false) or an fsync (advance true) of
// f returns: err, the error of its own write-back, together with the error
// latched on the file since f's mark, if err is not already that one. An
// fsync moves f's mark past what it returned.
func (f *File) ReportWbErr(err error, advance bool) error {
	i := f.I
	i.Mu.Lock()
	defer i.Mu.Unlock()
	var latched error
	if f.wbSeq != i.wbErrs.seq {
		latched = i.wbErrs.err
		i.wbErrs.seen = true
		if advance {
			f.wbSeq = i.wbErrs.seq
		}
	}
	if latched == nil || errors.Is(err, latched) {
		return err
	}
	return errors.Join(err, latched)
}
