package sunrpc

import (
	"io"
	"net"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"snfs/rawsys"
)

// buffersWriter writes several buffers as one message (with one writev when it
// can). The combiner hands it each batch.
type buffersWriter interface {
	writeBuffers(bufs [][]byte) error
}

// deadliner is the part of net.Conn that bounds a write's time.
type deadliner interface{ SetWriteDeadline(time.Time) error }

// plainWriter is a buffersWriter over any io.Writer (net.Buffers uses writev for
// a *net.TCPConn), with a deadline on each batch when it can have one.
type plainWriter struct {
	w       io.Writer
	timeout time.Duration
}

func (p plainWriter) writeBuffers(bufs [][]byte) error {
	d, ok := p.w.(deadliner)
	if ok && p.timeout > 0 {
		d.SetWriteDeadline(time.Now().Add(p.timeout))
		defer d.SetWriteDeadline(time.Time{})
	}
	v := net.Buffers(bufs) // WriteTo consumes its receiver
	_, err := v.WriteTo(p.w)
	return err
}

// rawWriter writes to a TCP connection with raw, non-blocking writev calls
// (rawsys: they do not wake the runtime's sysmon, which on an otherwise idle
// server cost more than the write), parking on the netpoller while the socket
// is full. One goroutine uses it at a time (the combiner's writer).
//
// A write that finds the socket full arms a write deadline of timeout (if set):
// a peer that reads nothing for that long makes the write fail. The deadline is
// armed only then, so the common write costs no timer.
type rawWriter struct {
	rc      syscall.RawConn
	dl      deadliner // nil: no timeout
	timeout time.Duration
	armed   bool // the current write armed the deadline
	iov     []unix.Iovec
	bufs    [][]byte // what is left to write; the current call's
	err     error
	fn      func(fd uintptr) bool
}

// newBuffersWriter returns a rawWriter for a connection that exposes its
// descriptor, else a plainWriter. A write that makes no progress for timeout
// (0: no bound) fails.
func newBuffersWriter(w io.Writer, timeout time.Duration) buffersWriter {
	if sc, ok := w.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			rw := &rawWriter{rc: rc, timeout: timeout}
			if d, ok := w.(deadliner); ok && timeout > 0 {
				rw.dl = d
			}
			rw.fn = rw.try
			return rw
		}
	}
	return plainWriter{w, timeout}
}

// maxIOV is the most buffers one writev takes (IOV_MAX).
const maxIOV = 1024

func (w *rawWriter) writeBuffers(bufs [][]byte) error {
	w.bufs, w.err = bufs, nil
	err := w.rc.Write(w.fn)
	if w.armed {
		w.dl.SetWriteDeadline(time.Time{})
		w.armed = false
	}
	w.bufs = nil
	clear(w.iov)
	if err != nil {
		return err
	}
	return w.err
}

// try is the RawConn.Write callback: true when everything is written or an
// error is recorded, false to wait until the socket is writable.
func (w *rawWriter) try(fd uintptr) bool {
	for {
		for len(w.bufs) > 0 && len(w.bufs[0]) == 0 {
			w.bufs = w.bufs[1:]
		}
		if len(w.bufs) == 0 {
			return true
		}
		w.iov = w.iov[:0]
		for _, b := range w.bufs[:min(len(w.bufs), maxIOV)] {
			if len(b) > 0 {
				w.iov = append(w.iov, unix.Iovec{Base: (*byte)(unsafe.Pointer(&b[0])), Len: uint64(len(b))})
			}
		}
		n, err := rawsys.Writev(int(fd), w.iov)
		switch err {
		case nil:
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			// Arm (or re-arm: progress was made) the deadline, then wait
			// for the socket to drain. Setting it takes no lock that the
			// write holds.
			if w.dl != nil {
				w.dl.SetWriteDeadline(time.Now().Add(w.timeout))
				w.armed = true
			}
			return false
		default:
			w.err = err
			return true
		}
		if n == 0 {
			w.err = io.ErrUnexpectedEOF
			return true
		}
		for n > 0 {
			k := min(n, len(w.bufs[0]))
			w.bufs[0] = w.bufs[0][k:]
			n -= k
			if len(w.bufs[0]) == 0 {
				w.bufs = w.bufs[1:]
			}
		}
	}
}
