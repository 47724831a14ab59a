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
	// closes it.
	Open    func(lockmgr.FileKey) (int, error)
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
	d := &Driver{cfg: cfg, log: cfg.Logger, m: lockmgr.New(cfg.Lock, time.Now()), fds: map[descKey]int{}}
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
	d.mu.Lock()
	res, acts := d.m.Lock(time.Now(), a)
	grants := d.exec(acts, a.Req, &res)
	d.mu.Unlock()
	d.send(grants)
	return res
}

// Test reports the lock a non-blocking Lock of (o, t, r) would meet: a remote
// owner's (the machine's), or a local process's on the backing file
// (F_OFD_GETLK), with Local set and the range the kernel reports.
func (d *Driver) Test(k lockmgr.FileKey, o lockmgr.Owner, t lockmgr.LockType, r lockmgr.Range) lockmgr.Result {
	d.mu.Lock()
	defer d.mu.Unlock()
	res := d.m.Test(time.Now(), k, o, t, r)
	if res.Verdict != lockmgr.Granted {
		return res
	}
	// The owner's own description does not conflict with itself; any other
	// owner's conflicting lock would have been the machine's answer, so what
	// the kernel reports is a local process's.
	fd, ok := d.fds[descKey{k, o}]
	if !ok {
		var err error
		if fd, err = d.cfg.Open(k); err != nil {
			d.log.Info("lock test: cannot open the backing file", "err", err)
			return res
		}
		defer unix.Close(fd)
	}
	fl, ok := flockOf(t, r)
	if !ok {
		return res
	}
	if err := unix.FcntlFlock(uintptr(fd), unix.F_OFD_GETLK, &fl); err != nil {
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
	d.mu.Unlock()
	d.send(grants)
	return ok
}

// ClientGone releases everything client c holds or waits for.
func (d *Driver) ClientGone(c lockmgr.ClientID) {
	d.mu.Lock()
	grants := d.exec(d.m.ClientGone(time.Now(), c), 0, nil)
	d.mu.Unlock()
	d.send(grants)
}

// StartGrace starts a grace period of length g (only reclaims are granted).
func (d *Driver) StartGrace(g time.Duration) {
	d.mu.Lock()
	d.m.StartGrace(time.Now(), g)
	d.mu.Unlock()
}

// EndGrace ends the grace period now: the waiters that can go are granted.
func (d *Driver) EndGrace() {
	d.mu.Lock()
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

// Count returns how many records client c holds (for tests).
func (d *Driver) Count(c lockmgr.ClientID) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.m.Count(c)
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
		if fd, err = d.cfg.Open(a.File); err != nil {
			d.log.Warn("lock: cannot open the backing file", "owner", a.Owner, "err", err)
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
