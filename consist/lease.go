package consist

import (
	"errors"
	"time"

	"snfs/state"
)

// Local processes on the server machine are a client too (docs/protocol.md,
// "Local processes"). Their changes come from the store's change notifier
// (Changed); their opens of a file a client may hold dirty blocks of are held
// by a lease on the file, which the table asks for (state.ActLease) while a
// client may be dirty. A local open breaks it; the break is applied as an
// access by the local processes' client (state.AccessArgs.Local): for a read,
// every dirty client writes back (CB_WRITEBACK, caching kept: the local
// process reads what was written before it opened, as a client does at an
// OPEN); for a write, as a plain NFSv3 write (write back and invalidate).
// Then the lease is released and the local open proceeds. A client that does
// not answer is fenced as for any callback: the open waits at most the
// callback deadline (or the kernel's lease-break-time, whichever ends first).
// A lease the table still wants is taken again by the sweeper once no local
// process has the file open.

// Leaser holds file leases (package store's Lease and Unlease, adapted by
// the server).
type Leaser interface {
	// Lease takes a lease on the file fh names; holding one already is no
	// error. ErrOpenElsewhere: another open keeps it from being taken.
	Lease(fh []byte) error
	// Unlease releases the lease on the file, if held.
	Unlease(fh []byte)
}

// ErrOpenElsewhere: a lease cannot be taken because the file is open
// elsewhere (a local process has it open).
var ErrOpenElsewhere = errors.New("consist: the file is open by a local process")

// localName is the plain-client key of the local processes: no address
// looks like it.
const localName = "local processes"

// localClient is the table client of the local processes on this machine.
func (d *Driver) localClient() state.ClientID {
	d.mu.Lock()
	defer d.mu.Unlock()
	if mid, ok := d.plain[localName]; ok {
		return mid
	}
	d.nextMid++
	d.plain[localName] = d.nextMid
	return d.nextMid
}

// lease carries out an ActLease. A lease that cannot be taken because a
// local process has the file open is tried again by the sweeper while the
// table wants it (rearm): meanwhile the local processes read what the
// clients wrote back, as a client does at an OPEN. Without leases (the file
// system has none) the clients cache as before: a local process may read the
// file without a client's unwritten data (docs/protocol.md).
func (d *Driver) lease(fh []byte, take bool) {
	if d.leases == nil {
		return
	}
	if !take {
		d.mu.Lock()
		delete(d.rearm, string(fh))
		d.mu.Unlock()
		d.leases.Unlease(fh)
		return
	}
	d.takeLease(fh)
}

// takeLease takes the lease on fh, or leaves it to the sweeper to try again
// when a local process has the file open.
func (d *Driver) takeLease(fh []byte) {
	err := d.leases.Lease(fh)
	switch {
	case err == nil:
		d.met.leases.Inc()
		d.mu.Lock()
		delete(d.rearm, string(fh))
		d.mu.Unlock()
	case errors.Is(err, ErrOpenElsewhere):
		d.met.leasesRefused.Inc()
		d.mu.Lock()
		d.rearm[string(fh)] = struct{}{}
		d.mu.Unlock()
	default:
		d.met.leasesRefused.Inc()
		d.mu.Lock()
		delete(d.rearm, string(fh))
		d.mu.Unlock()
		d.noLeases.Do(func() {
			d.log.Warn("no lease on a file a client caches dirty: a local process may read it without the client's unwritten data", "err", err)
		})
	}
}

// rearmLeases tries again, from the sweeper, the leases the table wants that
// a local open kept from being taken or broke.
func (d *Driver) rearmLeases() {
	if d.leases == nil {
		return
	}
	d.mu.Lock()
	if len(d.rearm) == 0 {
		d.mu.Unlock()
		return
	}
	fhs := make([][]byte, 0, len(d.rearm))
	for k := range d.rearm {
		fhs = append(fhs, []byte(k))
	}
	d.mu.Unlock()
	for _, fh := range fhs {
		if !d.m.LeaseWanted(state.FileIDOf(fh)) {
			d.mu.Lock()
			delete(d.rearm, string(fh))
			d.mu.Unlock()
			continue
		}
		d.takeLease(fh)
	}
}

// LeaseBroken applies a local process's open of the file fh names, which broke
// the lease held on it (write: the open is for writing, or a truncate): once
// the clients that may hold dirty blocks of the file have written them back
// (and invalidated, for a write), or been fenced, the lease is released and
// the open proceeds. It never blocks (the store's lease goroutine calls it).
func (d *Driver) LeaseBroken(fh []byte, write bool) {
	if d.leases == nil {
		return
	}
	if d.ctx.Err() != nil {
		d.leases.Unlease(fh)
		return
	}
	kind := state.AccessRead
	if write {
		kind = state.AccessWrite
	}
	d.met.leaseBreaks.Inc()
	fh = append([]byte(nil), fh...)
	// A parked access is answered JUKEBOX after the table's JukeboxAfter while
	// its callbacks are still out: it is made again (finding them out, it
	// sends none) until they end, within the callbacks' own deadline.
	deadline := d.now().Add(2*d.cbTimeout + time.Second)
	var try func()
	try = func() {
		start := time.Now()
		d.localAccess(fh, kind, func(err error) {
			if errors.Is(err, ErrJukebox) && time.Since(start) >= 10*time.Millisecond &&
				d.now().Before(deadline) && d.ctx.Err() == nil {
				try()
				return
			}
			if d.tracing() {
				d.trace("lease released after a local open", fh, "write", write, "err", err)
			}
			d.leases.Unlease(fh)
			// A client still caching dirty (a writer with the file open) keeps
			// the table wanting the lease: it is taken again once the local
			// process has closed the file.
			d.mu.Lock()
			d.rearm[string(fh)] = struct{}{}
			d.mu.Unlock()
		})
	}
	try()
}

// localAccess applies an access by the local processes (state.AccessArgs.Local).
func (d *Driver) localAccess(fh []byte, kind state.AccessKind, proceed func(error)) {
	d.access(state.AccessArgs{File: state.FileIDOf(fh), Handle: fh, Client: d.localClient(), Kind: kind, Local: true}, proceed)
}
