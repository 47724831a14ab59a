package store

import (
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"snfs/rawsys"
)

// Descriptors open for writing are given up once their file is idle. The
// store writes a file through a read-write descriptor (OpenIO; a file it
// created, through the descriptor its creation returned), cached with the
// object. Kept open, it holds the file's write access: exec(2) of the file on
// the server's machine fails with ETXTBSY ("Text file busy") for as long as
// the descriptor stays cached, so a program built by a client could not be
// run on the server. As Linux's nfsd does with its file cache, a writable
// descriptor no operation has used for writeIdle (up to twice that: a sweep
// runs writeIdle after the release that armed it) is flushed (fdatasync) and
// closed, and a created file's descriptor becomes an O_PATH one; the next
// operation that needs I/O opens it again (OpenIO). (While the program
// runs, OpenIO's O_RDWR is refused with ETXTBSY and it falls back to a
// read-only descriptor: a WRITE fails EROFS, as a local write would fail;
// the next WRITE after the program ended opens it for writing again:
// writeIO, io.go.)
//
// An entry evicted from the cache (beyond its bound) with a writable
// descriptor is flushed and closed the same way, in the background.
//
// The flush comes first because a write-back error is reported once per open
// file: data written UNSTABLE and not yet committed whose write-back failed
// would otherwise be lost with the descriptor, and a later COMMIT through a
// new one would succeed. A failed flush goes to OnFlushFail's function (the
// server changes its write verifier, so that clients write their
// uncommitted data again, as a failed COMMIT does). Without one, descriptors
// are kept: nobody would learn of the error.

// writeIdle is how long a writable descriptor stays open unused.
const writeIdle = 2 * time.Second

// idleWrites is the store's sweep of idle writable descriptors.
type idleWrites struct {
	flushFail atomic.Pointer[func(error)]
	armed     atomic.Bool // a sweep is due (its timer or job pending)
}

// OnFlushFail has fn told of a flush that failed while an idle file's
// writable descriptor was given up; until it is set (the server sets it),
// writable descriptors stay open.
func (s *Store) OnFlushFail(fn func(error)) {
	if fn == nil {
		s.idle.flushFail.Store(nil)
		return
	}
	s.idle.flushFail.Store(&fn)
	s.armIdleWrites()
}

// writableLocked reports whether e holds a descriptor open for writing.
// fdCache.mu held, and no reference (or only the caller's) to e.
func (e *entry) writableLocked() bool { return e.io >= 0 && e.ioRW }

// armIdleWrites has a sweep run writeIdle from now, unless one is due.
func (s *Store) armIdleWrites() {
	if s.idle.flushFail.Load() == nil || s.idle.armed.Load() || !s.idle.armed.CompareAndSwap(false, true) {
		return
	}
	time.AfterFunc(writeIdle, func() {
		if !s.bg.later(s.sweepIdleWrites) {
			s.idle.armed.Store(false) // stopped, or a full queue: the next release arms it again
		}
	})
}

// sweepIdleWrites gives up the writable descriptors idle for writeIdle, and
// arms the next sweep while others are left. On the background goroutine.
func (s *Store) sweepIdleWrites() {
	s.idle.armed.Store(false)
	fail := s.idle.flushFail.Load()
	if fail == nil {
		return
	}
	idle, left := s.cache.idleWriters(time.Now().Add(-writeIdle))
	for _, w := range idle {
		s.dropWrite(w.e, w.uses, *fail)
		s.cache.release(w.e)
	}
	if left {
		s.armIdleWrites()
	}
}

// closeWriterLater closes e, evicted from the cache with a descriptor open
// for writing, after flushing it, on the background goroutine (or now, when
// its queue is full): the flush's error goes to OnFlushFail's function, as
// an idle one's. Without one, e is closed as any evicted entry.
func (s *Store) closeWriterLater(e *entry) {
	flushClose := func() {
		if fail := s.idle.flushFail.Load(); fail != nil {
			if err := unix.Fdatasync(e.io); err != nil {
				(*fail)(opErr("fsync", err))
			}
		}
		e.close()
	}
	if !s.bg.later(flushClose) {
		flushClose()
	}
}

// idleWriter is an entry idleWriters found, and its count of references
// taken then.
type idleWriter struct {
	e    *entry
	uses uint64
}

// idleWriters returns the entries holding a descriptor open for writing
// that no one has used since before, each with a reference held, and
// whether other such entries are left (used since).
func (c *fdCache) idleWriters(before time.Time) (idle []idleWriter, left bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.entries {
		if e.refs != 0 || e.gone || !e.writableLocked() {
			continue
		}
		if e.used.After(before) {
			left = true
			continue
		}
		e.refs++
		idle = append(idle, idleWriter{e, e.uses})
	}
	return idle, left
}

// dropWrite flushes e's writable descriptor and closes it, unless someone
// took e since idleWriters counted uses (the caller holds one reference).
func (s *Store) dropWrite(e *entry, uses uint64, fail func(error)) {
	c := s.cache
	c.mu.Lock()
	if e.uses != uses {
		c.mu.Unlock()
		return
	}
	io := e.io // no other holder since: stable until someone takes e
	c.mu.Unlock()
	if err := unix.Fdatasync(io); err != nil {
		fail(opErr("fsync", err))
	}
	c.mu.Lock()
	// Taken meanwhile (even if given back): a write after the flush may be
	// in the page cache, its error for this descriptor to report.
	if e.refs != 1 || e.uses != uses || e.gone || !e.writableLocked() {
		c.mu.Unlock()
		return
	}
	e.ioMu.Lock()
	if e.fd == e.io {
		// Created here: the object's own descriptor is the writable one.
		path, err := rawsys.Open(procFD(e.fd), unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			e.ioMu.Unlock()
			c.mu.Unlock()
			return
		}
		e.fd = path
	}
	e.io, e.ioRW = -1, false
	e.ioMu.Unlock()
	c.mu.Unlock()
	rawsys.Close(io)
}
