package sunrpc

import (
	"sync"
	"time"
)

// A Client's server watch (WithServerWatch) tells its user once when the
// server stops answering and once when it answers again, as the Linux NFS
// client's "server not responding, still trying" and "server OK": once per
// outage, however many calls wait meanwhile and however often they are sent
// again or their connection is dialled again.
//
// The server is taken as not responding when calls have waited for a reply
// for the watch's threshold and no reply to any call came meanwhile: a slow
// call among answered ones is not an outage. It answers again with the next
// reply. The check needs no goroutine and no ticker: one timer, armed while
// calls wait and the server is not yet taken as down, fires at most once per
// threshold, and not at all while the client is idle.

// WithServerWatch makes the client call report(true, waited) once when its
// calls have waited after for a reply with no reply to any of them meanwhile
// (waited: how long), and report(false, outage) once at the next reply (outage:
// how long nothing was answered). report runs under the watch's lock, so the
// two alternate; it must not call the client. after <= 0 is no watch.
func WithServerWatch(after time.Duration, report func(down bool, d time.Duration)) DialOption {
	return func(t *transport) {
		if after <= 0 || report == nil {
			t.watch = nil
			return
		}
		t.watch = newServerWatch(after, report)
	}
}

// watchState is the watch's pure state machine: the caller passes the time.
type watchState struct {
	after     time.Duration
	inflight  int       // calls waiting for a reply
	since     time.Time // the later of the last reply and the start of the current wait
	down      bool      // reported as not responding, no reply since
	downSince time.Time // since, when it went down
	armed     bool      // a check is scheduled
}

// begin: a call starts waiting at now. arm: schedule a check in that much
// time (0: none needed).
func (w *watchState) begin(now time.Time) (arm time.Duration) {
	w.inflight++
	if w.inflight == 1 && !w.down {
		w.since = now
	}
	if !w.armed && !w.down {
		w.armed = true
		return w.after
	}
	return 0
}

// done: a call stops waiting at now, answered or not (its context ended, the
// client closed). up: an answer ended an outage that lasted outage. arm as
// begin's.
func (w *watchState) done(now time.Time, answered bool) (up bool, outage time.Duration, arm time.Duration) {
	w.inflight--
	if !answered {
		return false, 0, 0
	}
	w.since = now
	if w.down {
		up, outage = true, now.Sub(w.downSince)
		w.down = false
	}
	if w.inflight > 0 && !w.armed {
		w.armed = true
		arm = w.after
	}
	return up, outage, arm
}

// check: the scheduled check, at now. down: the server has just gone
// unanswering, calls having waited waited. next: when to check again (0: not
// until a call begins or is answered).
func (w *watchState) check(now time.Time) (down bool, waited, next time.Duration) {
	w.armed = false
	if w.inflight == 0 || w.down {
		return false, 0, 0
	}
	waited = now.Sub(w.since)
	if waited >= w.after {
		w.down, w.downSince = true, w.since
		return true, waited, 0
	}
	w.armed = true
	return false, 0, w.after - waited
}

// serverWatch runs a watchState on the wall clock with one timer.
type serverWatch struct {
	report func(down bool, d time.Duration)

	mu     sync.Mutex
	st     watchState  // guarded by mu
	timer  *time.Timer // guarded by mu
	closed bool        // guarded by mu
}

func newServerWatch(after time.Duration, report func(down bool, d time.Duration)) *serverWatch {
	w := &serverWatch{report: report, st: watchState{after: after}}
	w.timer = time.AfterFunc(time.Hour, w.fire)
	w.timer.Stop()
	return w
}

func (w *serverWatch) begin() {
	now := time.Now()
	w.mu.Lock()
	if d := w.st.begin(now); d > 0 && !w.closed {
		w.timer.Reset(d)
	}
	w.mu.Unlock()
}

func (w *serverWatch) done(answered bool) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	up, outage, d := w.st.done(now, answered)
	if w.closed {
		return
	}
	if up {
		w.report(false, outage)
	}
	if d > 0 {
		w.timer.Reset(d)
	}
}

func (w *serverWatch) fire() {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	down, waited, next := w.st.check(now)
	if down {
		w.report(true, waited)
	}
	if next > 0 {
		w.timer.Reset(next)
	}
}

// stop ends the watch: no report after it returns.
func (w *serverWatch) stop() {
	w.mu.Lock()
	w.closed = true
	w.timer.Stop()
	w.mu.Unlock()
}
