package client

import (
	"errors"
	"testing"
	"time"
)

// TestReachStates: Reach's connected state and its since move only when
// connected changes; a closed connection that is no longer the current one
// changes nothing; the watch's "not responding" disconnects an open
// connection; the reason is the latest cause; recovery spans a restart
// until recovered.
func TestReachStates(t *testing.T) {
	clock := time.Unix(1000, 0)
	r := NewReach("127.0.0.1:2049")
	r.now = func() time.Time { return clock }
	step := func() { clock = clock.Add(time.Second) }
	check := func(what string, connected bool, since int64, reason string) {
		t.Helper()
		st := r.State()
		if st.Connected != connected || st.Since.Unix() != since || st.Reason != reason || st.Addr != "127.0.0.1:2049" {
			t.Fatalf("%s: %+v; want connected %v since %d reason %q", what, st, connected, since, reason)
		}
	}
	r.since = clock
	check("new", false, 1000, "not connected yet")
	step()
	r.up(1)
	check("up", true, 1001, "")
	step()
	r.up(2) // a reconnection before the old connection's close was seen
	check("up again", true, 1001, "")
	r.down(1)
	check("stale close", true, 1001, "")
	step()
	r.watched(true)
	check("not responding", false, 1003, "server 127.0.0.1:2049 not responding")
	step()
	r.watched(false)
	check("answers again", true, 1004, "")
	step()
	r.down(2)
	check("closed", false, 1005, "connection to 127.0.0.1:2049 closed")
	step()
	r.failed(errors.New("dial tcp 127.0.0.1:2049: connect: connection refused"))
	check("refused", false, 1005, "dial tcp 127.0.0.1:2049: connect: connection refused")
	r.restarted()
	if st := r.State(); !st.Recovering || st.ServerRestarts != 1 {
		t.Fatalf("after a restart: %+v", st)
	}
	step()
	r.up(3)
	r.failed(errors.New("late")) // an attempt's error after a connection came up
	check("reconnected", true, 1007, "")
	r.recovered()()
	if st := r.State(); st.Recovering || st.ServerRestarts != 1 {
		t.Fatalf("after recovery: %+v", st)
	}
	// A recovery that ends after the server restarted again does not end
	// the new restart's.
	r.restarted()
	first := r.recovered()
	r.restarted()
	first()
	if st := r.State(); !st.Recovering || st.ServerRestarts != 3 {
		t.Fatalf("after the first of two recoveries: %+v", st)
	}
	r.recovered()()
	if st := r.State(); st.Recovering {
		t.Fatalf("after the second: %+v", st)
	}
}
