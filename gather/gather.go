package gather

import (
	"errors"
	"sync"
	"time"
)

// ErrTimeout is returned by WaitTimeout when no flush covering the request returned
// in time. The request stays in its batch: its data is still flushed, nobody waits.
var ErrTimeout = errors.New("gather: flush did not complete in time")

// Mode selects the gathering policy.
type Mode int

// Policies.
const (
	Adaptive Mode = iota // wait only when this file's traffic says it will pay off
	On                   // always procrastinate up to MaxWait once, as the paper does
	Off                  // no gathering: every request flushes on its own
)

// ParseMode parses "adaptive", "on" or "off".
func ParseMode(s string) (Mode, bool) {
	switch s {
	case "adaptive":
		return Adaptive, true
	case "on":
		return On, true
	case "off":
		return Off, true
	}
	return 0, false
}

func (m Mode) String() string { return [...]string{"adaptive", "on", "off"}[m] }

// Clock is the time source (injected in tests).
type Clock interface {
	Now() time.Time
	// After returns a channel that receives after d, and a function that stops it.
	After(d time.Duration) (<-chan time.Time, func())
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }
func (realClock) After(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTimer(d)
	return t.C, func() { t.Stop() }
}

// Stats are what a flush reports to the Observer.
type Stats struct {
	Batch int           // requests covered by the flush
	Wait  time.Duration // how long the leader waited for more before flushing
}

// FlushFunc makes everything written to a file durable. dataOnly allows skipping
// metadata not needed to read the data back (fdatasync). Its result is handed to
// every member of the batch (e.g. the post-flush attributes).
type FlushFunc func(dataOnly bool) (any, error)

// Config configures a Gatherer.
type Config struct {
	Mode    Mode
	MaxWait time.Duration // bound on any wait; default 2 ms
	Clock   Clock         // default: the real clock
	// Observe, if set, is called after every flush (outside any lock).
	Observe func(Stats)
}

// Gatherer coordinates flushes per file key. Safe for concurrent use.
type Gatherer struct {
	cfg Config

	mu    sync.Mutex
	files map[string]*file // guarded by mu
}

// file is the gathering state of one file. All fields are guarded by Gatherer.mu.
type file struct {
	key      string
	begun    int       // requests between Begin and Wait
	queue    []*Ticket // joined, waiting for a flush
	flushing bool      // a flush call is running
	flushN   int       // size of the batch being flushed
	leading  bool      // a leader is deciding or waiting (not yet flushing)
	arrived  chan struct{}

	learn learner
}

// Ticket is one request's place in its file's gathering.
type Ticket struct {
	g        *Gatherer
	f        *file
	dataOnly bool
	joined   bool
	gone     bool          // stopped waiting (timed out); guarded by Gatherer.mu
	done     chan struct{} // closed when a flush covering this request returned
	lead     chan struct{} // signalled when this request must lead the next batch
	res      any
	err      error
}

// New returns a Gatherer.
func New(cfg Config) *Gatherer {
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = 2 * time.Millisecond
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	return &Gatherer{cfg: cfg, files: map[string]*file{}}
}

// Mode returns the policy.
func (g *Gatherer) Mode() Mode { return g.cfg.Mode }

// Begin registers a request for the file key as soon as it is received, before
// its data is written, so that a leader knows to wait for it.
func (g *Gatherer) Begin(key string) *Ticket {
	g.mu.Lock()
	defer g.mu.Unlock()
	f := g.files[key]
	if f == nil {
		if len(g.files) >= 4096 {
			g.sweep()
		}
		f = &file{key: key, arrived: make(chan struct{})}
		g.files[key] = f
	}
	f.learn.arrive(g.cfg.Clock.Now(), f.begun+len(f.queue)+f.flushN)
	f.begun++
	f.signal()
	return &Ticket{g: g, f: f, done: make(chan struct{}), lead: make(chan struct{}, 1)}
}

// sweep forgets idle files (their learned traffic too). Called with mu held.
func (g *Gatherer) sweep() {
	for k, f := range g.files {
		if f.begun == 0 && len(f.queue) == 0 && !f.flushing && !f.leading {
			delete(g.files, k)
		}
	}
}

// signal wakes a waiting leader. Called with mu held.
func (f *file) signal() {
	close(f.arrived)
	f.arrived = make(chan struct{})
}

// Cancel withdraws a request that will not be flushed (its write failed).
func (t *Ticket) Cancel() {
	t.g.mu.Lock()
	defer t.g.mu.Unlock()
	if !t.joined {
		t.joined = true
		t.f.begun--
		t.f.signal()
	}
}

// Wait joins the file's queue once this request's data is written and returns
// when a flush that started after that has finished, with its result and error.
// dataOnly is true for DATA_SYNC writes; a batch is flushed with dataOnly only
// when every member allows it.
func (t *Ticket) Wait(dataOnly bool, flush FlushFunc) (any, error) {
	return t.WaitTimeout(dataOnly, flush, 0)
}

// WaitTimeout is Wait that gives up with ErrTimeout after timeout (0: never) if it
// is not leading a flush itself. A leader always finishes its flush.
func (t *Ticket) WaitTimeout(dataOnly bool, flush FlushFunc, timeout time.Duration) (any, error) {
	g, f := t.g, t.f
	t.dataOnly = dataOnly
	if g.cfg.Mode == Off {
		g.mu.Lock()
		t.joined = true
		f.begun--
		g.mu.Unlock()
		res, err := flush(dataOnly)
		if g.cfg.Observe != nil {
			g.cfg.Observe(Stats{Batch: 1})
		}
		return res, err
	}
	g.mu.Lock()
	t.joined = true
	f.begun--
	f.queue = append(f.queue, t)
	f.signal()
	lead := !f.flushing && !f.leading
	if lead {
		f.leading = true
	}
	g.mu.Unlock()
	var expired <-chan time.Time
	armed := timeout <= 0
	for {
		if lead {
			t.leadBatch(flush)
			lead = false
		}
		if !armed {
			// The bound is armed only for a request about to wait for another's
			// flush: a leader's own batch covered it, and a timer per write would
			// cost a lone writer a netpoller wakeup per flush (the Go runtime
			// re-arms the poller for a P's timers when the flush blocks).
			select {
			case <-t.done:
				return t.res, t.err
			default:
			}
			var stop func()
			expired, stop = g.cfg.Clock.After(timeout)
			defer stop()
			armed = true
		}
		select {
		case <-t.done:
			return t.res, t.err
		case <-t.lead:
			lead = true
		case <-expired:
			g.mu.Lock()
			select {
			case <-t.lead: // leadership arrived meanwhile: it must be taken
				g.mu.Unlock()
				lead, expired = true, nil
				continue
			default:
			}
			select {
			case <-t.done:
				g.mu.Unlock()
				return t.res, t.err
			default:
			}
			t.gone = true
			g.mu.Unlock()
			return nil, ErrTimeout
		}
	}
}

// leadBatch waits if that can gather more, flushes the queue as one batch, releases
// it, and hands leadership to the next queued request. f.leading is set on entry.
func (t *Ticket) leadBatch(flush FlushFunc) {
	g, f := t.g, t.f
	deadline := g.cfg.Clock.Now().Add(g.cfg.MaxWait)
	var waited time.Duration
	speculate := true // may still wait for requests not yet received
	g.mu.Lock()
	for {
		var wait time.Duration
		switch {
		case f.begun > 0:
			// Requests already received for this file are writing their data:
			// they will join in microseconds. Waiting for them is pure gain.
			wait = deadline.Sub(g.cfg.Clock.Now())
		case speculate && g.cfg.Mode == On:
			// The paper: procrastinate once, a fixed interval.
			wait, speculate = deadline.Sub(g.cfg.Clock.Now()), false
		case speculate && g.cfg.Mode == Adaptive:
			// Wait for the next request only while this file's traffic says one
			// is coming soon; stop at the first wait that brings nothing.
			wait = min(f.learn.expectWait(g.cfg.Clock.Now(), g.cfg.MaxWait, len(f.queue)), deadline.Sub(g.cfg.Clock.Now()))
		}
		if wait <= 0 {
			break
		}
		arrived := f.arrived
		g.mu.Unlock()
		t0 := g.cfg.Clock.Now()
		timer, stop := g.cfg.Clock.After(wait)
		select {
		case <-arrived:
		case <-timer:
			speculate = false
		}
		stop()
		waited += g.cfg.Clock.Now().Sub(t0)
		g.mu.Lock()
	}
	batch := f.queue
	f.queue = nil
	f.leading = false
	f.flushing = true
	f.flushN = len(batch)
	g.mu.Unlock()

	dataOnly := true
	for _, m := range batch {
		dataOnly = dataOnly && m.dataOnly
	}
	t0 := g.cfg.Clock.Now()
	res, err := flush(dataOnly)
	took := g.cfg.Clock.Now().Sub(t0)

	g.mu.Lock()
	f.flushing = false
	f.flushN = 0
	f.learn.flushed(took)
	f.learn.released = g.cfg.Clock.Now()
	for _, m := range batch { // first in, first out
		m.res, m.err = res, err
		close(m.done)
	}
	again := false
	if len(f.queue) > 0 && !f.leading {
		f.leading = true
		// Hand leadership to the first request still waiting; if every queued
		// request has given up, this leader flushes their data itself.
		again = true
		for _, m := range f.queue {
			if !m.gone {
				m.lead <- struct{}{}
				again = false
				break
			}
		}
	}
	g.mu.Unlock()
	if g.cfg.Observe != nil {
		g.cfg.Observe(Stats{Batch: len(batch), Wait: waited})
	}
	if again {
		t.leadBatch(flush)
	}
}
