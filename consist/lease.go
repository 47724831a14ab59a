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
// client may be dirty: a local open breaks it, the break is applied as a
// plain access by the local processes' client (the dirty client writes back,
// and invalidates for a local write, exactly as for a plain NFSv3 client),
// and the lease is released then, so that the local open proceeds and reads
// the client's data. A client that does not answer is fenced as for any
// callback; the open waits at most the callback deadline (and the kernel's
// lease-break-time, whichever ends first).

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
// local process has the file open counts as a plain read by the local
// processes: the table has the dirty client write back and stop caching
// (write-shared), so that what it writes reaches the file at once. Without
// leases (the file system has none) the client caches as before: a local
// reader may read the file without the client's unwritten data
// (docs/protocol.md).
func (d *Driver) lease(fh []byte, take bool) {
	if d.leases == nil {
		return
	}
	if !take {
		d.leases.Unlease(fh)
		return
	}
	err := d.leases.Lease(fh)
	switch {
	case err == nil:
		d.met.leases.Inc()
	case errors.Is(err, ErrOpenElsewhere):
		d.met.leasesRefused.Inc()
		if d.tracing() {
			d.trace("lease refused: the file is open elsewhere; the local processes count as a reader", fh)
		}
		d.Access(d.localClient(), fh, state.AccessRead, func(error) {})
	default:
		d.met.leasesRefused.Inc()
		d.noLeases.Do(func() {
			d.log.Warn("no lease on a file a client caches dirty: a local process may read it without the client's unwritten data", "err", err)
		})
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
	deadline := time.Now().Add(2*d.cbTimeout + time.Second)
	var try func()
	try = func() {
		start := time.Now()
		d.Access(d.localClient(), fh, kind, func(err error) {
			if errors.Is(err, ErrJukebox) && time.Since(start) >= 10*time.Millisecond &&
				time.Now().Before(deadline) && d.ctx.Err() == nil {
				try()
				return
			}
			if d.tracing() {
				d.trace("lease released after a local open", fh, "write", write, "err", err)
			}
			d.leases.Unlease(fh)
		})
	}
	try()
}
