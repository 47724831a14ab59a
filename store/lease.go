package store

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// File leases (fcntl(2) F_SETLEASE) for the consistency protocol: while a
// client may hold dirty blocks of a file, the server holds a write lease on
// it, as Samba's kernel oplocks and knfsd's delegations do, so that a local
// process opening the file (to read it, or to write it) first waits for the
// client to write its data back. The kernel holds that open for at most
// /proc/sys/fs/lease-break-time and meanwhile tells this process with a
// signal; the caller is told (OnLeaseBreak), has the data written back, and
// releases the lease (Unlease): the local open then proceeds.
//
// The lease is taken on the descriptor the store does all its I/O of the file
// through (the node's I/O descriptor): a write lease is granted only to the
// one open of the file (other processes' and this one's alike), and an open of
// the file by this process itself would break it too. The node is kept
// resolved (its descriptor open) while the lease is held.
//
// The break is reported by a real-time signal (F_SETSIG), which carries no
// descriptor through os/signal: each signal makes the owner goroutine ask
// every lease for its state (F_GETLEASE reports the type a lease is being
// broken to). Close releases every lease before it stops listening: with no
// lease left, nothing sends the signal.

// leaseSignal is the signal lease breaks are reported with: a real-time one
// (queued, not merged with other uses of SIGIO), above those the C library
// and the Go runtime reserve (32 to 34).
const leaseSignal = syscall.Signal(40)

// ErrLeaseHeld: another open of the file (by another process, or an
// execution) keeps a lease from being taken.
var ErrLeaseHeld = errors.New("store: the file is open elsewhere: no lease")

// ErrNoLeases: the file system does not support leases.
var ErrNoLeases = errors.New("store: the file system does not support leases")

type leases struct {
	mu   sync.Mutex
	held map[string]*lease // by kernel key; guarded by mu

	onBreak atomic.Pointer[func(fh []byte, write bool)]
	sig     chan os.Signal
	stop    chan struct{}
	done    chan struct{}
}

type lease struct {
	n        *Node // kept resolved: its I/O descriptor holds the lease
	breaking bool  // reported broken, not yet released
	// virtual: the file is held by the open gate (openperm.go), which
	// stands in for the kernel's lease: another process's open is reported
	// as a break, and goes on once released (released, then).
	virtual  bool
	released []func()
}

func (l *leases) start() {
	l.held = map[string]*lease{}
	l.sig = make(chan os.Signal, 1)
	l.stop, l.done = make(chan struct{}), make(chan struct{})
	signal.Notify(l.sig, leaseSignal)
	go l.run()
}

func (l *leases) run() {
	defer close(l.done)
	for {
		select {
		case <-l.stop:
			return
		case <-l.sig:
			l.scan()
		}
	}
}

// scan finds the leases being broken and reports each once.
func (l *leases) scan() {
	type broken struct {
		fh    []byte
		write bool
	}
	var bs []broken
	l.mu.Lock()
	for _, ls := range l.held {
		if ls.breaking || ls.virtual {
			continue
		}
		t, err := unix.FcntlInt(uintptr(ls.n.io()), unix.F_GETLEASE, 0)
		if err != nil || t == unix.F_WRLCK {
			continue
		}
		// F_RDLCK: being broken to a read lease (a local open for reading);
		// F_UNLCK: to none (an open for writing, a truncate).
		ls.breaking = true
		bs = append(bs, broken{ls.n.Handle, t == unix.F_UNLCK})
	}
	l.mu.Unlock()
	if fn := l.onBreak.Load(); fn != nil {
		for _, b := range bs {
			(*fn)(b.fh, b.write)
		}
	}
}

// close releases every lease and stops listening for breaks.
func (l *leases) close() {
	l.mu.Lock()
	for k, ls := range l.held {
		unix.FcntlInt(uintptr(ls.n.io()), unix.F_SETLEASE, unix.F_UNLCK)
		ls.n.Release()
		delete(l.held, k)
	}
	l.mu.Unlock()
	close(l.stop)
	<-l.done
	signal.Stop(l.sig)
}

// OnLeaseBreak has fn told when a local process's open breaks a lease this
// store holds: the file's handle, and whether the open is for writing (or a
// truncate) rather than for reading. fn is called once per lease, from the
// store's lease goroutine; it must not block (the open waits, and other
// breaks behind it), and the lease stays until Unlease.
func (s *Store) OnLeaseBreak(fn func(fh []byte, write bool)) {
	if fn == nil {
		s.leases.onBreak.Store(nil)
		return
	}
	s.leases.onBreak.Store(&fn)
}

// Lease takes a write lease on the regular file fh names, unless held
// already. ErrLeaseHeld: the file is open elsewhere (a local process has it
// open, or it is being executed); ErrNoLeases: its file system has no leases.
// It runs as the server (root: CAP_LEASE), outside As.
func (s *Store) Lease(fh []byte) error {
	n, err := s.Resolve(fh)
	if err != nil {
		return err
	}
	if n.Stat.Mode&unix.S_IFMT != unix.S_IFREG {
		n.Release()
		return fmt.Errorf("store: lease: %w", unix.EINVAL)
	}
	// Opened before the lock: the open may wait for another process's lease
	// to be broken, and a break of ours must not wait behind it (scan).
	if err := s.OpenIO(n); err != nil {
		n.Release()
		return err
	}
	if g := s.gate.Load(); g != nil {
		g.mu.Lock() // the gate's marks do not change meanwhile (order: g.mu, then l.mu)
		defer g.mu.Unlock()
		if g.markedKeys[n.Key()] > 0 {
			l := &s.leases
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.held[n.Key()] != nil {
				n.Release()
				return nil
			}
			l.held[n.Key()] = &lease{n: n, virtual: true}
			return nil
		}
	}
	l := &s.leases
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[n.Key()] != nil {
		n.Release()
		return nil
	}
	fd := uintptr(n.io())
	if _, err := unix.FcntlInt(fd, unix.F_SETSIG, int(leaseSignal)); err != nil {
		n.Release()
		return fmt.Errorf("store: F_SETSIG: %w", err)
	}
	if _, err := unix.FcntlInt(fd, unix.F_SETLEASE, unix.F_WRLCK); err != nil {
		n.Release()
		switch {
		case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EBUSY), errors.Is(err, unix.ETXTBSY):
			return ErrLeaseHeld
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOLCK):
			return fmt.Errorf("%w: %w", ErrNoLeases, err)
		}
		return fmt.Errorf("store: F_SETLEASE: %w", err)
	}
	l.held[n.Key()] = &lease{n: n}
	return nil
}

// Unlease releases the lease on the file fh names, if one is held: an open
// waiting for its break proceeds.
func (s *Store) Unlease(fh []byte) {
	_, key, err := s.ParseHandle(fh)
	if err != nil {
		return
	}
	l := &s.leases
	l.mu.Lock()
	ls := l.held[key]
	delete(l.held, key)
	l.mu.Unlock()
	if ls == nil {
		return
	}
	if !ls.virtual {
		unix.FcntlInt(uintptr(ls.n.io()), unix.F_SETLEASE, unix.F_UNLCK)
	}
	ls.n.Release()
	for _, fn := range ls.released {
		fn()
	}
}

// virtualBreak reports another process's open of a file whose lease is
// virtual (openperm.go) as its break, and has allow called once it is
// released; false: no virtual lease is held on key (allow now).
func (s *Store) virtualBreak(key string, allow func()) bool {
	l := &s.leases
	l.mu.Lock()
	ls := l.held[key]
	if ls == nil || !ls.virtual {
		l.mu.Unlock()
		return false
	}
	ls.released = append(ls.released, allow)
	first := !ls.breaking
	ls.breaking = true
	fh := ls.n.Handle
	l.mu.Unlock()
	if first {
		if fn := l.onBreak.Load(); fn != nil {
			(*fn)(fh, true) // the open's mode is not known: as a write
		} else {
			s.Unlease(fh)
		}
	}
	return true
}

// makeVirtual turns a kernel lease held on key into a virtual one (the file
// is being marked by the open gate). Called with the gate's mu held.
func (l *leases) makeVirtual(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ls := l.held[key]; ls != nil && !ls.virtual && !ls.breaking {
		unix.FcntlInt(uintptr(ls.n.io()), unix.F_SETLEASE, unix.F_UNLCK)
		ls.virtual = true
	}
}

// makeReal turns a virtual lease on key back into a kernel lease (the gate's
// mark is going); it reports false if the file is open elsewhere by now:
// the caller reports a break. Called with the gate's mu held.
func (l *leases) makeReal(key string) (fh []byte, broken bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ls := l.held[key]
	if ls == nil || !ls.virtual || ls.breaking {
		return nil, false
	}
	fd := uintptr(ls.n.io())
	unix.FcntlInt(fd, unix.F_SETSIG, int(leaseSignal))
	if _, err := unix.FcntlInt(fd, unix.F_SETLEASE, unix.F_WRLCK); err == nil {
		ls.virtual = false
		return nil, false
	}
	ls.breaking = true
	return ls.n.Handle, true
}

// Leased reports whether the store holds a lease on the file fh names (for
// tests).
func (s *Store) Leased(fh []byte) bool {
	_, key, err := s.ParseHandle(fh)
	if err != nil {
		return false
	}
	s.leases.mu.Lock()
	defer s.leases.mu.Unlock()
	return s.leases.held[key] != nil
}
