package cachemgr

import (
	"errors"
	"io"
	"os"

	"snfs/nfs3"
	"snfs/snfs1"
)

// The data of small files made locally, carried in the reintegration
// (docs/protocol.md section 21.3, CML_STORE; docs/mount.md "--permit-data"):
// as Coda ships a closed file's contents with its log, a file made under a
// permit whose data is in the local store (permitdata.go), closed and at
// most snfs1.StoreMax bytes, is logged as a CML_STORE record when its log
// is reintegrated: its whole content and the times the mount shows for it,
// applied by the server in the same batch as the file's CREATE, durable
// with it. The WRITE, COMMIT and SETATTR of the push after the
// reintegration (pushOffData) are then not sent for it, and, with delayed
// closes, the reintegration opens the file for this mount and its bytes
// stay cached (permitreadback.go).
//
// The record is appended at the reintegration (storeSmall), not at the
// close: a file closed and opened again to write costs one record, the
// last content's. It carries the data as read then (od.mu held, so no
// write of the local data goes between the read and the mark); a write,
// truncation or O_TRUNC open after it (dropTimes) drops the mark, and the
// file is pushed by WRITE, over what the STORE wrote. The mark is kept only
// in memory and says only that the data is unchanged since the STORE (the
// push can be left out); whether a STORE of the file is still to be sent
// is the log's to say (cml.Log.Stores): while one is, the file is not
// pushed (storedNow, pushBeforeCallback, pushBeforeOpen: permitdurable.go), so that its WRITEs
// always come after it, whatever failed or crashed in between. A mount
// restarted with a STORE in its log sends it (the log's record holds the
// data) and pushes the local data after it, the same bytes or newer.

// storeSmall appends a CML_STORE record for each file made locally whose
// data is not on the server yet, not stored already, small enough, every
// open of it closed, and whose provisional inode the mount knows (its times
// are the inode's: the last write's, or those a utimes set since, as
// pushInodeTimes sends), and marks it stored. Only with --permit-data=on.
func (p *permits) storeSmall() {
	if !p.sn.cfg.PermitData || p.log == nil {
		return
	}
	p.off.mu.Lock()
	ods := make([]*offData, 0, len(p.off.data))
	for _, od := range p.off.data {
		ods = append(ods, od)
	}
	p.off.mu.Unlock()
	for _, od := range ods {
		if _, made := p.log.Handle(od.id); made {
			continue // its CREATE is reintegrated: pushed as before
		}
		if err := p.storeOne(od); err != nil {
			p.sn.FS.Logger().Warn("logging a file's data for its reintegration (pushed after it instead)", "err", err)
		}
	}
}

// storeOne appends od's STORE record, if od qualifies (storeSmall).
func (p *permits) storeOne(od *offData) error {
	fh := provFH(od.id)
	o, ok := p.made.of(fh)
	if !ok || !o.live {
		return nil
	}
	i := p.sn.FS.LookupInode(fh)
	if i == nil {
		return nil // a restarted mount: the times kept are pushed (pushTimes)
	}
	od.mu.Lock()
	defer od.mu.Unlock()
	if od.pushed || od.stored != 0 || !p.sn.offClosed(fh) {
		return nil
	}
	data, err := readSmall(od.path, snfs1.StoreMax)
	if err != nil || data == nil {
		return err
	}
	i.Mu.Lock()
	at, mt := i.Attr.Atime, i.Attr.Mtime
	i.Mu.Unlock()
	lsn, err := p.log.AppendLazy(snfs1.CMLRecord{Op: snfs1.CMLStore, Obj: snfs1.ObjRef{Prov: od.id},
		Data: data, Atime: at, Mtime: mt})
	if err != nil {
		return err
	}
	od.stored = lsn
	return nil
}

// offClosed reports whether every open of fh on local data has been
// closed (a FLUSH seen; the RELEASE may still be on its way). An open
// whose lock is held is in use, not closed: its holder may be the very
// resolution this reintegration serves (offReal holds it across Resolve),
// so it is not waited for.
func (sn *snfsFS) offClosed(fh nfs3.FH) bool {
	sn.offOpens.Lock()
	defer sn.offOpens.Unlock()
	for of := range sn.offOpens.m[string(fh)] {
		if !of.mu.TryLock() {
			return false
		}
		flushed := of.flushed
		of.mu.Unlock()
		if !flushed {
			return false
		}
	}
	return true
}

// readSmall reads the file at path whole if it holds at most max bytes
// (nil, nil: larger).
func readSmall(path string, max int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, max+1)
	n, err := io.ReadFull(f, buf)
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return buf[:n:n], nil
	case err != nil:
		return nil, err
	}
	return nil, nil // more than max
}

// storedNow takes in, after a reintegration, the files whose STORE it
// applied: their data is on the server, not pushed (od.mu held); stored
// reports whether od was. waits: a STORE of od is still in the log (its
// batch failed, or a later one of the call did), to be sent by the next
// reintegration: od is not pushed meanwhile, or the STORE, applied after
// the push, would write its older data over what the push wrote. The log
// says so, not od.stored: that mark is dropped by a write after the STORE,
// and is 0 in a restarted mount, while the record is still to be sent.
// With no STORE of od left in the log, a mark still set names a STORE the
// server applied (a refused one drops it: storeRefused) of the data as it
// is.
func (p *permits) storedNow(od *offData) (stored, waits bool) {
	if od.pushed {
		return false, false
	}
	if p.log.Stores(od.id) {
		return false, true
	}
	if od.stored == 0 {
		return false, false
	}
	p.readbackStored(od) // permitreadback.go
	p.offDataPushed(od)
	return true, false
}

// storeRefused: the server refused the STORE rec; its file's mark is
// dropped, so that the data is pushed after the reintegration as without
// it (a later acknowledged LSN must not pass for this record's).
func (p *permits) storeRefused(rec *snfs1.CMLRecord, st snfs1.Status) {
	p.sn.FS.Logger().Warn("the server refused a file's data in the log (pushed after the reintegration instead)", "lsn", rec.LSN, "status", st)
	p.off.mu.Lock()
	ods := make([]*offData, 0, len(p.off.data))
	for _, od := range p.off.data {
		ods = append(ods, od)
	}
	p.off.mu.Unlock()
	for _, od := range ods {
		od.mu.Lock()
		if od.stored == rec.LSN {
			od.stored = 0
		}
		od.mu.Unlock()
	}
}
