package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Open gates for lock delegation (docs/protocol.md, "Lock delegation"): a
// fanotify group with FAN_OPEN_PERM marks on chosen files. The kernel holds
// every open of a marked file until this process answers; opens by this
// process itself (the server's own I/O and lock descriptions) are allowed at
// once, and another process's open is handed to the gate's handler, which
// allows it when it is ready (after the file's delegated locks came back to
// the server). A process must open a file before it can lock it, so no
// process on this machine can take a lock on a marked file that the handler
// has not seen coming.
//
// The kernel reports the permission event before the open breaks a lease
// and after it counted the open (i_readcount, i_writecount): a mark placed
// before OpenElsewhere's lease test catches every open the test does not.

// ErrNoOpenGate: fanotify permission events are not available (the server
// is not root, or the kernel lacks them).
var ErrNoOpenGate = errors.New("store: no fanotify open permission events")

// OpenGate holds the opens of marked files (FAN_OPEN_PERM). Its goroutine is
// stopped by Close.
type OpenGate struct {
	s      *Store
	fan    int
	stop   int
	onOpen func(fh []byte, allow func())
	self   int32
	buf    []byte
	done   chan struct{}

	mu         sync.Mutex
	marked     map[devIno]*gateMark // guarded by mu
	markedKeys map[string]int       // by the store's kernel key; guarded by mu
}

type devIno struct{ dev, ino uint64 }

type gateMark struct {
	fh    []byte
	n     *Node // kept resolved while marked
	count int
}

// NewOpenGate starts an open gate: onOpen is told of another process's open
// of a marked file (its handle) and must call allow exactly once, from any
// goroutine, without blocking the caller (the gate's goroutine).
func (s *Store) NewOpenGate(onOpen func(fh []byte, allow func())) (*OpenGate, error) {
	g := &OpenGate{s: s, fan: -1, stop: -1, onOpen: onOpen, self: int32(os.Getpid()), buf: make([]byte, 4096),
		done: make(chan struct{}), marked: map[devIno]*gateMark{}, markedKeys: map[string]int{}}
	var err error
	if g.fan, err = unix.FanotifyInit(unix.FAN_CLASS_CONTENT|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK,
		unix.O_RDONLY|unix.O_LARGEFILE|unix.O_CLOEXEC); err != nil {
		return nil, fmt.Errorf("%w: fanotify_init: %w", ErrNoOpenGate, err)
	}
	if g.stop, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		unix.Close(g.fan)
		return nil, fmt.Errorf("%w: eventfd: %w", ErrNoOpenGate, err)
	}
	s.gated.Add(1)
	s.gate.Store(g)
	go g.loop()
	return g, nil
}

// Mark holds other processes' opens of the regular file fh names from now
// on, until as many Unmarks.
func (g *OpenGate) Mark(fh []byte) error {
	n, err := g.s.Resolve(fh)
	if err != nil {
		return err
	}
	if n.Stat.Mode&unix.S_IFMT != unix.S_IFREG {
		n.Release()
		return fmt.Errorf("store: open gate: %w", unix.EINVAL)
	}
	if err := g.s.OpenIO(n); err != nil {
		n.Release()
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstat(n.io(), &st); err != nil {
		n.Release()
		return fmt.Errorf("store: open gate: fstat: %w", err)
	}
	k := devIno{st.Dev, st.Ino}
	g.mu.Lock()
	defer g.mu.Unlock()
	if m := g.marked[k]; m != nil {
		m.count++
		n.Release()
		return nil
	}
	if err := unix.FanotifyMark(g.fan, unix.FAN_MARK_ADD, unix.FAN_OPEN_PERM, n.io(), ""); err != nil {
		n.Release()
		return fmt.Errorf("%w: fanotify_mark: %w", ErrNoOpenGate, err)
	}
	g.marked[k] = &gateMark{fh: append([]byte(nil), fh...), n: n, count: 1}
	g.markedKeys[n.Key()]++
	// A kernel lease on the file (the consistency protocol's) would be broken
	// by the gate's own event descriptors: the gate stands in for it.
	g.s.leases.makeVirtual(n.Key())
	return nil
}

// Unmark ends one Mark of fh.
func (g *OpenGate) Unmark(fh []byte) {
	if broken := g.unmark(fh); broken != nil {
		// Opened elsewhere while the gate stood in for the lease: as a break.
		if fn := g.s.leases.onBreak.Load(); fn != nil {
			(*fn)(broken, true)
		} else {
			g.s.Unlease(broken)
		}
	}
}

func (g *OpenGate) unmark(fh []byte) (broken []byte) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, m := range g.marked {
		if string(m.fh) != string(fh) {
			continue
		}
		if m.count--; m.count > 0 {
			return nil
		}
		key := m.n.Key()
		if g.markedKeys[key]--; g.markedKeys[key] <= 0 {
			delete(g.markedKeys, key)
		}
		b, isBroken := g.s.leases.makeReal(key)
		unix.FanotifyMark(g.fan, unix.FAN_MARK_REMOVE, unix.FAN_OPEN_PERM, m.n.io(), "")
		m.n.Release()
		delete(g.marked, k)
		if isBroken {
			return b
		}
		return nil
	}
	return nil
}

// Close stops the gate: its marks go, and the opens it still holds are
// allowed by the kernel when the group closes.
func (g *OpenGate) Close() {
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	unix.Write(g.stop, one[:])
	<-g.done
	g.mu.Lock()
	for k, m := range g.marked {
		m.n.Release()
		delete(g.marked, k)
	}
	g.mu.Unlock()
	unix.Close(g.fan)
	unix.Close(g.stop)
	g.s.gate.Store(nil)
	g.s.gated.Add(-1)
}

func (g *OpenGate) loop() {
	defer close(g.done)
	fds := []unix.PollFd{{Fd: int32(g.fan), Events: unix.POLLIN}, {Fd: int32(g.stop), Events: unix.POLLIN}}
	for {
		fds[0].Revents, fds[1].Revents = 0, 0
		if _, err := unix.Poll(fds, -1); err != nil && err != unix.EINTR {
			return
		}
		if fds[1].Revents != 0 {
			return
		}
		if err := g.readAll(); err != nil {
			return
		}
	}
}

func (g *OpenGate) readAll() error {
	for {
		n, err := unix.Read(g.fan, g.buf)
		if err == unix.EAGAIN || err == unix.EINTR {
			return nil
		}
		if err != nil {
			return fmt.Errorf("store: open gate: read events: %w", err)
		}
		for off := 0; off+unix.FAN_EVENT_METADATA_LEN <= n; {
			m := *(*unix.FanotifyEventMetadata)(unsafe.Pointer(&g.buf[off]))
			if m.Event_len < unix.FAN_EVENT_METADATA_LEN || off+int(m.Event_len) > n {
				break
			}
			g.handle(m)
			off += int(m.Event_len)
		}
	}
}

// handle answers one FAN_OPEN_PERM event: this process's own open at once,
// another's when the handler allows it.
func (g *OpenGate) handle(m unix.FanotifyEventMetadata) {
	if m.Fd < 0 {
		return // FAN_NOFD: a queue overflow; permission events are not dropped
	}
	if m.Mask&unix.FAN_OPEN_PERM == 0 {
		unix.Close(int(m.Fd))
		return
	}
	var fh []byte
	var key string
	if m.Pid != g.self {
		var st unix.Stat_t
		if unix.Fstat(int(m.Fd), &st) == nil {
			g.mu.Lock()
			if mk := g.marked[devIno{st.Dev, st.Ino}]; mk != nil {
				fh, key = mk.fh, mk.n.Key()
			}
			g.mu.Unlock()
		}
	}
	allow := func() {
		r := unix.FanotifyResponse{Fd: m.Fd, Response: unix.FAN_ALLOW}
		unix.Write(g.fan, (*[unsafe.Sizeof(r)]byte)(unsafe.Pointer(&r))[:])
		unix.Close(int(m.Fd))
	}
	if fh == nil {
		allow()
		return
	}
	var once sync.Once
	g.onOpen(fh, func() {
		once.Do(func() {
			// Then the lease the gate stands in for: the open waits for the
			// clients' write-back as with a kernel lease.
			if !g.s.virtualBreak(key, allow) {
				allow()
			}
		})
	})
}

// OpenElsewhere reports whether the regular file fh names is open other than
// through the store's I/O descriptor of it (by another process, or by this
// one: a lock description): a write lease is granted only to the one open of
// a file, so it is taken and at once released. A lease the store holds and
// that is not being broken says the same.
func (s *Store) OpenElsewhere(fh []byte) (bool, error) {
	n, err := s.Resolve(fh)
	if err != nil {
		return false, err
	}
	defer n.Release()
	if n.Stat.Mode&unix.S_IFMT != unix.S_IFREG {
		return false, fmt.Errorf("store: open elsewhere: %w", unix.EINVAL)
	}
	if err := s.OpenIO(n); err != nil {
		return false, err
	}
	l := &s.leases
	l.mu.Lock()
	defer l.mu.Unlock()
	if ls := l.held[n.Key()]; ls != nil && !ls.virtual {
		return ls.breaking, nil
	}
	fd := uintptr(n.io())
	if _, err := unix.FcntlInt(fd, unix.F_SETSIG, int(leaseSignal)); err != nil {
		return false, fmt.Errorf("store: F_SETSIG: %w", err)
	}
	if _, err := unix.FcntlInt(fd, unix.F_SETLEASE, unix.F_WRLCK); err != nil {
		switch {
		case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EBUSY), errors.Is(err, unix.ETXTBSY):
			return true, nil
		}
		return false, fmt.Errorf("%w: %w", ErrNoLeases, err)
	}
	unix.FcntlInt(fd, unix.F_SETLEASE, unix.F_UNLCK)
	return false, nil
}
