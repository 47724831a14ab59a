package consist

import (
	"sync"
	"sync/atomic"
	"time"
)

// Clock is where the driver reads the time and waits for it: the table
// (package state) takes the time as an argument, and the driver reads it
// here, so that a test can move the time forward past a callback timeout, a
// plain-access hold, a lease or a grace period instead of sleeping through
// it (Config.Clock; OffsetClock). Latencies reported as metrics are real
// durations, not read from it.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed on this
	// clock; the timer's Stop prevents that if f has not started.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a Clock's pending call (*time.Timer is one).
type Timer interface {
	Stop() bool
}

// realClock is the wall clock.
type realClock struct{}

func (realClock) Now() time.Time                            { return time.Now() }
func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// now is the driver's clock's time.
func (d *Driver) now() time.Time { return d.clock.Now() }

// OffsetClock is the wall clock plus an offset that only Advance changes:
// time flows as usual, and a test jumps it forward. For tests (of this
// package, and end to end through server.Config.Clock); the zero value is
// the wall clock.
type OffsetClock struct {
	offset atomic.Int64 // nanoseconds
	mu     sync.Mutex
	moved  chan struct{} // closed and replaced by Advance
}

// Now is the wall clock's time plus the offset.
func (c *OffsetClock) Now() time.Time {
	return time.Now().Add(time.Duration(c.offset.Load()))
}

// Advance moves the clock forward by d: timers due by then fire at once.
func (c *OffsetClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset.Add(int64(d))
	if c.moved != nil {
		close(c.moved)
		c.moved = nil
	}
}

// movedChan is closed by the next Advance.
func (c *OffsetClock) movedChan() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.moved == nil {
		c.moved = make(chan struct{})
	}
	return c.moved
}

// AfterFunc calls f once the clock reaches its time now plus d: its own
// goroutine waits for the wall clock or an Advance, whichever brings the
// time there first, and ends when f has run or the timer is stopped.
func (c *OffsetClock) AfterFunc(d time.Duration, f func()) Timer {
	t := &offsetTimer{stop: make(chan struct{})}
	at := c.Now().Add(d)
	go func() {
		for {
			moved := c.movedChan()
			left := at.Sub(c.Now())
			if left <= 0 {
				if t.state.CompareAndSwap(0, 1) {
					f()
				}
				return
			}
			w := time.NewTimer(left)
			select {
			case <-w.C:
			case <-moved:
			case <-t.stop:
			}
			w.Stop()
			if t.state.Load() != 0 {
				return
			}
		}
	}()
	return t
}

type offsetTimer struct {
	state atomic.Int32 // 0 pending, 1 fired, 2 stopped
	stop  chan struct{}
}

func (t *offsetTimer) Stop() bool {
	if t.state.CompareAndSwap(0, 2) {
		close(t.stop)
		return true
	}
	return false
}
