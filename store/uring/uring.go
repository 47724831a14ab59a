package uring

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"snfs/rawsys"
)

// Ring submits flushes to an io_uring and hands each completion to the goroutine
// that waits for it (doc.go says why). Safe for concurrent use.
type Ring struct {
	fd   int
	mem  []byte // the SQ and CQ rings (one mapping: IORING_FEAT_SINGLE_MMAP)
	sqes []byte
	efd  *os.File // eventfd the kernel signals on each completion

	sqHead, sqTail, sqMask, sqArray unsafe.Pointer
	cqHead, cqTail, cqMask, cqes    unsafe.Pointer

	slots chan struct{} // one per request in flight: at most entries, so the CQ never overflows

	mu      sync.Mutex            // guards the SQ tail, next, waiters and closed
	next    uint64                // guarded by mu
	waiters map[uint64]chan int32 // guarded by mu
	closed  bool                  // guarded by mu
	done    chan struct{}         // closed when the reaper has stopped

	inflight sync.WaitGroup // flushes submitted and not yet handed their result
}

const (
	sysIOUringSetup    = 425
	sysIOUringRegister = 427

	ioringOffSQRing      = 0
	ioringOffSQEs        = 0x10000000
	ioringFeatSingleMmap = 1 << 0
	ioringRegisterEvfd   = 4
	ioringOpFsync        = 3
	ioringFsyncDatasync  = 1

	sqeSize = 64
	cqeSize = 16
)

// ioUringParams is struct io_uring_params.
type ioUringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sqOff                                                                  struct {
		head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
		userAddr                                                        uint64
	}
	cqOff struct {
		head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
		userAddr                                                        uint64
	}
}

// New sets up a ring of n entries (a power of two), or fails: without io_uring (an
// old kernel, io_uring_disabled, a seccomp filter) the caller flushes with plain
// system calls.
func New(n uint32) (*Ring, error) {
	var p ioUringParams
	fd, _, e := unix.Syscall(sysIOUringSetup, uintptr(n), uintptr(unsafe.Pointer(&p)), 0)
	if e != 0 {
		return nil, fmt.Errorf("uring: io_uring_setup: %w", e)
	}
	r := &Ring{fd: int(fd), waiters: map[uint64]chan int32{}, done: make(chan struct{})}
	fail := func(what string, err error) (*Ring, error) {
		r.unmap()
		unix.Close(r.fd)
		return nil, fmt.Errorf("uring: io_uring %s: %w", what, err)
	}
	if p.features&ioringFeatSingleMmap == 0 {
		return fail("setup", errors.New("kernel lacks IORING_FEAT_SINGLE_MMAP"))
	}
	size := max(int(p.sqOff.array)+int(p.sqEntries)*4, int(p.cqOff.cqes)+int(p.cqEntries)*cqeSize)
	mem, err := unix.Mmap(r.fd, ioringOffSQRing, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fail("mmap", err)
	}
	r.mem = mem
	sqes, err := unix.Mmap(r.fd, ioringOffSQEs, int(p.sqEntries)*sqeSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fail("mmap", err)
	}
	r.sqes = sqes
	at := func(off uint32) unsafe.Pointer { return unsafe.Pointer(&r.mem[off]) }
	r.sqHead, r.sqTail, r.sqMask, r.sqArray = at(p.sqOff.head), at(p.sqOff.tail), at(p.sqOff.ringMask), at(p.sqOff.array)
	r.cqHead, r.cqTail, r.cqMask, r.cqes = at(p.cqOff.head), at(p.cqOff.tail), at(p.cqOff.ringMask), at(p.cqOff.cqes)
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return fail("eventfd", err)
	}
	efdArg := int32(efd)
	if _, _, e := unix.Syscall6(sysIOUringRegister, uintptr(r.fd), ioringRegisterEvfd, uintptr(unsafe.Pointer(&efdArg)), 1, 0, 0); e != 0 {
		unix.Close(efd)
		return fail("register eventfd", e)
	}
	r.efd = os.NewFile(uintptr(efd), "io_uring-eventfd")
	r.slots = make(chan struct{}, min(p.sqEntries, p.cqEntries))
	go r.reap()
	return r, nil
}

func (r *Ring) unmap() {
	if r.mem != nil {
		unix.Munmap(r.mem)
	}
	if r.sqes != nil {
		unix.Munmap(r.sqes)
	}
}

// ErrNotFlushed reports a flush the ring did not do (closed, busy, or cancelled
// with its thread): the caller flushes directly instead.
var ErrNotFlushed = errors.New("uring: io_uring did not flush")

// Fsync flushes fd (fdatasync when dataOnly) through the ring, returning the
// system call's error, or ErrNotFlushed when the ring did not flush it.
func (r *Ring) Fsync(fd int, dataOnly bool) error {
	r.slots <- struct{}{}
	defer func() { <-r.slots }()
	ch := make(chan int32, 1)
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return ErrNotFlushed
	}
	r.inflight.Add(1)
	defer r.inflight.Done()
	id := r.next
	r.next++
	r.waiters[id] = ch
	tail := atomic.LoadUint32((*uint32)(r.sqTail))
	idx := tail & *(*uint32)(r.sqMask)
	sqe := r.sqes[idx*sqeSize : (idx+1)*sqeSize]
	clear(sqe)
	sqe[0] = ioringOpFsync
	*(*int32)(unsafe.Pointer(&sqe[4])) = int32(fd)
	if dataOnly {
		*(*uint32)(unsafe.Pointer(&sqe[28])) = ioringFsyncDatasync
	}
	*(*uint64)(unsafe.Pointer(&sqe[32])) = id
	*(*uint32)(unsafe.Add(r.sqArray, uintptr(idx)*4)) = idx
	atomic.StoreUint32((*uint32)(r.sqTail), tail+1) // publishes the entry
	// Raw (rawsys): submission does not wait; io_uring hands a file fsync to its
	// worker threads.
	if _, err := rawsys.IoUringSubmit(r.fd, 1); err != nil {
		// Not consumed: take it back (the kernel consumes entries only in
		// io_uring_enter, which holds no other submitter while we hold mu).
		if atomic.LoadUint32((*uint32)(r.sqHead)) == tail {
			atomic.StoreUint32((*uint32)(r.sqTail), tail)
			delete(r.waiters, id)
			r.mu.Unlock()
			return ErrNotFlushed
		}
	}
	r.mu.Unlock()
	if res := <-ch; res < 0 {
		if e := unix.Errno(-res); e != unix.ECANCELED && e != unix.EINTR {
			return e
		}
		return ErrNotFlushed
	}
	return nil
}

// reap hands completions to their waiters until the ring closes.
func (r *Ring) reap() {
	defer close(r.done)
	rc, err := r.efd.SyscallConn()
	if err != nil {
		r.failAll()
		return
	}
	var b [8]byte
	var rerr error
	read := func(fd uintptr) bool {
		// A raw, non-blocking read (rawsys); on EAGAIN, park on the netpoller.
		for {
			_, rerr = rawsys.Read(int(fd), b[:])
			if rerr != unix.EINTR {
				return rerr != unix.EAGAIN
			}
		}
	}
	for {
		if err := rc.Read(read); err != nil || rerr != nil { // closed (or broken)
			r.failAll()
			return
		}
		r.drainCQ()
	}
}

func (r *Ring) drainCQ() {
	head := atomic.LoadUint32((*uint32)(r.cqHead))
	tail := atomic.LoadUint32((*uint32)(r.cqTail)) // acquires the entries before it
	mask := *(*uint32)(r.cqMask)
	r.mu.Lock()
	for ; head != tail; head++ {
		cqe := unsafe.Add(r.cqes, uintptr(head&mask)*cqeSize)
		id, res := *(*uint64)(cqe), *(*int32)(unsafe.Add(cqe, 8))
		if ch := r.waiters[id]; ch != nil {
			delete(r.waiters, id)
			ch <- res
		}
	}
	r.mu.Unlock()
	atomic.StoreUint32((*uint32)(r.cqHead), head) // frees the entries
}

// failAll ends every wait with ECANCELED: the caller then flushes directly.
func (r *Ring) failAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for id, ch := range r.waiters {
		delete(r.waiters, id)
		ch <- -int32(unix.ECANCELED)
	}
}

// Close stops the reaper once every flush in flight has completed, then frees
// the ring. Later flushes return ErrNotFlushed.
func (r *Ring) Close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.inflight.Wait()
	r.efd.Close()
	<-r.done
	unix.Close(r.fd)
	r.unmap()
}
