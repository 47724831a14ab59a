package consist

import (
	"testing"
	"time"
)

// TestOffsetClock: a timer fires when Advance brings the clock to its time
// (not before), or when the wall clock does; a stopped one never fires.
func TestOffsetClock(t *testing.T) {
	c := new(OffsetClock)
	start := c.Now()
	fired := make(chan time.Time, 1)
	c.AfterFunc(time.Hour, func() { fired <- c.Now() })
	c.Advance(59 * time.Minute)
	select {
	case <-fired:
		t.Fatal("fired a minute early")
	case <-time.After(50 * time.Millisecond):
	}
	c.Advance(time.Minute)
	select {
	case at := <-fired:
		if at.Sub(start) < time.Hour {
			t.Fatalf("fired at start+%v", at.Sub(start))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not fired 10 s after the clock reached its time")
	}

	stopped := make(chan struct{}, 1)
	s := c.AfterFunc(time.Hour, func() { stopped <- struct{}{} })
	if !s.Stop() {
		t.Fatal("Stop of a pending timer returned false")
	}
	c.Advance(2 * time.Hour)
	wall := make(chan struct{})
	w := c.AfterFunc(20*time.Millisecond, func() { close(wall) })
	select {
	case <-wall:
	case <-time.After(10 * time.Second):
		t.Fatal("the wall clock did not fire a 20 ms timer")
	}
	if w.Stop() {
		t.Error("Stop of a fired timer returned true")
	}
	select {
	case <-stopped:
		t.Error("a stopped timer fired")
	default:
	}
}
