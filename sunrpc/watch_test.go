package sunrpc

import (
	"testing"
	"time"
)

// TestWatchState drives the server watch's state machine on a made-up clock:
// an outage is reported once however many calls wait and however often the
// check runs, the recovery once at the first answer; a slow call among
// answered ones is no outage; an idle client schedules no check.
func TestWatchState(t *testing.T) {
	const after = 5 * time.Second
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	w := watchState{after: after}

	// Idle, then one call answered quickly: one check scheduled, which
	// finds nothing waiting and schedules no other.
	if d := w.begin(at(0)); d != after {
		t.Fatalf("first call: check in %v; want %v", d, after)
	}
	if up, _, d := w.done(at(0.1), true); up || d != 0 {
		t.Fatalf("answered call: up %v, check %v; want neither", up, d)
	}
	if down, _, next := w.check(at(5)); down || next != 0 {
		t.Fatalf("check while idle: down %v, next %v; want neither", down, next)
	}

	// A slow call (8 s) while others are answered: no outage.
	w.begin(at(10))
	for s := 10.5; s < 18; s += 1 {
		w.begin(at(s))
		w.done(at(s+0.1), true)
	}
	for s := 15.0; s < 18; s++ {
		if down, _, _ := w.check(at(s)); down {
			t.Fatalf("check at %vs: down while other calls were answered", s)
		}
	}
	w.done(at(18), true)

	// An outage: three calls wait from 20 s; checks run often; one report.
	for _, s := range []float64{20, 21, 22} {
		w.begin(at(s))
	}
	if down, _, next := w.check(at(23)); down || next != 2*time.Second {
		t.Fatalf("check at 23 s: down %v, next %v; want not down, next 2s", down, next)
	}
	down, waited, next := w.check(at(25))
	if !down || waited != 5*time.Second || next != 0 {
		t.Fatalf("check at 25 s: down %v after %v, next %v; want down after 5s, no next", down, waited, next)
	}
	for _, s := range []float64{26, 30, 40} {
		if d := w.begin(at(s)); d != 0 {
			t.Fatalf("call at %vs while down: check scheduled", s)
		}
		if down, _, _ := w.check(at(s)); down {
			t.Fatalf("check at %vs: reported down again", s)
		}
	}
	// A call given up (its context ended) is no answer.
	if up, _, _ := w.done(at(41), false); up {
		t.Fatal("an abandoned call ended the outage")
	}
	up, outage, d := w.done(at(45), true)
	if !up || outage != 25*time.Second {
		t.Fatalf("first answer: up %v after %v; want up after 25s", up, outage)
	}
	if d != after {
		t.Fatalf("first answer with calls still waiting: check in %v; want %v", d, after)
	}
	for _, s := range []float64{45.1, 45.2, 45.3, 45.4} {
		if up, _, _ := w.done(at(s), true); up {
			t.Fatalf("answer at %vs: reported up again", s)
		}
	}
	if w.inflight != 0 {
		t.Fatalf("%d calls in flight; want 0", w.inflight)
	}
	// The next outage is reported again.
	w.check(at(50))
	w.begin(at(60))
	if down, _, _ := w.check(at(65)); !down {
		t.Fatal("second outage not reported")
	}
}
