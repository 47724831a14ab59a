package lockd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"snfs/lockmgr"
)

// Granter sends a blocked request's grant to its client (ActGranted): nil
// means the client took it; an error (no answer, the client no longer wants
// it) makes the machine back the grant out.
type Granter interface {
	Granted(ctx context.Context, a lockmgr.Action) error
}

// Config configures a Driver.
type Config struct {
	Lock lockmgr.Config
	// Open opens a new description of the backing file a FileKey names (the
	// file handle): read-write where it may, read-only otherwise. The driver
	// closes it. It may wait (an open of a file a client caches dirty waits
	// for the server's lease on it to be broken), so the driver calls it
	// without its mutex: a request's owner gets its description before the
	// request is applied.
	Open func(lockmgr.FileKey) (int, error)
	// OpenNow is Open that fails rather than waits, for the descriptions the
	// driver must open under its mutex (a waiter granted by another owner's
	// unlock): a failure is a refusal by the backing file, tried again later.
	// Default: Open.
	OpenNow func(lockmgr.FileKey) (int, error)
	Granter Granter
	Logger  *slog.Logger
	// TickEvery is the period of the Tick goroutine (default 200 ms).
	TickEvery time.Duration
	// GrantTimeout bounds one grant callback (default 10 s).
	GrantTimeout time.Duration
}

// Driver carries out the lock manager's actions.
type Driver struct {
	cfg  Config
	log  *slog.Logger
	reqs atomic.Uint64
	// inGrace: a grace period was started and EndGrace has not run since.
	inGrace atomic.Bool

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu  sync.Mutex
	m   *lockmgr.Machine // guarded by mu
	fds map[descKey]int  // an open file description per (file, owner); guarded by mu
}

type descKey struct {
	file  lockmgr.FileKey
	owner lockmgr.Owner
}

// New starts a driver and its Tick goroutine.
func New(cfg Config) *Driver {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.TickEvery <= 0 {
		cfg.TickEvery = 200 * time.Millisecond
	}
	if cfg.GrantTimeout <= 0 {
		cfg.GrantTimeout = 10 * time.Second
	}
	if cfg.OpenNow == nil {
		cfg.OpenNow = cfg.Open
	}
	d := &Driver{cfg: cfg, log: cfg.Logger, m: lockmgr.New(cfg.Lock, time.Now()), fds: map[descKey]int{}}
	d.inGrace.Store(cfg.Lock.Grace > 0)
	d.ctx, d.cancel = context.WithCancel(context.Background())
	d.wg.Add(1)
	go d.tick()
	return d
}

// Stop ends the Tick goroutine and the grant senders, waits for them, and
// closes every description (the kernel drops their locks).
func (d *Driver) Stop() {
	d.cancel()
	d.wg.Wait()
	d.mu.Lock()
	defer d.mu.Unlock()
	for k, fd := range d.fds {
		unix.Close(fd)
		delete(d.fds, k)
	}
}

func (d *Driver) tick() {
	defer d.wg.Done()
	t := time.NewTicker(d.cfg.TickEvery)
	defer t.Stop()
	for {
		select {
		case <-d.ctx.Done():
			return
		case now := <-t.C:
			d.mu.Lock()
			grants := d.exec(d.m.Tick(now), 0, nil)
			d.mu.Unlock()
			d.send(grants)
		}
	}
}

// NewReq returns a request id unique in this driver.
func (d *Driver) NewReq() lockmgr.ReqID { return lockmgr.ReqID(d.reqs.Add(1)) }

// Lock applies a lock request and returns its answer; a blocking request that
// must wait is answered Blocked at once, and its grant goes to the Granter.
func (d *Driver) Lock(a lockmgr.LockArgs) lockmgr.Result {
	if a.Req == 0 {
		a.Req = d.NewReq()
	}
	d.prepare(a.File, a.Owner)
	d.mu.Lock()
	res, acts := d.m.Lock(time.Now(), a)
	grants := d.exec(acts, a.Req, &res)
	if res.Verdict != lockmgr.Granted && res.Verdict != lockmgr.Blocked {
		d.tidy(a.File, a.Owner)
	}
	d.mu.Unlock()
	d.send(grants)
	return res
}

// Test reports the lock a non-blocking Lock of (o, t, r) would meet: a remote
// owner's (the machine's), or a local process's on the backing file
// (F_OFD_GETLK), with Local set and the range the kernel reports.
func (d *Driver) Test(k lockmgr.FileKey, o lockmgr.Owner, t lockmgr.LockType, r lockmgr.Range) lockmgr.Result {
	fl, ok := flockOf(t, r)
	d.mu.Lock()
	res := d.m.Test(time.Now(), k, o, t, r)
	if res.Verdict != lockmgr.Granted || !ok {
		d.mu.Unlock()
		return res
	}
	// The owner's own description does not conflict with itself; any other
	// owner's conflicting lock would have been the machine's answer, so what
	// the kernel reports is a local process's.
	var err error
	if fd, own := d.fds[descKey{k, o}]; own {
		err = unix.FcntlFlock(uintptr(fd), unix.F_OFD_GETLK, &fl)
		d.mu.Unlock()
	} else {
		// The owner holds nothing here: a description of the test's own
		// (opened without mu: the open may wait) sees every lock held.
		d.mu.Unlock()
		fd, oerr := d.cfg.Open(k)
		if oerr != nil {
			d.log.Info("lock test: cannot open the backing file", "err", oerr)
			return res
		}
		err = unix.FcntlFlock(uintptr(fd), unix.F_OFD_GETLK, &fl)
		unix.Close(fd)
	}
	if err != nil {
		d.log.Info("lock test: F_OFD_GETLK failed", "err", err)
		return res
	}
	if fl.Type == unix.F_UNLCK {
		return res
	}
	h := lockmgr.Lock{Type: lockmgr.Read, Range: lockmgr.RangeOf(uint64(fl.Start), uint64(fl.Len))}
	if fl.Type == unix.F_WRLCK {
		h.Type = lockmgr.Write
	}
	return lockmgr.Result{Verdict: lockmgr.Denied, Local: true, Holder: h}
}

// Unlock releases o's locks on r.
func (d *Driver) Unlock(k lockmgr.FileKey, o lockmgr.Owner, r lockmgr.Range) lockmgr.Verdict {
	d.mu.Lock()
	v, acts := d.m.Unlock(time.Now(), k, o, r)
	grants := d.exec(acts, 0, nil)
	d.mu.Unlock()
	d.send(grants)
	return v
}

// Cancel withdraws a waiting request (or backs out its grant while the
// callback is out); false: there was none.
func (d *Driver) Cancel(a lockmgr.CancelArgs) bool {
	d.mu.Lock()
	ok, acts := d.m.Cancel(time.Now(), a)
	grants := d.exec(acts, 0, nil)
	d.tidy(a.File, a.Owner)
	d.mu.Unlock()
	d.send(grants)
	return ok
}

// ClientGone releases everything client c holds or waits for.
func (d *Driver) ClientGone(c lockmgr.ClientID) {
	d.mu.Lock()
	grants := d.exec(d.m.ClientGone(time.Now(), c), 0, nil)
	for k := range d.fds {
		if k.owner.Client == c {
			d.tidy(k.file, k.owner)
		}
	}
	d.mu.Unlock()
	d.send(grants)
}

// StartGrace starts a grace period of length g (only reclaims are granted).
func (d *Driver) StartGrace(g time.Duration) {
	d.mu.Lock()
	d.inGrace.Store(g > 0)
	grants := d.exec(d.m.StartGrace(time.Now(), g), 0, nil)
	d.mu.Unlock()
	d.send(grants)
}

// EndGrace ends the grace period now: the waiters that can go are granted.
// Once it has ended, EndGrace does nothing (callers may call it whenever the
// grace it shares has ended).
func (d *Driver) EndGrace() {
	if !d.inGrace.Load() {
		return
	}
	d.mu.Lock()
	d.inGrace.Store(false)
	grants := d.exec(d.m.EndGrace(time.Now()), 0, nil)
	d.mu.Unlock()
	d.send(grants)
}

// Holders returns the locks held on a file (for tests and diagnostics).
func (d *Driver) Holders(k lockmgr.FileKey) []lockmgr.Lock {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.m.Holders(k)
}

// Waiters returns the requests waiting on k, in arrival order.
func (d *Driver) Waiters(k lockmgr.FileKey) []lockmgr.LockArgs {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.m.Waiters(k)
}

// Count returns how many records client c holds (for tests).
func (d *Driver) Count(c lockmgr.ClientID) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.m.Count(c)
}

// prepare opens owner o's description of file k, if it has none, before a
// request of o is applied: the open may wait, so it is made without mu.
func (d *Driver) prepare(k lockmgr.FileKey, o lockmgr.Owner) {
	key := descKey{k, o}
	d.mu.Lock()
	_, ok := d.fds[key]
	d.mu.Unlock()
	if ok {
		return
	}
	fd, err := d.cfg.Open(k)
	if err != nil {
		return // the request's acquisition tries again (OpenNow), and is refused
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.fds[key]; ok {
		unix.Close(fd)
		return
	}
	d.fds[key] = fd
}

// tidy closes owner o's description of file k if o neither holds nor waits
// for a lock of k (a description prepared for a request that was refused,
// cancelled or backed out). mu held.
func (d *Driver) tidy(k lockmgr.FileKey, o lockmgr.Owner) {
	key := descKey{k, o}
	fd, ok := d.fds[key]
	if !ok {
		return
	}
	for _, l := range d.m.Holders(k) {
		if l.Owner == o {
			return
		}
	}
	for _, w := range d.m.Waiters(k) {
		if w.Owner == o {
			return
		}
	}
	unix.Close(fd)
	delete(d.fds, key)
}

// exec carries out acts in order with mu held, depth first: an acquisition's
// BackingDone is reported at once and what it returns is carried out before
// the next action. The BackingDone result of request mine goes to *res. The
// grants are returned, to be sent once mu is released.
func (d *Driver) exec(acts []lockmgr.Action, mine lockmgr.ReqID, res *lockmgr.Result) (grants []lockmgr.Action) {
	for _, a := range acts {
		switch a.Kind {
		case lockmgr.ActBacking:
			ok := d.backing(a)
			if !a.Acquire {
				continue
			}
			r, more := d.m.BackingDone(time.Now(), a.Req, ok)
			if a.Req == mine && res != nil {
				*res = r
			}
			grants = append(grants, d.exec(more, mine, res)...)
		case lockmgr.ActGranted:
			grants = append(grants, a)
		}
	}
	return grants
}

// backing applies one ActBacking to the owner's description: false if the
// kernel refused an acquisition.
func (d *Driver) backing(a lockmgr.Action) bool {
	key := descKey{a.File, a.Owner}
	fd, ok := d.fds[key]
	if !ok {
		if a.Type == lockmgr.Unlocked {
			return true // nothing held there
		}
		var err error
		if fd, err = d.cfg.OpenNow(a.File); err != nil {
			d.log.Info("lock: cannot open the backing file now", "owner", a.Owner, "err", err)
			return !a.Acquire
		}
		d.fds[key] = fd
	}
	defer func() {
		if a.Last {
			unix.Close(fd)
			delete(d.fds, key)
		}
	}()
	fl, ok := flockOf(a.Type, a.Range)
	if !ok {
		return true // past off_t: no local process can lock there
	}
	err := unix.FcntlFlock(uintptr(fd), unix.F_OFD_SETLK, &fl)
	if err == nil {
		return true
	}
	if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EACCES) {
		d.log.Warn("lock: F_OFD_SETLK on the backing file failed", "owner", a.Owner, "type", a.Type, "range", a.Range, "err", err)
	}
	if !a.Acquire {
		d.log.Error("lock: a release on the backing file failed", "err", err)
		return true
	}
	return false
}

// flockOf is the fcntl lock of t on r: an End past off_t runs to the end (l_len
// 0); a range that starts past it cannot be locked (false).
func flockOf(t lockmgr.LockType, r lockmgr.Range) (unix.Flock_t, bool) {
	if r.Start > math.MaxInt64 {
		return unix.Flock_t{}, false
	}
	fl := unix.Flock_t{Whence: 0, Start: int64(r.Start)}
	if r.End < math.MaxInt64 {
		fl.Len = int64(r.End - r.Start + 1)
	}
	switch t {
	case lockmgr.Read:
		fl.Type = unix.F_RDLCK
	case lockmgr.Write:
		fl.Type = unix.F_WRLCK
	default:
		fl.Type = unix.F_UNLCK
	}
	return fl, true
}

// send sends each grant in a goroutine of its own and reports GrantDone.
func (d *Driver) send(grants []lockmgr.Action) {
	for _, a := range grants {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			err := fmt.Errorf("lockd: no granter")
			if d.cfg.Granter != nil && d.ctx.Err() == nil {
				ctx, cancel := context.WithTimeout(d.ctx, d.cfg.GrantTimeout)
				err = d.cfg.Granter.Granted(ctx, a)
				cancel()
			}
			if err != nil {
				d.log.Info("lock grant not taken: backed out", "owner", a.Owner, "range", a.Range, "err", err)
			}
			d.mu.Lock()
			more := d.exec(d.m.GrantDone(time.Now(), a.Req, err == nil), 0, nil)
			if err != nil {
				d.tidy(a.File, a.Owner)
			}
			d.mu.Unlock()
			d.send(more)
		}()
	}
}

// EndGraceOn ends the grace period when done is closed (the consistency
// protocol's grace ends), or at its own bound, whichever comes first.
func (d *Driver) EndGraceOn(done <-chan struct{}) {
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		select {
		case <-done:
			d.EndGrace()
		case <-d.ctx.Done():
		}
	}()
}

// Stats returns the lock manager's counters and census.
func (d *Driver) Stats() lockmgr.Stats { return d.m.Stats() }

// Share applies an NLM share reservation (it never waits nor touches the
// backing file).
func (d *Driver) Share(a lockmgr.ShareArgs) lockmgr.Verdict {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.m.Share(time.Now(), a)
}

// Unshare withdraws o's share reservation of file k.
func (d *Driver) Unshare(k lockmgr.FileKey, o lockmgr.Owner) lockmgr.Verdict {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.m.Unshare(time.Now(), k, o)
}
