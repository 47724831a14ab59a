package gather

import "time"

// learner keeps what the server has learned about one file's stable writes: how
// far apart they arrive, whether they overlap (arrive while others are still being
// served), how many are outstanding at once (the client's window), how long a flush
// takes, and how long the client takes to send the next request after a batch is
// released (its turnaround), as exponentially weighted moving averages. Pure: time
// is passed in.
type learner struct {
	last     time.Time
	gap      time.Duration // EWMA of inter-arrival time
	overlap  float64       // EWMA of "arrived while another request was outstanding"
	window   float64       // EWMA of requests outstanding at an arrival, itself included
	flush    time.Duration // EWMA of how long a flush of this file takes
	turn     time.Duration // EWMA of release-to-next-arrival (the client's turnaround)
	released time.Time     // when the last batch was released; zero once a request arrived after it
	asked    time.Time     // when a leader last considered waiting for one more; zero once one arrived
	miss     float64       // EWMA of "no request came within a flush of being asked"
}

const (
	alpha = 0.25
	// idleGap: arrivals further apart than this restart the learning.
	idleGap = 100 * time.Millisecond
)

// arrive records a request arriving at now while outstanding others were in
// progress (received, queued or being flushed).
func (l *learner) arrive(now time.Time, outstanding int) {
	if !l.last.IsZero() {
		gap := now.Sub(l.last)
		switch {
		case gap > idleGap:
			*l = learner{flush: l.flush, asked: l.asked}
		case l.gap == 0:
			l.gap = gap
		default:
			l.gap = time.Duration(float64(l.gap)*(1-alpha) + float64(gap)*alpha)
		}
	}
	if !l.released.IsZero() {
		t := now.Sub(l.released)
		l.released = time.Time{}
		if t < idleGap {
			if l.turn == 0 {
				l.turn = t
			} else {
				l.turn = time.Duration(float64(l.turn)*(1-alpha) + float64(t)*alpha)
			}
		}
	}
	if !l.asked.IsZero() {
		if l.flush > 0 {
			l.observe(now.Sub(l.asked) <= l.flush)
		}
		l.asked = time.Time{}
	}
	l.last = now
	v := 0.0
	if outstanding > 0 {
		v = 1
	}
	l.overlap = l.overlap*(1-alpha) + v*alpha
	l.window = l.window*(1-alpha) + float64(outstanding+1)*alpha
}

// flushed records how long a flush took.
func (l *learner) flushed(d time.Duration) {
	if l.flush == 0 {
		l.flush = d
	} else {
		l.flush = time.Duration(float64(l.flush)*(1-alpha) + float64(d)*alpha)
	}
}

// observe records whether the request a leader considered waiting for came in
// time to be worth the wait.
func (l *learner) observe(hit bool) {
	v := 1.0
	if hit {
		v = 0
	}
	l.miss = l.miss*(1-alpha) + v*alpha
}

// expectWait is how long a leader with nothing else in progress should wait for
// one more request, given queued requests already gathered: zero unless this
// file's requests have been overlapping (a client with several writes in flight),
// fewer than the client's usual window are gathered, and they arrive closer
// together than the bound. Then it waits for the requests still missing from the
// window, which are usually on their way back from the client: about one
// turnaround, or two inter-arrival times if longer, but never more than one flush
// of this file (waiting longer could cost more than the flush it saves) nor more
// than the bound. A client that sends one write at a time never overlaps, so it
// never waits.
//
// A wait is a bet that the next request comes within a flush. Each time a leader
// asks, the learner records whether it did - whether or not the leader waited, so
// it keeps learning while it does not wait. When most recent asks were misses
// (requests that overlap but come far apart, as from a few synchronous writers
// behind a slow network), the leader flushes at once and gathers only what
// arrives during flushes, as knfsd's lone fsyncs would.
func (l *learner) expectWait(now time.Time, bound time.Duration, queued int) time.Duration {
	if l.overlap < 0.5 || l.gap <= 0 || l.gap > bound || float64(queued) >= l.window-0.5 {
		return 0
	}
	if l.asked.IsZero() {
		l.asked = now
	}
	if l.miss >= 0.5 {
		return 0
	}
	// The missing requests are usually on their way back from the client, which
	// answers a release after its turnaround: wait about that long, or two
	// inter-arrival gaps, whichever is longer; never more than one flush.
	w := min(max(2*l.gap, l.turn+l.turn/4), bound)
	if l.flush > 0 {
		w = min(w, l.flush)
	}
	return w
}
