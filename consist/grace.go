package consist

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"snfs/snfs1"
	"snfs/state"
)

var (
	// ErrGrace: the server is in its grace period and this request is not a
	// reclaim (nor a reclaiming client's access to a file it reclaimed
	// caching, or dirty and closed: graceAccess): try again later
	// (NFS3ERR_JUKEBOX).
	ErrGrace = fmt.Errorf("consist: in the grace period after a restart: %w", ErrJukebox)
	// ErrNoGrace: a RECLAIM or RECLAIM_DONE outside the grace period, or from a
	// client this server did not know before it restarted (SNFS_ERR_NOGRACE).
	ErrNoGrace = errors.New("consist: no grace period for this client")
)

// Why a grace period ended (the reason label of
// snfs_server_consist_grace_end_total).
const (
	GraceAllReclaimed = "all_reclaimed"
	GraceTimeout      = "timeout"
	GraceNone         = "none"
)

// GraceReport describes the grace period of this server instance.
type GraceReport struct {
	Reason    string        // GraceAllReclaimed, GraceTimeout or GraceNone; "" while it lasts
	Length    time.Duration // from the start of the driver to its end
	Expected  int           // clients recorded before the restart
	Back      int           // of which reclaimed (RECLAIM_DONE), re-registered anew or unregistered
	Reclaimed int           // clients that sent at least one RECLAIM
	Items     uint64        // reclaim items applied
	Permits   uint64        // permits granted again (RECLAIM_PERMIT)
}

// grace is the grace period after a restart (docs/protocol.md, "Grace
// period"): until every client recorded before the restart is back, or the
// bound passes, OPENs and plain accesses answer JUKEBOX, and the expected
// clients rebuild the table with RECLAIM.
type grace struct {
	active atomic.Bool // in the grace period
	done   chan struct{}

	mu       sync.Mutex // held while reclaims are applied to the table, so grace cannot end half way through one
	start    time.Time
	expected map[snfs1.ClientID]*expected // guarded by mu
	byName   map[string]snfs1.ClientID    // guarded by mu
	// reclaimed are the files each client reclaimed, true for those whose
	// NFS calls (its write-back) go through during grace (graceAccess).
	// Guarded by mu.
	reclaimed map[state.ClientID]map[state.FileID]bool
	report    GraceReport // guarded by mu
	// permitsLeft counts the expected clients granted a permit under
	// their registration that are not back yet; permitGrace is set while
	// it is above 0 in the grace period: directory calls wait
	// (permitreclaim.go). permitsLeft guarded by mu.
	permitsLeft int
	permitGrace atomic.Bool
}

// expected is a client recorded before the restart.
type expected struct {
	name       string
	registered bool // it registered again with the same verifier
	back       bool // RECLAIM_DONE, a new verifier, or UNREGISTER: grace need not wait for it
	permits    bool // its record says it was granted a permit: it may reclaim permits
}

// startGrace begins the grace period at start if any client is recorded and
// bound is positive; otherwise it ends at once with reason none.
func (d *Driver) startGrace(start time.Time, recs map[string]record, bound time.Duration) {
	g := &d.grace
	g.done = make(chan struct{})
	g.start = start
	g.report.Expected = len(recs)
	if len(recs) == 0 || bound <= 0 {
		g.report.Reason = GraceNone
		d.met.graceEnd.WithLabelValues(GraceNone).Inc() // before GraceOver is closed, as endGrace's
		close(g.done)
		d.log.Info("no grace period", "clients_recorded", len(recs), "grace", bound)
		return
	}
	g.expected = make(map[snfs1.ClientID]*expected, len(recs))
	g.byName = make(map[string]snfs1.ClientID, len(recs))
	g.reclaimed = map[state.ClientID]map[state.FileID]bool{}
	for name, r := range recs {
		g.expected[r.id] = &expected{name: name, permits: r.permits}
		g.byName[name] = r.id
		if r.permits {
			g.permitsLeft++
		}
	}
	g.permitGrace.Store(g.permitsLeft > 0)
	g.active.Store(true)
	d.active.Store(true) // plain accesses go through the table (and get JUKEBOX) from the start
	d.log.Info("grace period: waiting for the clients known before the restart to reclaim their state",
		"clients", len(recs), "clients_with_permits", g.permitsLeft, "bound", bound)
	// The bound's timer is armed here, from the start, not in the goroutine:
	// armed there, it counted from whenever that goroutine ran, and a test's
	// clock moved past the bound before (OffsetClock.Advance) was missed.
	over := make(chan struct{})
	t := d.clock.AfterFunc(bound, func() { close(over) })
	d.goOwned(func() {
		defer t.Stop()
		select {
		case <-over:
			d.endGrace(GraceTimeout)
		case <-g.done:
		case <-d.ctx.Done():
		}
	})
}

// endGrace ends the grace period (if it lasts) for reason. On a timeout, the
// records of clients that never came back are deleted: a client that comes
// back later cannot reclaim anyway, and the next restart need not wait for it.
func (d *Driver) endGrace(reason string) {
	g := &d.grace
	g.mu.Lock()
	if !g.active.Load() {
		g.mu.Unlock()
		return
	}
	g.active.Store(false)
	g.permitGrace.Store(false)
	length := d.now().Sub(g.start)
	g.report.Reason, g.report.Length = reason, length
	missing := map[string]snfs1.ClientID{}
	var names []string
	for id, ex := range g.expected {
		if !ex.back && !ex.registered {
			missing[ex.name] = id
			names = append(names, ex.name)
		}
	}
	rep := g.report
	g.expected, g.byName, g.reclaimed = nil, nil, nil
	// Counted before GraceOver is closed: whoever it wakes finds this grace
	// period's end in the metrics (they were set after, and a reader could
	// find grace_end_total{reason=timeout} still 0).
	d.met.graceSeconds.Set(length.Seconds())
	d.met.graceEnd.WithLabelValues(reason).Inc()
	close(g.done)
	g.mu.Unlock()
	d.log.Info("grace period over", "reason", reason, "seconds", length.Seconds(), "clients_expected", rep.Expected,
		"clients_back", rep.Back, "clients_reclaimed", rep.Reclaimed, "items_reclaimed", rep.Items, "permits_reclaimed", rep.Permits,
		"clients_lost", len(names))
	if len(names) > 0 {
		d.log.Warn("clients known before the restart did not come back in the grace period: their state is lost", "clients", names)
		if err := d.rec.unregister(missing); err != nil {
			d.log.Error("cannot delete the records of clients that did not come back", "err", err)
		}
	}
}

// backLocked marks an expected client back and reports whether every one is.
// g.mu held.
func (g *grace) backLocked(ex *expected) (all bool) {
	if !ex.back {
		ex.back = true
		g.report.Back++
		if ex.permits {
			if g.permitsLeft--; g.permitsLeft == 0 {
				g.permitGrace.Store(false)
			}
		}
	}
	return g.report.Back == len(g.expected)
}

// InGrace reports whether the grace period lasts.
func (d *Driver) InGrace() bool { return d.grace.active.Load() }

// GraceOver is closed when the grace period ends (at once if there is none).
func (d *Driver) GraceOver() <-chan struct{} { return d.grace.done }

// Grace reports on the grace period of this instance.
func (d *Driver) Grace() GraceReport {
	d.grace.mu.Lock()
	defer d.grace.mu.Unlock()
	return d.grace.report
}

// registeredInGrace notes a REGISTER of id under name during grace: the same
// id is an expected client back with its state to reclaim; another id for an
// expected name is that client restarted (its old state is void, grace need
// not wait for it).
func (d *Driver) registeredInGrace(name string, id snfs1.ClientID) {
	g := &d.grace
	if !g.active.Load() {
		return
	}
	g.mu.Lock()
	all := false
	if ex := g.expected[id]; ex != nil {
		ex.registered = true
	} else if old, ok := g.byName[name]; ok {
		all = g.backLocked(g.expected[old])
	}
	g.mu.Unlock()
	if all {
		d.endGrace(GraceAllReclaimed)
	}
}

// Reclaim applies a RECLAIM of registration id (Sprite's recovery: the client
// reports what it holds). Items of a file this client already reclaimed are
// ignored, so a client may send its reclaim again after a broken connection.
func (d *Driver) Reclaim(id snfs1.ClientID, items []snfs1.ReclaimItem) error {
	mid, err := d.Client(id)
	if err != nil {
		return err
	}
	g := &d.grace
	var acts []state.Action
	g.mu.Lock()
	defer func() {
		g.mu.Unlock()
		d.do(acts) // the leases of files reclaimed dirty
	}()
	if !g.active.Load() || g.expected[id] == nil {
		return ErrNoGrace
	}
	set := g.reclaimed[mid]
	if set == nil {
		set = map[state.FileID]bool{}
		g.reclaimed[mid] = set
		g.report.Reclaimed++
	}
	now := d.now()
	n := 0
	for i := range items {
		it := &items[i]
		f := state.FileIDOf(it.File)
		if _, dup := set[f]; dup {
			continue
		}
		// Its NFS calls on f go on during grace if it caches f, or holds
		// it only dirty, closed (a closed last writer: nobody can have
		// opened f beside it without calling it back first).
		set[f] = it.Caching || it.Dirty && it.Readers == 0 && it.Writers == 0
		if d.tracing() {
			d.trace("table: RECLAIM item", it.File, "client", d.clientName(mid), "readers", it.Readers, "writers", it.Writers,
				"caching", it.Caching, "dirty", it.Dirty)
		}
		d.m.Reclaim(now, state.ReclaimArgs{File: f, Handle: it.File, Client: mid, Readers: it.Readers,
			Writers: it.Writers, Caching: it.Caching, Dirty: it.Dirty, Version: it.Version})
		acts = append(acts, d.m.SyncLease(f)...)
		n++
	}
	g.report.Items += uint64(n)
	d.met.reclaims.Add(float64(n))
	return nil
}

// MayReclaim reports whether registration id may reclaim now (a LOCK with
// reclaim TRUE): in the grace period, a client known before the restart, as
// for RECLAIM (one whose connection broke after its RECLAIM_DONE sends it all
// again); else ErrNoGrace.
func (d *Driver) MayReclaim(id snfs1.ClientID) error {
	if _, err := d.Client(id); err != nil {
		return err
	}
	g := &d.grace
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.active.Load() || g.expected[id] == nil {
		return ErrNoGrace
	}
	return nil
}

// ReclaimDone applies a RECLAIM_DONE of registration id: the client reclaimed
// everything; grace ends when every expected client is back.
func (d *Driver) ReclaimDone(id snfs1.ClientID) error {
	if _, err := d.Client(id); err != nil {
		return err
	}
	g := &d.grace
	g.mu.Lock()
	ex := g.expected[id]
	if !g.active.Load() || ex == nil {
		g.mu.Unlock()
		return ErrNoGrace
	}
	all := g.backLocked(ex)
	g.mu.Unlock()
	if all {
		d.endGrace(GraceAllReclaimed)
	}
	return nil
}

// graceAccess decides a plain access by table client c of file f during
// grace: only an expected client's access to a file it reclaimed caching, or
// dirty with no open, goes on (its write-back, its reads of what it caches).
// A caching client's cache is the file's newest copy (Table 1), or it is the
// pinned holder whose kernel-written bytes others must not go ahead of; a
// closed last writer shares the file with nobody; a client that reclaimed an
// open without caching may be sharing the file with a pinned holder that has
// not reclaimed yet, so its READs and WRITEs wait for the end of grace
// (docs/protocol.md 7.1, 10.1).
func (d *Driver) graceAccess(c state.ClientID, f state.FileID) error {
	g := &d.grace
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.active.Load() {
		return nil
	}
	if g.reclaimed[c][f] {
		return nil
	}
	return ErrGrace
}

// GraceAccess reports ErrGrace if the NFSv3 call of table client c on the file
// fh names must wait for the end of the grace period (for requests Access
// does not cover, such as COMMIT); nil otherwise.
func (d *Driver) GraceAccess(c state.ClientID, fh []byte) error {
	if !d.grace.active.Load() {
		return nil
	}
	if err := d.graceAccess(c, state.FileIDOf(fh)); err != nil {
		d.met.graceJukebox.Inc()
		return err
	}
	return nil
}

// unregisteredInGrace notes an UNREGISTER of id during grace.
func (d *Driver) unregisteredInGrace(id snfs1.ClientID) {
	g := &d.grace
	if !g.active.Load() {
		return
	}
	g.mu.Lock()
	all := false
	if ex := g.expected[id]; ex != nil {
		all = g.backLocked(ex)
	}
	g.mu.Unlock()
	if all {
		d.endGrace(GraceAllReclaimed)
	}
}
