package attrcache

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"snfs/rawsys"
)

// Notifier reads fanotify(7) events for the file systems it watches and reports
// the objects they name to its Handler (doc.go says how and why). Safe for
// concurrent use.
type Notifier struct {
	fd   int // the fanotify group (non-blocking); -1 once closed
	h    Handler
	self int32 // this process's id: its own changes are reported as such

	mu  sync.Mutex // held by a drain: one that returns has applied every event queued before it began
	buf []byte     // guarded by mu

	closing sync.Once
	stop    chan struct{}
	done    chan struct{}
}

// Handler is told what a Notifier learns. Its methods are called with the
// notifier's drain lock held, by Drain's caller or the notifier's own goroutine,
// so they must be quick and must not call the notifier.
type Handler interface {
	// Changed reports an object that may have changed, by its kernel handle:
	// name_to_handle_at(2)'s handle type and bytes (for a change to a
	// directory's entries, the directory's). handle is valid only during the call.
	// self is true when the change was made by this process (the event's
	// process id is this one's): package store drops its own changes
	// synchronously, and the server must not take its own writes for those
	// of a local process on the server machine.
	Changed(handleType uint32, handle []byte, self bool)
	// Lost reports that events may have been lost (a queue overflow, a record
	// that names nothing or cannot be read): anything may have changed.
	Lost()
	// Stopped reports that no more events will come: Close, or a read that
	// failed. It may be called more than once.
	Stopped()
}

// notifyMask is every change that can make a cached entry wrong: contents and
// size (MODIFY), attributes and link counts (ATTRIB), a directory's entries and
// so its size and times (CREATE, DELETE, MOVED_*), and the object itself going or
// moving (DELETE_SELF, MOVE_SELF); ONDIR for directories too.
const notifyMask = unix.FAN_MODIFY | unix.FAN_ATTRIB | unix.FAN_CREATE | unix.FAN_DELETE |
	unix.FAN_MOVED_FROM | unix.FAN_MOVED_TO | unix.FAN_DELETE_SELF | unix.FAN_MOVE_SELF | unix.FAN_ONDIR

// notifyDrain is how often the background drain empties the queue.
const notifyDrain = 100 * time.Millisecond

// StartNotifier makes a fanotify group that reports to h, and starts its
// background drain. It fails without CAP_SYS_ADMIN or fanotify.
func StartNotifier(h Handler) (*Notifier, error) {
	fd, err := unix.FanotifyInit(unix.FAN_CLASS_NOTIF|unix.FAN_REPORT_FID|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK, unix.O_RDONLY)
	if err != nil {
		return nil, fmt.Errorf("attrcache: fanotify: %w", err)
	}
	n := &Notifier{fd: fd, h: h, self: int32(os.Getpid()), buf: make([]byte, 64<<10),
		stop: make(chan struct{}), done: make(chan struct{})}
	go n.run()
	return n, nil
}

// Watch marks the whole file system holding path. It fails on a file system
// that does not report handles.
func (n *Notifier) Watch(path string) error {
	if err := unix.FanotifyMark(n.fd, unix.FAN_MARK_ADD|unix.FAN_MARK_FILESYSTEM, notifyMask, unix.AT_FDCWD, path); err != nil {
		return fmt.Errorf("attrcache: fanotify mark %s: %w", path, err)
	}
	return nil
}

// Close stops the background drain and reports Stopped; a later Drain does
// nothing.
func (n *Notifier) Close() {
	n.closing.Do(func() { close(n.stop) })
	<-n.done
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.fd >= 0 {
		unix.Close(n.fd)
		n.fd = -1
	}
	n.h.Stopped()
}

func (n *Notifier) run() {
	defer close(n.done)
	t := time.NewTicker(notifyDrain)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
			n.Drain()
		}
	}
}

// Drain reports every event queued now: when it returns, the handler has been
// told of every change completed before it began. A failed read stops the
// notifier for good (Stopped): no more events can be trusted to come.
func (n *Notifier) Drain() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for n.fd >= 0 {
		// Raw: the descriptor is non-blocking, so the read never waits.
		k, e := rawsys.Read(n.fd, n.buf)
		switch e {
		case nil:
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return
		default:
			unix.Close(n.fd)
			n.fd = -1
			n.h.Stopped()
			slog.Warn("attrcache: fanotify read failed; attribute cache off", "err", e)
			return
		}
		if k == 0 {
			return
		}
		if !parseEvents(n.buf[:k], func(typ uint32, h []byte, pid int32) { n.h.Changed(typ, h, pid == n.self) }) {
			n.h.Lost()
		}
	}
}

// Layout of struct fanotify_event_metadata and of the FID info record after it.
const (
	eventMetaLen  = 24 // event_len u32, vers u8, reserved u8, metadata_len u16, mask u64, fd s32, pid s32
	infoHeaderLen = 4  // info_type u8, pad u8, len u16
	fsidLen       = 8
	fileHandleLen = 8 // handle_bytes u32, handle_type s32
)

// parseEvents calls changed with the kernel handle (type and bytes, a slice of b)
// of every object the events in b name, and the id of the process that caused
// the event (its thread group's; 0 when it is outside this process's pid
// namespace). It reports false when they cannot be
// trusted to name every change: a queue overflow, an unknown format, or a
// malformed record (which also stops the parse). Bounded: it reads only inside b
// and allocates nothing.
func parseEvents(b []byte, changed func(handleType uint32, handle []byte, pid int32)) bool {
	ne := binary.NativeEndian
	ok := true
	for len(b) > 0 {
		if len(b) < eventMetaLen {
			return false
		}
		evLen := int(ne.Uint32(b[0:]))
		metaLen := int(ne.Uint16(b[6:]))
		if b[4] != unix.FANOTIFY_METADATA_VERSION || evLen < eventMetaLen || evLen > len(b) ||
			metaLen < eventMetaLen || metaLen > evLen {
			return false
		}
		mask := ne.Uint64(b[8:])
		pid := int32(ne.Uint32(b[20:]))
		if mask&unix.FAN_Q_OVERFLOW != 0 {
			ok = false
		}
		found := false
		for info := b[metaLen:evLen]; len(info) > 0; {
			if len(info) < infoHeaderLen {
				return false
			}
			typ, l := info[0], int(ne.Uint16(info[2:]))
			if l < infoHeaderLen || l > len(info) {
				return false
			}
			if typ == unix.FAN_EVENT_INFO_TYPE_FID {
				rec := info[infoHeaderLen:l]
				if len(rec) < fsidLen+fileHandleLen {
					return false
				}
				hb := int(ne.Uint32(rec[fsidLen:]))
				typ := ne.Uint32(rec[fsidLen+4:])
				h := rec[fsidLen+fileHandleLen:]
				if hb > len(h) {
					return false
				}
				found = true
				changed(typ, h[:hb:hb], pid)
			}
			info = info[l:]
		}
		if !found && mask&unix.FAN_Q_OVERFLOW == 0 {
			ok = false // an event that names nothing we can drop
		}
		b = b[evLen:]
	}
	return ok
}
