package server

import (
	"snfs/nfs3"
	"snfs/snfs1"
)

// removedPermits is what a record removes that another client's permit
// covers: the directory of an RMDIR record, or the one a RENAME record
// replaces, when a client other than the batch's holds its permit (nil:
// none). It is recalled before the record is applied, as NFSv3's RMDIR
// and RENAME recall it (rmdirRemoved, renameRemoved; docs/protocol.md
// section 21.6): the holder's logged entries are in the directory when
// the record runs, which then fails NOTEMPTY instead of removing a
// directory the holder's applications were told holds them.
func (b *batch) removedPermits(rec *snfs1.CMLRecord) [][]byte {
	if (rec.Op != snfs1.CMLRmdir && rec.Op != snfs1.CMLRename) || !b.s.consist.PermitsActive() {
		return nil
	}
	fh, r := b.dirReq(rec.Dir)
	if r == nil {
		return nil
	}
	defer r.release()
	var gone []nfs3.FH
	if rec.Op == snfs1.CMLRmdir {
		gone = rmdirRemoved(b.s, b.c, r, &nfs3.DirOpArgs{Dir: fh, Name: rec.Name})
	} else {
		to, err := b.dir(rec.ToDir)
		if err != nil {
			return nil
		}
		gone = renameRemoved(b.s, b.c, r, &nfs3.RenameArgs{From: nfs3.DirOpArgs{Dir: fh, Name: rec.Name},
			To: nfs3.DirOpArgs{Dir: to, Name: rec.ToName}})
	}
	var held [][]byte
	for _, d := range gone {
		if b.s.consist.PermitHeldByOther(b.mid, d) {
			held = append(held, d)
		}
	}
	return held
}

// gate recalls the permits pdirs (removedPermits), then admits accs (the
// record's plain accesses); done is called once both are through, at once
// or from the goroutine that delivers the last answer.
func (b *batch) gate(pdirs [][]byte, accs []fileAccess, done func(error)) {
	if len(pdirs) == 0 {
		b.s.admitBy(b.s.consist.BatchAccess, b.mid, accs, done)
		return
	}
	b.s.consist.PermitGate(b.mid, pdirs, func(_ bool, err error) {
		if err != nil {
			done(err)
			return
		}
		b.s.admitBy(b.s.consist.BatchAccess, b.mid, accs, done)
	})
}

// dirReq resolves the directory o names, for a record's gate (nil when it
// does not resolve, or the batch may not change it: apply then fails, and no
// other client is called back for a change that is refused).
func (b *batch) dirReq(o snfs1.ObjRef) (nfs3.FH, *req) {
	fh, err := b.dir(o)
	if err != nil {
		return nil, nil
	}
	r, err := b.s.resolveWrite(b.c, fh)
	if err != nil {
		return nil, nil
	}
	return fh, r
}
