package sunrpc

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// These tests observe the poll reader only as its users can: what Read returns,
// and the spin gate it shares with other connections, whose slot a reader holds
// exactly while it polls. Each test gives its readers a gate of its own with one
// slot (two in TestPollGateShared) that nothing else takes, so a probe of the gate
// (polling) tells whether the reader under test is polling at that moment.

// newTestPollReader is a poll reader over a fresh connection, with gate g and
// poll time spin, and the connection's client end.
func newTestPollReader(t *testing.T, g *spinGate, spin time.Duration, busy *atomic.Int32) (client, srv net.Conn, r io.Reader) {
	t.Helper()
	client, srv = tcpPair(t)
	r = newPollReader(srv, g, spin, busy)
	if r == io.Reader(srv) {
		t.Fatal("newPollReader did not wrap a TCP connection")
	}
	return client, srv, r
}

// polling reports whether a reader holds a slot of g now, g having one slot
// free of everything but the reader under test. The probe takes the slot when it
// is free and gives it back at once: a reader that looked for a slot in that
// instant would find none and park. The watchers below sleep before their first
// probe, so the reader, started just before, has looked already; it looks once
// per Read.
func polling(g *spinGate) bool {
	if g.acquire() {
		g.release()
		return false
	}
	return true
}

// readWatching runs one Read of r while watching g, then writes one byte to c:
// as soon as it has seen the reader polling, or after wait if it never does.
// It reports whether it saw the reader poll, and checks that the Read returned
// the byte and gave the gate's slot back.
func readWatching(t *testing.T, c io.Writer, r io.Reader, g *spinGate, wait time.Duration) bool {
	t.Helper()
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		buf := make([]byte, 64)
		n, err := r.Read(buf)
		done <- result{buf[:n], err}
	}()
	seen := false
	for end := time.Now().Add(wait); !seen && time.Now().Before(end); {
		time.Sleep(200 * time.Microsecond)
		seen = polling(g)
	}
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.err != nil || string(res.b) != "x" {
		t.Fatalf("Read: %q, %v; want the byte sent", res.b, res.err)
	}
	if polling(g) {
		t.Fatal("the reader kept its gate slot after its Read returned")
	}
	return seen
}

// expectPoll checks that the next Read polls. The byte is sent within half the
// poll time even when no poll was seen.
func expectPoll(t *testing.T, what string, c io.Writer, r io.Reader, g *spinGate, spin time.Duration) {
	t.Helper()
	if !readWatching(t, c, r, g, spin/2) {
		t.Fatalf("%s: the reader did not poll", what)
	}
}

// expectNoPoll checks that the next Read does not poll, watching it for quiet
// before the byte is sent. (A slow machine can only hide a poll from it, not
// invent one.)
func expectNoPoll(t *testing.T, what string, c io.Writer, r io.Reader, g *spinGate, quiet time.Duration) {
	t.Helper()
	if readWatching(t, c, r, g, quiet) {
		t.Fatalf("%s: the reader polled", what)
	}
}

// readReady writes one byte to c, waits until it can be read, and reads it:
// the Read finds its data already there.
func readReady(t *testing.T, c io.Writer, srv net.Conn, r io.Reader) {
	t.Helper()
	if _, err := c.Write([]byte("y")); err != nil {
		t.Fatal(err)
	}
	// Wait for the byte, without consuming it, through the socket itself.
	rc, err := srv.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(10 * time.Second); ; {
		var avail bool
		rc.Control(func(fd uintptr) {
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, _ := unix.Poll(pfd, 0)
			avail = n == 1 && pfd[0].Revents&unix.POLLIN != 0
		})
		if avail {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the byte sent never arrived")
		}
		time.Sleep(time.Millisecond)
	}
	buf := make([]byte, 64)
	if n, err := r.Read(buf); err != nil || string(buf[:n]) != "y" {
		t.Fatalf("Read: %q, %v; want the byte sent", buf[:n], err)
	}
}

// TestPollReaderReads: data sent before, during and after a poll arrives whole
// and in order; the peer's close is io.EOF; a read deadline still applies; and
// no Read keeps the gate's slot once it has returned.
func TestPollReaderReads(t *testing.T) {
	g := &spinGate{max: 1}
	c, srv, r := newTestPollReader(t, g, time.Millisecond, nil)
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
	if n, err := r.Read(nil); n != 0 || err != nil {
		t.Fatalf("empty Read: %d, %v; want 0, nil", n, err)
	}
	if err := srv.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v, want a timeout", err)
	}
	srv.SetReadDeadline(time.Time{})
	c.Close()
	if n, err := r.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("read after the peer closed: %d, %v; want 0, EOF", n, err)
	}
	if polling(g) {
		t.Fatal("the gate's slot is still taken after the reads")
	}
}

// TestPollReaderCools: a connection polls while its calls come within the poll
// time; a poll that finds nothing gives the slot back after the poll time and
// makes the connection cold, so an idle client costs one poll, not one per read;
// a Read that finds its data already there changes nothing; a call that comes
// soon after a cold reader parked warms the connection again.
//
// The poll time is far longer than any scheduling delay, so a slow machine can
// only make a call come later than a check needs where that is harmless: the
// warming checks send within half of it, the cooling one waits past it.
func TestPollReaderCools(t *testing.T) {
	const spin = time.Second
	g := &spinGate{max: 1}
	c, srv, r := newTestPollReader(t, g, spin, nil)
	expectPoll(t, "a new connection", c, r, g, spin)
	expectPoll(t, "after a call that came during the poll", c, r, g, spin)
	readReady(t, c, srv, r)
	expectPoll(t, "hot, after a Read that found its data there", c, r, g, spin)

	// An idle client: the poll times out while the Read waits on.
	idleRead(t, c, r, g, spin)

	expectNoPoll(t, "cold, after a poll that found nothing", c, r, g, 50*time.Millisecond) // and the call comes soon
	expectPoll(t, "after a call that came soon after parking", c, r, g, spin)
}

// idleRead checks a hot reader's Read on an idle connection: it polls, then
// gives the gate's slot back after the poll time while the Read waits on; the
// call comes only after that.
func idleRead(t *testing.T, c io.Writer, r io.Reader, g *spinGate, spin time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := r.Read(make([]byte, 64))
		done <- err
	}()
	start := time.Now()
	seen := false
	for !seen && time.Since(start) < spin/2 {
		time.Sleep(200 * time.Microsecond)
		seen = polling(g)
	}
	if !seen {
		t.Fatal("a hot connection did not poll")
	}
	for polling(g) {
		if time.Since(start) > 30*time.Second {
			t.Fatal("the poll did not stop after the poll time")
		}
		time.Sleep(time.Millisecond)
	}
	if waited := time.Since(start); waited < spin/2 {
		t.Fatalf("the poll stopped after %v with nothing read, poll time %v", waited, spin)
	}
	select {
	case err := <-done:
		t.Fatalf("Read returned (%v) with nothing sent", err)
	default:
	}
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// readLate reads one byte that c sends only after delay.
func readLate(t *testing.T, c io.Writer, r io.Reader, delay time.Duration) {
	t.Helper()
	go func() {
		time.Sleep(delay)
		c.Write([]byte("x"))
	}()
	buf := make([]byte, 64)
	if n, err := r.Read(buf); err != nil || string(buf[:n]) != "x" {
		t.Fatalf("Read: %q, %v; want the byte sent", buf[:n], err)
	}
}

// TestPollReaderColdStaysCold: a cold connection whose data is already there
// when it reads stays cold; a call that comes later than the poll time after a
// cold reader parked leaves it cold.
func TestPollReaderColdStaysCold(t *testing.T) {
	const spin = 20 * time.Millisecond // the calls come far later
	g := &spinGate{max: 1}
	c, srv, r := newTestPollReader(t, g, spin, nil)
	readLate(t, c, r, 10*spin) // a poll in vain (or a park, then a late call): cold
	readReady(t, c, srv, r)
	expectNoPoll(t, "cold, after a Read that found its data there", c, r, g, 10*spin) // the call comes late
	expectNoPoll(t, "cold, after a call that came long after parking", c, r, g, 10*spin)
}

// TestPollReaderQuietWhileBusy: a hot connection does not poll while one of its
// calls runs in a handler goroutine, and polls again once none does.
func TestPollReaderQuietWhileBusy(t *testing.T) {
	const spin = time.Second
	var busy atomic.Int32
	g := &spinGate{max: 1}
	c, _, r := newTestPollReader(t, g, spin, &busy)
	busy.Store(1)
	expectNoPoll(t, "a call running", c, r, g, 50*time.Millisecond) // the call comes soon: still hot
	busy.Store(0)
	expectPoll(t, "no call running", c, r, g, spin)
}

// TestPollGate: no more readers poll at once than the gate has slots; with
// GOMAXPROCS 1 (no slot) or no poll time, connections are read plainly.
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

	// A reader finding the gate full (another connection polling) still reads
	// its data, and leaves the gate as it found it.
	c, _, r := newTestPollReader(t, g, time.Hour, nil)
	if !g.acquire() {
		t.Fatal("acquire failed")
	}
	go func() {
		time.Sleep(5 * time.Millisecond)
		c.Write([]byte("x"))
	}()
	if n, err := r.Read(make([]byte, 8)); n != 1 || err != nil {
		t.Fatalf("Read past a full gate: %d, %v", n, err)
	}
	if !polling(g) {
		t.Fatal("a reader gated out released a slot it did not hold")
	}
	g.release()
	if polling(g) {
		t.Fatal("a reader gated out took a slot")
	}

	_, srv := tcpPair(t)
	if r := newPollReader(srv, &spinGate{max: 0}, time.Millisecond, nil); r != io.Reader(srv) {
		t.Fatal("a gate of 0 (one CPU) still polls")
	}
	if r := newPollReader(srv, &spinGate{max: 1}, -1, nil); r != io.Reader(srv) {
		t.Fatal("a negative poll time still polls")
	}
	if r := newPollReader(srv, &spinGate{max: 1}, 0, nil); r != io.Reader(srv) {
		t.Fatal("a zero poll time still polls")
	}
}

// TestPollGateShared: readers on many connections sharing a gate, with calls
// coming at every distance from the poll time, each read their own data
// intact, and leave every slot free.
func TestPollGateShared(t *testing.T) {
	g := &spinGate{max: 2}
	const conns, msgs = 4, 40
	var wg sync.WaitGroup
	errs := make(chan error, 2*conns)
	for i := range conns {
		c, _, r := newTestPollReader(t, g, time.Millisecond, nil)
		wg.Add(2)
		go func() {
			defer wg.Done()
			for j := range msgs {
				time.Sleep(time.Duration((i+j)%4) * 500 * time.Microsecond)
				if _, err := c.Write([]byte{byte(i), byte(j)}); err != nil {
					errs <- err
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			var got []byte
			buf := make([]byte, 64)
			for len(got) < 2*msgs {
				n, err := r.Read(buf)
				if err != nil {
					errs <- err
					return
				}
				got = append(got, buf[:n]...)
			}
			for j := range msgs {
				if got[2*j] != byte(i) || got[2*j+1] != byte(j) {
					errs <- errors.New("a connection's bytes arrived altered or out of order")
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if !g.acquire() || !g.acquire() {
		t.Fatal("a slot of the gate is still taken after the reads")
	}
	if g.acquire() {
		t.Fatal("the gate admitted a third poller")
	}
}
