package cachemgr

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"snfs/nfs3"
)

// What the mount promises of the data of files made locally
// (--permit-data=on; docs/mount.md "The data of a regular file made
// locally stays local", "Durability"): a close or an fsync of such a file
// returns once its data and the log are durable in the cache directory
// (offSync; the log alone for a file nothing was written into: its data is
// empty, which the log's CREATE says), from where they reach the server, whatever fails or crashes
// in between; a directory's fsync, Sync (syncfs) and unmount return once
// they are on the server, and fail (EIO) if they could not be put there.
//
// So a push that fails (pushOffData) is never only logged: the data stays
// in the cache directory and is pushed again by the next reintegration,
// by the log's loop even with an empty log (retryPushes, every
// permitLogAge while it fails), at the mount's start (pushLeft), before an
// open of the file is served (pushBeforeOpen: the real file would be read
// without its data, or written and then written over by a push or a STORE
// sent later), and before a callback of it is answered (pushBeforeCallback);
// and syncData reports it.

// errNotOnServer wraps what kept the data of files made locally from the
// server at a directory's fsync, Sync or unmount: EIO to the caller.
func errNotOnServer(n int, cause error) error {
	return fmt.Errorf("cachemgr: the data of %d files made locally is not on the server (kept in the cache directory, written again later): %w (%v)", n, syscall.EIO, cause)
}

// madeUnpushed is the local data of the files the server made whose data is
// not written to them yet, with their real handles.
func (p *permits) madeUnpushed() []dataPush {
	p.off.mu.Lock()
	ods := make([]*offData, 0, len(p.off.data))
	for _, od := range p.off.data {
		ods = append(ods, od)
	}
	p.off.mu.Unlock()
	var out []dataPush
	for _, od := range ods {
		fh, ok := p.log.Handle(od.id)
		if !ok {
			continue // its CREATE is in the log: sent with it
		}
		od.mu.Lock()
		pushed := od.pushed
		od.mu.Unlock()
		if !pushed {
			out = append(out, dataPush{od, fh})
		}
	}
	return out
}

// madeData is the local data of the file the server made as fh, if any is
// held (nil: none). Only the match's od.mu is taken: a push of another
// file holds its own for as long as its WRITEs take.
func (p *permits) madeData(fh nfs3.FH) *dataPush {
	p.off.mu.Lock()
	ods := make([]*offData, 0, len(p.off.data))
	for _, od := range p.off.data {
		ods = append(ods, od)
	}
	p.off.mu.Unlock()
	for _, od := range ods {
		if h, ok := p.log.Handle(od.id); ok && string(h) == string(fh) {
			return &dataPush{od, h}
		}
	}
	return nil
}

// syncData is flush (the log reintegrated, its files' data pushed after
// it) for a directory's fsync, Sync and unmount, which promise the data on
// the server: the data of files the server made that is still not written
// to them (a push that failed then or earlier, with an empty log too) is
// pushed now; what is still not on the server after that is an error
// (errNotOnServer). Offline, nothing can be: the log and the data are
// durable locally (flush), as a file's fsync makes them.
func (p *permits) syncData(ctx context.Context, why string) error {
	if err := p.flush(ctx, why); err != nil {
		return err
	}
	if p.sn.disc.offline() || len(p.madeUnpushed()) == 0 {
		return nil
	}
	// What is left is counted before p.reint goes: a reintegration that
	// runs after it pushes what it makes itself.
	p.reint.Lock()
	err := p.pushOffData(ctx, nil) // offlinereint.go
	left := p.madeUnpushed()
	p.reint.Unlock()
	if len(left) == 0 {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("cachemgr: writing the data of files made locally: %w", ctx.Err())
	}
	if err == nil {
		// Not pushed for a STORE still in the log: a reintegration failed.
		err = errors.New("a CML_STORE of it is still in the modification log")
	}
	return errNotOnServer(len(left), err)
}

// retryPushes pushes again, from the log's loop, the data a push failed to
// write, at most every permitLogAge while it fails (the log's own
// reintegration pushes too; this serves an empty log).
func (p *permits) retryPushes() {
	if p.sn.disc.offline() || len(p.madeUnpushed()) == 0 {
		return
	}
	p.mu.Lock()
	wait := time.Since(p.pushFailed) < p.age
	p.mu.Unlock()
	if wait {
		return
	}
	ctx, cancel := p.sn.stopCtx(time.Minute)
	defer cancel()
	p.reint.Lock()
	err := p.pushOffData(ctx, nil)
	p.reint.Unlock()
	p.mu.Lock()
	if err != nil {
		p.pushFailed = time.Now()
	} else {
		p.pushFailed = time.Time{}
	}
	p.mu.Unlock()
}

// pushLeft pushes, at the mount's start, the data an earlier mount left
// unpushed of files the server made (a log with records pushes after its
// reintegration instead).
func (p *permits) pushLeft(ctx context.Context) {
	if len(p.madeUnpushed()) == 0 {
		return
	}
	p.reint.Lock()
	err := p.pushOffData(ctx, nil)
	p.reint.Unlock()
	if err != nil {
		p.sn.FS.Logger().Warn("writing the data an earlier mount left (written again later)", "err", err)
	}
}

// pushBeforeOpen makes sure, before an open of the real regular file fh
// is served, that a file made locally has its local data on the server:
// the log is sent first if it holds the file's STORE, then the data is
// pushed. Otherwise the open would read the file without it, and what it
// wrote would be written over by the push or the STORE sent later. An
// error (the data could not be written) fails the open (EIO). Offline, the
// file is served as the mount holds it.
func (p *permits) pushBeforeOpen(ctx context.Context, fh nfs3.FH) error {
	p.off.mu.Lock()
	n := len(p.off.data)
	p.off.mu.Unlock()
	if n == 0 || isProvFH(fh) || p.sn.disc.offline() {
		return nil
	}
	d := p.madeData(fh)
	if d == nil {
		return nil
	}
	if p.log.Stores(d.od.id) {
		if err := p.reintegrate(ctx, "an open of a file whose data is in the log"); err != nil {
			return errNotOnServer(1, err)
		}
	}
	p.reint.Lock()
	defer p.reint.Unlock()
	d.od.mu.Lock()
	stored, waits := p.storedNow(d.od)
	d.od.mu.Unlock()
	if stored {
		return nil
	}
	if waits {
		return errNotOnServer(1, errors.New("a CML_STORE of it is still in the modification log"))
	}
	if _, wrote, err := p.pushOne(ctx, d.od, d.fh); err != nil {
		return errNotOnServer(1, err)
	} else if wrote {
		if ri := p.sn.FS.LookupInode(d.fh); ri != nil {
			ri.Invalidate()
		}
	}
	return nil
}
