package sunrpc

import (
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"snfs/rawsys"
)

// Busy polling of idle TCP connections.
//
// A client that sends one call at a time (libnfs, nfsmeta, a shell loop over a
// kernel mount) leaves the server idle between its reply and the next call. On an
// idle Go server that gap costs far more than the call: the reader parks on the
// netpoller, the thread sleeps in epoll_wait, every P goes idle so sysmon drops
// into its deep sleep, and the next call then pays a thread wakeup, a sysmon
// wakeup on the first syscall and the netpoller handoff. On a virtual machine
// each wakeup is an inter-processor interrupt and a halt exit; measured here, a
// ping-pong client's calls cost the server more CPU when it sleeps between them
// than when it polls.
//
// So a connection whose calls arrive close together polls its socket, with
// non-blocking reads that do not enter the scheduler's syscall path, for up to
// SpinPoll before parking. It is adaptive and bounded:
//   - a connection polls only while it is "hot": its last poll found the next
//     call, or (after parking) the call came within SpinPoll of the read, so a
//     poll would have found it; a poll that finds nothing makes it cold, so an
//     idle client costs at most one SpinPoll. (A looser bound made a client
//     whose calls come somewhat more than SpinPoll apart, such as the Linux
//     client, poll in vain on every other read; docs/measurements.md.)
//   - a connection does not poll while one of its calls is running in a handler
//     goroutine (a call that blocks, such as a stable WRITE waiting for its
//     flush): a client that sends one call at a time sends nothing until that
//     reply, and a poller would only compete with the handler for a CPU when
//     its syscall returns (a new file's FILE_SYNC WRITE measured slower with
//     polling; docs/measurements.md);
//   - at most GOMAXPROCS-1 connections poll at once (none on one CPU), so a
//     poller never holds the last P: a goroutine made runnable meanwhile runs
//     on another. (Yielding with runtime.Gosched would be worse: it wakes an
//     idle P's thread on every turn.)

// DefaultSpinPoll is Server.SpinPoll's default.
const DefaultSpinPoll = 100 * time.Microsecond

// spinGate bounds the connections polling at once.
type spinGate struct {
	n   atomic.Int32
	max int32
}

func newSpinGate() *spinGate {
	return &spinGate{max: int32(runtime.GOMAXPROCS(0) - 1)}
}

func (g *spinGate) acquire() bool {
	if g.n.Add(1) <= g.max {
		return true
	}
	g.n.Add(-1)
	return false
}

func (g *spinGate) release() { g.n.Add(-1) }

// pollReader is an io.Reader over a TCP connection that busy-polls as above. It
// is used by one goroutine, the connection's reader.
type pollReader struct {
	nc   net.Conn
	rc   syscall.RawConn // nil: plain nc.Read
	gate *spinGate
	spin time.Duration

	busy *atomic.Int32 // the connection's calls running in handler goroutines (nil: none)

	hot      bool      // poll before parking on the next empty read
	p        []byte    // the current Read's buffer
	n        int       // its result
	err      error     // its error
	start    time.Time // when the current Read first found the socket empty
	spinning bool      // the current Read holds the gate and is polling
	polls    int       // Reads that polled (for tests)
	tryFn    func(fd uintptr) bool
}

func newPollReader(nc net.Conn, gate *spinGate, spin time.Duration, busy *atomic.Int32) io.Reader {
	sc, ok := nc.(syscall.Conn)
	if !ok || spin <= 0 || gate.max <= 0 {
		return nc
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nc
	}
	r := &pollReader{nc: nc, rc: rc, gate: gate, spin: spin, busy: busy, hot: true}
	r.tryFn = r.try
	return r
}

func (r *pollReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.p, r.n, r.err, r.start = p, 0, nil, time.Time{}
	err := r.rc.Read(r.tryFn)
	if r.spinning {
		r.spinning = false
		r.gate.release()
	}
	r.p = nil
	switch {
	case err != nil:
		return 0, err
	case r.err != nil:
		return 0, r.err
	case r.n == 0:
		return 0, io.EOF
	}
	return r.n, nil
}

// try is the RawConn.Read callback: true when the read is done (data, EOF or an
// error), false to park on the netpoller until the socket is readable.
func (r *pollReader) try(fd uintptr) bool {
	for {
		// Raw syscalls: neither a non-blocking read nor a zero-timeout poll
		// blocks, and skipping the scheduler's syscall bookkeeping is the point.
		n, e := rawsys.Read(int(fd), r.p)
		switch e {
		case nil:
			r.n = n
			r.cool()
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
		default:
			r.err = e
			return true
		}
		if r.start.IsZero() {
			r.start = time.Now()
			if r.hot && (r.busy == nil || r.busy.Load() == 0) && r.gate.acquire() {
				r.spinning = true
				r.polls++
			}
		}
		if !r.spinning || !r.poll(fd) {
			return false
		}
	}
}

// poll waits, spinning, until fd is readable (true) or the poll time is up
// (false, and the connection turns cold). It polls with ppoll rather than read:
// tcp_poll does not take the socket lock that the receive path needs.
func (r *pollReader) poll(fd uintptr) bool {
	for {
		ready, err := rawsys.PollIn(int(fd))
		if ready {
			return true
		}
		if err != nil && err != unix.EINTR {
			return true // let read report it
		}
		if time.Since(r.start) > r.spin {
			r.spinning = false
			r.gate.release()
			r.hot = false
			return false
		}
	}
}

// cool updates hot once a read has found data.
func (r *pollReader) cool() {
	switch {
	case r.start.IsZero(): // data was already there
	case r.spinning: // the poll found it
		r.hot = true
	default: // it came after parking: poll next time only if a poll would have caught it
		r.hot = time.Since(r.start) <= r.spin
	}
}
