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
		ts := unix.NsecToTimespec(int64(delay))
		unix.RawSyscall(unix.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0)
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
func TestPollReaderCools(t *testing.T) {
	const spin = 2 * time.Millisecond
	c, r, _ := newTestPollReader(t, &spinGate{max: 1}, spin)
	readAfter := func(delay time.Duration) { t.Helper(); sendAfterRead(t, c, r, delay) }
	if !r.hot {
		t.Fatal("a new connection should start hot")
	}
	readAfter(spin / 10)
	if !r.hot {
		t.Fatal("a call that came during the poll made the connection cold")
	}
	readAfter(10 * spin)
	if r.hot {
		t.Fatal("a call long after the read left the connection hot")
	}
	polls := r.polls
	readAfter(10 * spin)
	if r.hot || r.polls != polls {
		t.Fatalf("a cold connection polled again (hot %v, polls %d then %d)", r.hot, polls, r.polls)
	}
	readAfter(spin / 10) // parked (cold), but the call came soon: poll next time
	if !r.hot {
		t.Fatal("a call soon after parking did not warm the connection")
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
// calls runs in a handler goroutine, and polls again once none does.
func TestPollReaderQuietWhileBusy(t *testing.T) {
	c, srv := tcpPair(t)
	var busy atomic.Int32
	r, ok := newPollReader(srv, &spinGate{max: 1}, 2*time.Millisecond, &busy).(*pollReader)
	if !ok {
		t.Fatal("newPollReader did not wrap a TCP connection")
	}
	readAfter := func(delay time.Duration) { t.Helper(); sendAfterRead(t, c, r, delay) }
	busy.Store(1)
	readAfter(500 * time.Microsecond)
	if r.polls != 0 {
		t.Fatalf("polled %d times while a call was running", r.polls)
	}
	busy.Store(0)
	readAfter(500 * time.Microsecond) // came soon after parking: still hot
	if r.polls != 1 {
		t.Fatalf("polled %d times with no call running, want 1", r.polls)
	}
}
