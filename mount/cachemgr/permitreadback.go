package cachemgr

import (
	"context"
	"syscall"

	"snfs/mount/cml"
	"snfs/nfs3"
	"snfs/snfs1"
)

// The data of a small file made locally, kept as its cached data after the
// reintegration that stores it (docs/mount.md "--permit-data"): a file whose
// CML_STORE record (permitstore.go) goes in a reintegration is opened for
// writing by that same reintegration (its CREATE sent as CML_CREATE_OPEN,
// permitopen.go), so that the server counts this client as the file's
// caching writer, at a version it gives, before anyone else can open the
// file: another client's open of it calls this mount back first (Table 1).
// The STORE is this open holder's own write; after the reply the open is
// recorded on the real inode (snfsOpenWith, with the STORE's attributes as
// the open's: they are the file's after the batch), the bytes the STORE
// carried are installed as clean data at the open's version (Fill, refused
// if an invalidation ran since the open), and the open is released as a
// delayed close. A later read takes that open over and reads the cache: no
// OPEN and no READ.
//
// Only with delayed closes (--close-delay, not 0: the open kept is what a
// read takes over), only for files whose creator is the session's credentials (the record's
// open is asked with them), only for reintegrations not made for a
// callback nor at unmount (flush, the log's age, Resolve: a callback's reintegration must not wait
// for another callback's answer, which this open's taking in does:
// createOpened.held), and only after p.reint is released (a callback about
// the file waits for it in pushBeforeCallback). An open not granted, or
// handed back by a callback, leaves the file as without this: read from
// the server at its next open. A file whose STORE was not applied after
// all (its data written since, or the record refused) gives its open back
// with a CLOSE.

// readbackMaxBytes bounds the stored bytes one reintegration keeps in
// memory to install after its reply; and it asks at most half the bound of
// kept opens (--kept-opens), or the opens it keeps would CLOSE the others.
const readbackMaxBytes = 16 << 20

// readback is one stored file's open asked of its reintegration.
type readback struct {
	od   *offData
	lsn  uint64 // the STORE record's
	data []byte // the STORE's bytes
	co   *createOpened
	end  func()
	// Set with p.reint held, by the reintegration:
	stored bool        // the STORE was applied, the file not pushed
	fh     nfs3.FH     // the real file
	attr   *nfs3.Fattr // its attributes after the batch
}

// readbackBegin asks, for each file storeSmall marked stored whose creator
// is the session's credentials, its open of the reintegration about to be
// sent (p.reint held). Only with --permit-data=on.
func (p *permits) readbackBegin(want bool) []*readback {
	if !want || !p.sn.cfg.PermitData || p.log == nil || p.sn.cfg.CloseDelay == 0 {
		// Without delayed closes the open would be CLOSEd at once, and
		// the next open send its OPEN anyway.
		return nil
	}
	p.off.mu.Lock()
	ods := make([]*offData, 0, len(p.off.data))
	for _, od := range p.off.data {
		ods = append(ods, od)
	}
	p.off.mu.Unlock()
	sc := sessionCred()
	var out []*readback
	held := 0
	for _, od := range ods {
		if held >= readbackMaxBytes || p.sn.cfg.KeptOpens > 0 && len(out) >= p.sn.cfg.KeptOpens/2 {
			break // the rest is read from the server at its next open
		}
		o, ok := p.made.of(provFH(od.id))
		if !ok || !o.live || o.creator == nil || o.creator.UID != sc.UID || o.creator.GID != sc.GID {
			continue
		}
		od.mu.Lock()
		lsn := od.stored
		var data []byte
		var err error
		if lsn != 0 && !od.pushed {
			// Under od.mu with the mark still set: the bytes the STORE
			// carries (a write drops the mark first).
			data, err = readSmall(od.path, snfs1.StoreMax)
		}
		od.mu.Unlock()
		if lsn == 0 || err != nil || data == nil {
			continue
		}
		p.opens.mu.Lock()
		asked := p.opens.want[od.id] != nil // a provisional open's (permitcreate.go)
		p.opens.mu.Unlock()
		if asked {
			continue
		}
		held += len(data)
		co := p.sn.createOpens.begin(p.sn.AttrStart())
		co.epoch = p.sn.openEpochNow()
		co.open.Status = nfs3.ErrNotSupp // not opened, unless the reply says so
		out = append(out, &readback{od: od, lsn: lsn, data: data, co: co, end: p.opens.waitStored(od.id, co)})
	}
	if len(out) > 0 {
		p.rbs = make(map[*offData]*readback, len(out))
		for _, rb := range out {
			p.rbs[rb.od] = rb
		}
	}
	return out
}

// readbackStored: od's STORE record was applied (storedNow; p.reint held).
func (p *permits) readbackStored(od *offData) {
	if rb := p.rbs[od]; rb != nil && rb.lsn == od.stored {
		rb.stored = true
	}
}

// readbackMade takes in the objects a round of the reintegration made
// (p.reint held).
func (p *permits) readbackMade(rbs []*readback, made map[uint64]cml.Made) {
	for _, rb := range rbs {
		if m, ok := made[rb.od.id]; ok && len(m.FH) > 0 {
			rb.fh, rb.attr = m.FH, m.Attr
		}
	}
}

// readbackEnd ends the opens' registrations (p.reint held): a later
// reintegration asks none for these files.
func (p *permits) readbackEnd(rbs []*readback) {
	for _, rb := range rbs {
		rb.end()
	}
	p.rbs = nil
}

// readbackInstall takes in each open the reintegration was granted (p.reint
// not held): recorded on the real inode, the STORE's bytes installed as the
// clean data at its version, released as a delayed close.
func (p *permits) readbackInstall(ctx context.Context, rbs []*readback) {
	sn := p.sn
	if len(rbs) > 0 && sn.readbackTaking != nil {
		sn.readbackTaking()
	}
	for _, rb := range rbs {
		co := rb.co
		if co.made == nil {
			co.end(nil)
			continue
		}
		if !rb.stored || rb.attr == nil || string(rb.fh) != string(co.made) || rb.attr.Size != uint64(len(rb.data)) {
			sn.giveBackCreateOpened(ctx, co) // CLOSEs an open held
			continue
		}
		if err := p.readbackOne(ctx, rb); err != nil {
			sn.FS.Logger().Debug("keeping a stored file's data cached", "err", err)
		}
	}
}

// readbackOne is readbackInstall of one file.
func (p *permits) readbackOne(ctx context.Context, rb *readback) error {
	sn, co := p.sn, rb.co
	ri := sn.FS.LookupInode(co.made)
	if ri == nil {
		ri = sn.FS.Inode(co.made, rb.attr, co.start)
	}
	if ri.Type != nfs3.TypeReg {
		sn.giveBackCreateOpened(ctx, co)
		return nil
	}
	// The callbacks about the file that came meanwhile are waited for
	// here: one that handed the open back leaves nothing held.
	pre := co.held(ctx, sn, co.made)
	if pre == nil {
		return nil
	}
	// The open was granted before the STORE wrote the data: the file's
	// attributes are the STORE's (the batch is this open holder's write).
	a := *rb.attr
	pre.Attr = &a
	co.open.OpenOK = *pre
	// The REINTEGRATE made the file with the session's credentials: they
	// own it, as a CREATE_OPEN's creator does, so this open needs no ACCESS.
	ri.Mu.Lock()
	ri.PostOpLocked(&a, co.start, sn.FS.Now())
	ri.Mu.Unlock()
	sn.seedCreatorAccess(ri, sessionCred())
	f, _, err := sn.snfsOpenWith(ctx, ri, sessionCred(), syscall.O_WRONLY, co)
	if err != nil {
		return err
	}
	defer sn.Release(ctx, f) // a delayed close: the next open takes it over
	if !pre.CacheEnabled {
		return nil
	}
	cf, err := sn.cacheFile(ri)
	if err != nil {
		return err
	}
	// The generation before the checks: an invalidation after them
	// refuses the fill. The bytes are the file's at the open's version
	// (what this mount wrote since is held, and not filled over).
	gen := cf.Gen()
	if !snfsCaching(ri) || cf.Version() != pre.CacheVersion {
		return nil
	}
	return cf.Fill(gen, 0, rb.data)
}
