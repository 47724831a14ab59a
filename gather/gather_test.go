package gather

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock advances only when a wait is requested: a wait of d fires at once and
// moves time by d, so any waiting shows up in Stats.Wait and nothing depends on the
// machine's speed.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	waits atomic.Int64
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) After(d time.Duration) (<-chan time.Time, func()) {
	c.waits.Add(1)
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch, func() {}
}

type recorder struct {
	mu      sync.Mutex
	stats   []Stats
	flushes int
}

func (r *recorder) observe(s Stats) { r.mu.Lock(); r.stats = append(r.stats, s); r.mu.Unlock() }

func TestLoneWriterNeverWaits(t *testing.T) {
	for _, mode := range []Mode{Adaptive, Off} {
		clk := &fakeClock{now: time.Unix(0, 0)}
		var rec recorder
		g := New(Config{Mode: mode, Clock: clk, Observe: rec.observe})
		for i := 0; i < 200; i++ {
			tk := g.Begin("f")
			clk.mu.Lock()
			clk.now = clk.now.Add(100 * time.Microsecond) // the write itself
			clk.mu.Unlock()
			if _, err := tk.Wait(i%2 == 0, func(bool) (any, error) { return nil, nil }); err != nil {
				t.Fatal(err)
			}
		}
		if n := clk.waits.Load(); n != 0 {
			t.Fatalf("%v: a lone writer waited %d times", mode, n)
		}
		for _, s := range rec.stats {
			if s.Wait != 0 || s.Batch != 1 {
				t.Fatalf("%v: %+v", mode, s)
			}
		}
	}
}

func TestOnModeProcrastinates(t *testing.T) {
	clk := &fakeClock{now: time.Unix(0, 0)}
	var rec recorder
	g := New(Config{Mode: On, Clock: clk, MaxWait: 3 * time.Millisecond, Observe: rec.observe})
	g.Begin("f").Wait(false, func(bool) (any, error) { return nil, nil })
	if len(rec.stats) != 1 || rec.stats[0].Wait != 3*time.Millisecond {
		t.Fatalf("%+v", rec.stats)
	}
}

// TestBatching: many concurrent requests on one file share few flushes; every
// request is released only after a flush that started after it joined.
func TestBatching(t *testing.T) {
	g := New(Config{Mode: Adaptive, MaxWait: 5 * time.Millisecond})
	var mu sync.Mutex
	written := map[int]bool{} // requests whose data is written
	var flushes atomic.Int64
	flush := func(covered map[int]bool) FlushFunc {
		return func(bool) (any, error) {
			flushes.Add(1)
			mu.Lock()
			for k := range written {
				covered[k] = true
			}
			mu.Unlock()
			time.Sleep(2 * time.Millisecond) // an fsync
			return nil, nil
		}
	}
	const n = 64
	covered := make([]map[int]bool, n)
	var wg sync.WaitGroup
	var start sync.WaitGroup
	start.Add(1)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			start.Wait()
			tk := g.Begin("f")
			mu.Lock()
			written[i] = true
			mu.Unlock()
			// Each request's flush records what was written when it started; the
			// flush that released i must have seen i written.
			covered[i] = map[int]bool{}
			res, err := tk.Wait(false, func(d bool) (any, error) {
				c := map[int]bool{}
				_, err := flush(c)(d)
				return c, err
			})
			if err != nil {
				t.Error(err)
				return
			}
			if !res.(map[int]bool)[i] {
				t.Errorf("request %d released by a flush that did not cover it", i)
			}
		}(i)
	}
	start.Done()
	wg.Wait()
	if f := flushes.Load(); f >= n/2 {
		t.Fatalf("%d flushes for %d concurrent requests", f, n)
	}
	t.Logf("%d requests, %d flushes", n, flushes.Load())
}

func TestFlushErrorFailsTheBatch(t *testing.T) {
	g := New(Config{Mode: On, MaxWait: 20 * time.Millisecond})
	boom := errors.New("boom")
	var wg sync.WaitGroup
	var failed atomic.Int64
	var calls atomic.Int64
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tk := g.Begin("f")
			_, err := tk.Wait(false, func(bool) (any, error) { calls.Add(1); return nil, boom })
			if errors.Is(err, boom) {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	if failed.Load() != 8 {
		t.Fatalf("%d of 8 requests saw the flush error (%d flushes)", failed.Load(), calls.Load())
	}
}

func TestCancel(t *testing.T) {
	clk := &fakeClock{now: time.Unix(0, 0)}
	g := New(Config{Mode: Adaptive, Clock: clk, MaxWait: time.Millisecond})
	a := g.Begin("f")
	b := g.Begin("f")
	b.Cancel() // its write failed: the leader must not wait for it
	if _, err := a.Wait(false, func(bool) (any, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	if clk.waits.Load() != 0 {
		t.Fatal("leader waited for a cancelled request")
	}
}

func TestLearner(t *testing.T) {
	var l learner
	t0 := time.Unix(0, 0)
	for i := 0; i < 20; i++ { // overlapping arrivals 100µs apart, 8 outstanding
		l.arrive(t0.Add(time.Duration(i)*100*time.Microsecond), 7)
	}
	now := t0.Add(2 * time.Millisecond)
	if w := l.expectWait(now, 2*time.Millisecond, 1); w != 200*time.Microsecond {
		t.Fatalf("expectWait = %v, want two gaps", w)
	}
	if w := l.expectWait(now, 2*time.Millisecond, 8); w != 0 {
		t.Fatalf("a full window should not wait, got %v", w)
	}
	// The client answers a released batch after 400µs: wait about that long...
	l.released = now
	l.arrive(now.Add(400*time.Microsecond), 7)
	if w := l.expectWait(now, 2*time.Millisecond, 1); w != 500*time.Microsecond {
		t.Fatalf("expectWait with a 400µs turnaround = %v, want 500µs", w)
	}
	// ...but never more than a flush costs, nor more than the bound.
	l.flushed(300 * time.Microsecond)
	if w := l.expectWait(now, 2*time.Millisecond, 1); w != 300*time.Microsecond {
		t.Fatalf("expectWait with 300µs flushes = %v", w)
	}
	if w := l.expectWait(now, 100*time.Microsecond, 1); w != 0 {
		t.Fatalf("gaps over the bound: expectWait = %v, want 0", w)
	}
	l.arrive(now.Add(time.Second), 0) // idle: forget
	if w := l.expectWait(now.Add(time.Second), 2*time.Millisecond, 1); w != 0 {
		t.Fatalf("after idle, expectWait = %v", w)
	}
}

// TestLearnerMisses: when the requests a leader would wait for keep coming later
// than a flush after it asks, it stops waiting (but keeps watching), and
// waits again once they come in time.
func TestLearnerMisses(t *testing.T) {
	var l learner
	now := time.Unix(0, 0)
	l.flushed(400 * time.Microsecond)
	step := func(d time.Duration, outstanding int) {
		now = now.Add(d)
		l.arrive(now, outstanding)
	}
	for range 8 { // overlapping, 150µs apart
		step(150*time.Microsecond, 1)
	}
	if w := l.expectWait(now, 2*time.Millisecond, 1); w == 0 {
		t.Fatal("overlapping writes 150µs apart: expected a wait")
	}
	// Several synchronous writers behind a slow link: the next request comes 700µs
	// after each ask, later than a 400µs flush - every ask is a miss.
	waits := 0
	for range 12 {
		if l.expectWait(now, 2*time.Millisecond, 1) > 0 {
			waits++
		}
		step(700*time.Microsecond, 1)
	}
	if l.expectWait(now, 2*time.Millisecond, 1) != 0 {
		t.Fatalf("after 12 late requests (miss %.2f) the leader still waits", l.miss)
	}
	if waits > 4 {
		t.Fatalf("waited on %d of 12 asks that all missed", waits)
	}
	// The requests come promptly again (100µs after each ask): the learner, still
	// watching while not waiting, takes up waiting again.
	for range 12 {
		l.expectWait(now, 2*time.Millisecond, 1)
		step(100*time.Microsecond, 1)
	}
	if w := l.expectWait(now, 2*time.Millisecond, 1); w == 0 {
		t.Fatalf("prompt requests again (miss %.2f): expected a wait", l.miss)
	}
}

// TestTimeoutKeepsTheQueueMoving: requests that stop waiting stay in their batch,
// and leadership passes over them.
func TestTimeoutKeepsTheQueueMoving(t *testing.T) {
	g := New(Config{Mode: Adaptive, MaxWait: time.Millisecond})
	release := make(chan struct{})
	var flushes atomic.Int64
	slow := func(bool) (any, error) {
		if flushes.Add(1) == 1 {
			<-release
		}
		return nil, nil
	}
	leaderDone := make(chan error, 1)
	a := g.Begin("f")
	go func() { _, err := a.Wait(false, slow); leaderDone <- err }()
	for flushes.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	b := g.Begin("f")
	if _, err := b.WaitTimeout(false, slow, 20*time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Fatalf("b: %v", err)
	}
	close(release)
	if err := <-leaderDone; err != nil {
		t.Fatal(err)
	}
	// b's data was flushed by a, which led again since b had gone.
	if flushes.Load() != 2 {
		t.Fatalf("%d flushes", flushes.Load())
	}
	c := g.Begin("f")
	if _, err := c.Wait(false, slow); err != nil {
		t.Fatal(err)
	}
}
