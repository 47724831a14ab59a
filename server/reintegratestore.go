package server

import (
	"errors"
	"syscall"

	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
	"snfs/store"
)

// CML_STORE (docs/protocol.md section 21.3, "Data (CML_STORE)"): a regular
// file's whole content and times carried in the batch, as Coda ships a
// closed file's contents with the log. A client that made a file under its
// permit and wrote it in its cache sends the file's data here instead of a
// WRITE (and a SETATTR of the times) after the reintegration that makes it.
//
// It is applied as a WRITE of the data from offset 0 and a SETATTR of the
// size (the file cut to the data's length) and the times, with the caller's
// credentials (the owner may always write, as for WRITE); its durability is
// the batch's group commit (the object is in the batch's commit set, flushed
// with fsync, or syncfs with the rest, before the LSN is recorded and the
// reply sent), as a FILE_SYNC WRITE's would be before its reply.
//
// A STORE is an overwrite of the whole file: applying it again gives the
// same file. So the check after a crash (reintegratecrash.go) needs nothing
// of it: it changes no name (it never ends the prefix, as a SETATTR), and a
// STORE the crash may have interrupted (its LSN above the last applied one,
// at or below the pending one) is applied again rather than answered, since
// its data, unlike the names, may not have reached the disk before the
// crash; its object gone by then (removed by a later record of the batch
// applied before the crash), it is answered OK without being applied.

// applyStore applies the STORE rec.
func (b *batch) applyStore(rec *snfs1.CMLRecord, res *snfs1.CMLResult) error {
	s, ctx, c := b.s, b.ctx, b.c
	crashed := rec.LSN <= b.maybe // applied before a crash, maybe
	fh, err := b.ref(rec.Obj)
	if err != nil {
		if crashed {
			return nil
		}
		return err
	}
	r, err := s.resolveWrite(c, fh)
	if err != nil {
		if crashed && (errors.Is(err, nfs3.ErrStale) || errors.Is(err, store.ErrStale)) {
			return nil
		}
		return err
	}
	defer r.release()
	if err := regularFile(r); err != nil {
		return err
	}
	// The object was made by the batch, or the batch holds a permit: as a
	// SETATTR of a file (setattrPermitted).
	if !b.setattrPermitted(rec, fh, r) {
		return snfs1.ErrNoPermit
	}
	if err := s.store.OpenIO(r.node); err != nil {
		return err
	}
	if err := store.As(r.cred, func() error { return s.store.MayIO(r.node, r.cred.UID, true) }); err != nil {
		return err
	}
	if r.cred.UID != 0 {
		// As a WRITE by anyone but root (write.go).
		if err := s.store.ClearSetID(r.node); err != nil {
			return err
		}
	}
	if len(rec.Data) > 0 {
		if _, err := s.store.WriteAt(r.node, rec.Data, 0); err != nil {
			return err
		}
	}
	size := uint64(len(rec.Data))
	var wr nfs3.WccRes
	// The size after the data: a file longer than it is cut. The times
	// after the data, or the write would set the modification time.
	s.setattr(ctx, c, r, &nfs3.SetattrArgs{Object: fh, New: nfs3.Sattr{Size: &size,
		Atime: nfs3.SetTime{How: nfs3.SetToClientTime, Time: rec.Atime},
		Mtime: nfs3.SetTime{How: nfs3.SetToClientTime, Time: rec.Mtime}}}, &wr)
	if wr.Status != nfs3.OK {
		return wr.Status
	}
	res.Attr = wr.Wcc.After
	b.changed = append(b.changed, fh)
	return nil
}

// storeAccesses returns the plain access a STORE makes (accesses): none
// for a file made by the batch (named by its provisional id: nobody else
// can have it yet, and its maker is recorded as its closed dirty holder,
// so that another client's OPEN calls the maker back), else a WRITE's of
// the file, so that other clients caching it are called back first.
//
// A STORE of a file made by the batch that a crash may have interrupted
// (its LSN at or below the pending one) is a WRITE's too: the file's name
// may have been on disk since before the crash, and other clients may have
// opened and written it before this resend.
func (b *batch) storeAccesses(rec *snfs1.CMLRecord) []fileAccess {
	fh := rec.Obj.FH
	if rec.Obj.Prov != 0 {
		if rec.LSN > b.maybe {
			return nil
		}
		var err error
		if fh, err = b.ref(rec.Obj); err != nil {
			return nil
		}
	}
	r, err := b.s.resolveWrite(b.c, fh)
	if err != nil {
		return nil
	}
	defer r.release()
	if !b.setattrPermitted(rec, fh, r) {
		return nil
	}
	return regularAccess(r, fh, state.AccessWrite)
}

// setattrPermitted reports whether the batch may apply the SETATTR rec of
// the object fh (resolved as r).
func (b *batch) setattrPermitted(rec *snfs1.CMLRecord, fh nfs3.FH, r *req) bool {
	if r.node.Stat.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		return b.permitted(fh)
	}
	return rec.Obj.Prov != 0 || b.anyPermit()
}

// anyPermit reports whether the client holds some permit the batch names.
func (b *batch) anyPermit() bool {
	if len(b.made) > 0 {
		return true
	}
	for id, p := range b.permits {
		if b.s.consist.HoldsPermitID(b.mid, id, p) {
			return true
		}
	}
	return false
}
