package store

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"snfs/rawsys"
)

// notifier reads fanotify(7) events for the file systems of the exports and
// drops the attribute cache entries of the objects they name (attrcache.go).
//
// One fanotify group, in FAN_REPORT_FID mode, with one file-system-wide mark
// per exported file system: every event names its object by the same kernel
// handle name_to_handle_at gives (for a change to a directory's entries, the
// directory's), so no descriptor is opened per event. It needs CAP_SYS_ADMIN and a
// file system that supports handles; without either, exports simply go
// uncached.
//
// The queue is drained on demand, not watched: every listing that may be served
// from the cache drains it first (ChildAttrs), so it sees every change completed
// before it began, by any process. The group's descriptor is never registered
// with the Go netpoller or waited on. Most events are the server's own changes
// (which it also drops synchronously), and a waiter on the queue is woken by each
// of them: with the descriptor in epoll, an event woke whichever thread sat in
// epoll_wait. (Draining on demand measured cheaper for the server and for other
// processes on the same file system; docs/measurements.md.)
// A goroutine owned by the Store drains every notifyDrain as well, only to keep
// the kernel's queue short; an overflow drops the whole cache and costs nothing
// else. Close stops it.
type notifier struct {
	fd        int // the fanotify group (non-blocking); -1 once closed
	cache     *attrCache
	forget    func(key string)
	forgetAll func()

	mu  sync.Mutex // held by a drain: one that returns has applied every event queued before it began
	buf []byte     // guarded by mu

	closing sync.Once
	stop    chan struct{}
	done    chan struct{}
}

// notifyMask is every change that can make a cached entry wrong: contents and
// size (MODIFY), attributes and link counts (ATTRIB), a directory's entries and
// so its size and times (CREATE, DELETE, MOVED_*), and the object itself going or
// moving (DELETE_SELF, MOVE_SELF); ONDIR for directories too.
const notifyMask = unix.FAN_MODIFY | unix.FAN_ATTRIB | unix.FAN_CREATE | unix.FAN_DELETE |
	unix.FAN_MOVED_FROM | unix.FAN_MOVED_TO | unix.FAN_DELETE_SELF | unix.FAN_MOVE_SELF | unix.FAN_ONDIR

// notifyDrain is how often the background drain empties the queue.
const notifyDrain = 100 * time.Millisecond

func startNotifier(c *attrCache, forget func(key string), forgetAll func()) (*notifier, error) {
	fd, err := unix.FanotifyInit(unix.FAN_CLASS_NOTIF|unix.FAN_REPORT_FID|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK, unix.O_RDONLY)
	if err != nil {
		return nil, fmt.Errorf("store: fanotify: %w", err)
	}
	n := &notifier{fd: fd, cache: c, forget: forget, forgetAll: forgetAll, buf: make([]byte, 64<<10),
		stop: make(chan struct{}), done: make(chan struct{})}
	go n.run()
	return n, nil
}

// watch marks the file system holding path.
func (n *notifier) watch(path string) error {
	if err := unix.FanotifyMark(n.fd, unix.FAN_MARK_ADD|unix.FAN_MARK_FILESYSTEM, notifyMask, unix.AT_FDCWD, path); err != nil {
		return fmt.Errorf("store: fanotify mark %s: %w", path, err)
	}
	return nil
}

// close stops the background drain and the cache with it.
func (n *notifier) close() {
	n.closing.Do(func() { close(n.stop) })
	<-n.done
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.fd >= 0 {
		unix.Close(n.fd)
		n.fd = -1
	}
	n.cache.stop()
	n.forgetAll()
}

func (n *notifier) run() {
	defer close(n.done)
	t := time.NewTicker(notifyDrain)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
			n.drain()
		}
	}
}

// drain applies every event queued now. A failed read turns the cache off for
// good: no more events can be trusted to come.
func (n *notifier) drain() {
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
			n.cache.stop()
			n.forgetAll()
			slog.Warn("store: fanotify read failed; attribute cache off", "err", e)
			return
		}
		if k == 0 {
			return
		}
		if !parseEvents(n.buf[:k], n.forget) {
			n.forgetAll()
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

// parseEvents calls drop with the kernel handle (kernelKey) of every object the
// events in b name. It reports false when they cannot be trusted to name every
// change: a queue overflow, an unknown format, or a malformed record (which also
// stops the parse). Bounded: it reads only inside b and allocates only the keys.
func parseEvents(b []byte, drop func(key string)) bool {
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
				if hb <= maxKernelFH { // longer ones name nothing this package caches
					key := make([]byte, 4+hb)
					binary.BigEndian.PutUint32(key, typ)
					copy(key[4:], h[:hb])
					drop(string(key))
				}
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
