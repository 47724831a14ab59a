package sunrpc

import (
	"bytes"
	"errors"
	"io"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func newTestPollReader(t *testing.T, gate *spinGate, spin time.Duration) (client io.Writer, r *pollReader, closeClient func()) {
	t.Helper()
	c, srv := tcpPair(t)
	pr, ok := newPollReader(srv, gate, spin, nil).(*pollReader)
	if !ok {
		t.Fatal("newPollReader did not wrap a TCP connection")
	}
	return c, pr, func() { c.Close() }
}

// TestPollReaderReads: data sent before and during a Read arrives whole, in
// order; the peer's close is io.EOF; a read deadline still applies.
func TestPollReaderReads(t *testing.T) {
	c, r, closeClient := newTestPollReader(t, &spinGate{max: 1}, time.Millisecond)
	var want, got bytes.Buffer
	buf := make([]byte, 1000)
	for i := range 50 {
		msg := bytes.Repeat([]byte{byte(i)}, 1+i*37)
		want.Write(msg)
		delay := time.Duration(i%4) * 700 * time.Microsecond // inside, around and past the poll
		go func() {
			time.Sleep(delay)
			c.Write(msg)
		}()
		for n := 0; n < len(msg); {
			m, err := r.Read(buf)
			if err != nil {
				t.Fatal(err)
			}
			got.Write(buf[:m])
			n += m
		}
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatal("bytes read differ from bytes sent")
	}
	if err := r.nc.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v, want a timeout", err)
	}
	r.nc.SetReadDeadline(time.Time{})
	closeClient()
	if n, err := r.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("read after the peer closed: %d, %v; want 0, EOF", n, err)
	}
	if r.gate.n.Load() != 0 {
		t.Fatalf("gate holds %d pollers after the reads", r.gate.n.Load())
	}
}

// sendAfterRead has c send one byte after delay while r reads it. The sender runs
// on a P of its own before the read begins and sleeps in a raw nanosleep that
// keeps that P: a timer, a run queue or a P handed off by a blocking syscall may
// all sit behind the reader, which does not give up its P while it polls.
func sendAfterRead(t *testing.T, c io.Writer, r *pollReader, delay time.Duration) {
	t.Helper()
	var running atomic.Bool
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		running.Store(true)
		// Until an absolute deadline, again after each EINTR: the runtime
		// preempts a goroutine that runs this long with a signal.
		var ts unix.Timespec
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
		ts = unix.NsecToTimespec(ts.Nano() + int64(delay))
		for {
			_, _, e := unix.RawSyscall6(unix.SYS_CLOCK_NANOSLEEP, unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
			if e != unix.EINTR {
				break
			}
		}
		c.Write([]byte("x"))
	}()
	for !running.Load() {
	}
	if _, err := r.Read(make([]byte, 64)); err != nil {
		t.Fatal(err)
	}
}

// TestPollReaderCools: a connection polls while its calls come within the poll
// time; one poll that finds nothing makes it cold, so an idle client costs one
// poll, not one per read; a call that comes soon after parking warms it again.
//
// Each check is built so that a slow machine (CI under -race, other tests
// running) can only delay the call further past what the check needs: the
// warming checks use a poll time far longer than any scheduling delay, the
// cooling checks one far shorter than the call's delay.
func TestPollReaderCools(t *testing.T) {
	const long = time.Second
	c, r, _ := newTestPollReader(t, &spinGate{max: 1}, long)
	if !r.hot {
		t.Fatal("a new connection should start hot")
	}
	sendAfterRead(t, c, r, 20*time.Millisecond)
	if !r.hot || r.polls != 1 {
		t.Fatalf("a call that came during the poll: hot %v after %d polls, want hot after 1", r.hot, r.polls)
	}
	r.hot = false
	sendAfterRead(t, c, r, 20*time.Millisecond) // parked (cold), but the call came soon
	if !r.hot || r.polls != 1 {
		t.Fatalf("a call soon after parking: hot %v after %d polls, want hot, no new poll", r.hot, r.polls)
	}

	const short = 2 * time.Millisecond
	c, r, _ = newTestPollReader(t, &spinGate{max: 1}, short)
	sendAfterRead(t, c, r, 50*short)
	if r.hot {
		t.Fatal("a call long after the read left the connection hot")
	}
	polls := r.polls
	sendAfterRead(t, c, r, 50*short)
	if r.hot || r.polls != polls {
		t.Fatalf("a cold connection polled again (hot %v, polls %d then %d)", r.hot, polls, r.polls)
	}
}

// TestPollReaderCoolRule: after a read, the connection is hot exactly when a poll
// found the call, or the call came within the poll time after the reader parked.
func TestPollReaderCoolRule(t *testing.T) {
	const spin = 100 * time.Microsecond
	for _, tc := range []struct {
		name          string
		waited        time.Duration // since the read found the socket empty; 0: it never did
		spinning, was bool
		want          bool
	}{
		{"data was there, hot stays hot", 0, false, true, true},
		{"data was there, cold stays cold", 0, false, false, false},
		{"the poll found it", 50 * time.Microsecond, true, false, true},
		{"came within the poll time after parking", spin / 2, false, false, true},
		{"came after the poll time (a poll would have failed)", 3 * spin / 2, false, true, false},
	} {
		r := &pollReader{spin: spin, hot: tc.was, spinning: tc.spinning}
		if tc.waited > 0 {
			r.start = time.Now().Add(-tc.waited)
		}
		r.cool()
		if r.hot != tc.want {
			t.Errorf("%s: hot %v, want %v", tc.name, r.hot, tc.want)
		}
	}
}

// TestPollGate: no more connections poll at once than the gate allows, and
// with GOMAXPROCS 1 (max 0) none do.
func TestPollGate(t *testing.T) {
	g := &spinGate{max: 1}
	if !g.acquire() {
		t.Fatal("first acquire failed")
	}
	if g.acquire() {
		t.Fatal("second poller admitted past max 1")
	}
	g.release()
	if !g.acquire() {
		t.Fatal("acquire after release failed")
	}
	g.release()

	// A cold or gated-out reader parks at once: it never takes the gate.
	c, r, _ := newTestPollReader(t, &spinGate{max: 1}, time.Hour)
	r.gate.n.Store(1) // another connection is polling
	go func() {
		time.Sleep(5 * time.Millisecond)
		c.Write([]byte("x"))
	}()
	if _, err := r.Read(make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	if r.polls != 0 || r.gate.n.Load() != 1 {
		t.Fatalf("a reader polled past a full gate (polls %d, gate %d)", r.polls, r.gate.n.Load())
	}

	_, srv := tcpPair(t)
	if _, ok := newPollReader(srv, &spinGate{max: 0}, time.Millisecond, nil).(*pollReader); ok {
		t.Fatal("a gate of 0 (one CPU) still polls")
	}
	if _, ok := newPollReader(srv, &spinGate{max: 1}, -1, nil).(*pollReader); ok {
		t.Fatal("a negative poll time still polls")
	}
}

// TestPollReaderQuietWhileBusy: a hot connection does not poll while one of its
// calls runs in a handler goroutine, and polls again once none does. (The poll
// time is far longer than the calls' delays: see TestPollReaderCools.)
func TestPollReaderQuietWhileBusy(t *testing.T) {
	c, srv := tcpPair(t)
	var busy atomic.Int32
	r, ok := newPollReader(srv, &spinGate{max: 1}, time.Second, &busy).(*pollReader)
	if !ok {
		t.Fatal("newPollReader did not wrap a TCP connection")
	}
	busy.Store(1)
	sendAfterRead(t, c, r, 20*time.Millisecond)
	if r.polls != 0 {
		t.Fatalf("polled %d times while a call was running", r.polls)
	}
	busy.Store(0)
	sendAfterRead(t, c, r, 50*time.Millisecond) // came soon after parking: still hot
	if r.polls != 1 {
		t.Fatalf("polled %d times with no call running, want 1", r.polls)
	}
}
