package hsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Handler is told about accesses to files not ignored. Pre is called before
// an access of [off, off+n) (a read or a write, not yet known) and may do
// I/O on the file through the normal path before the access goes on; Read
// and Wrote then say which it was, for the thread tid. Pre may instead
// refuse the access: a non-zero errno fails it with that error (EIO,
// EPERM, ENOSPC or EDQUOT: the kernel's FAN_DENY_ERRNO takes no other), and
// neither Read nor Wrote follows. Calls are made one at a time, from the
// event loop or from Drain.
type Handler interface {
	Pre(ino uint64, tid int32, off, n uint64) unix.Errno
	Read(ino uint64, tid int32)
	Wrote(ino uint64, tid int32)
}

const mask = unix.FAN_PRE_ACCESS | unix.FAN_ACCESS_PERM | unix.FAN_MODIFY

// Watcher is one cache directory's watch.
type Watcher struct {
	dir  string // the cache directory (normal path)
	tree int    // the detached copy of its mount, rooted at dir
	fan  int    // the fanotify group (non-blocking)
	stop int    // eventfd that stops the loop
	h    Handler

	mu   sync.Mutex // serializes reading and handling events (loop and Drain)
	buf  []byte     // guarded by mu
	done chan struct{}
}

// ErrUnsupported: the kernel (or the process's privileges) lacks what the
// watch needs; the caller goes without passthrough writes.
var ErrUnsupported = errors.New("hsm: pre-content fanotify unavailable")

// Open watches dir, a directory of a disk file system, for h.
func Open(dir string, h Handler) (*Watcher, error) {
	tree, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("%w: open_tree %s: %v", ErrUnsupported, dir, err)
	}
	w := &Watcher{dir: dir, tree: tree, fan: -1, stop: -1, h: h, buf: make([]byte, 64<<10), done: make(chan struct{})}
	fail := func(what string, err error) (*Watcher, error) {
		w.closeFDs()
		return nil, fmt.Errorf("%w: %s: %v", ErrUnsupported, what, err)
	}
	if w.fan, err = unix.FanotifyInit(unix.FAN_CLASS_PRE_CONTENT|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK|unix.FAN_REPORT_TID,
		unix.O_RDONLY|unix.O_LARGEFILE|unix.O_CLOEXEC); err != nil {
		return fail("fanotify_init", err)
	}
	// A NULL path would name the tree fd itself, which fanotify refuses (it
	// is an O_PATH descriptor); "." relative to it is the same mount.
	if err := unix.FanotifyMark(w.fan, unix.FAN_MARK_ADD|unix.FAN_MARK_MOUNT, mask, tree, "."); err != nil {
		return fail("fanotify_mark mount", err)
	}
	if w.stop, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return fail("eventfd", err)
	}
	go w.loop()
	return w, nil
}

// OpenFile opens path (a file under the watched directory, by its normal
// path) through the watched mount: the descriptor to hand to the kernel.
func (w *Watcher) OpenFile(path string, flags int) (*os.File, error) {
	rel, err := filepath.Rel(w.dir, path)
	if err != nil || !filepath.IsLocal(rel) {
		return nil, fmt.Errorf("hsm: %s is not under %s", path, w.dir)
	}
	fd, err := unix.Openat(w.tree, rel, flags|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("hsm: open %s: %w", rel, err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// Ignore silences the events of f's file (it is this client's alone);
// Watch makes it report again, descriptors opened before included. The
// mark holds the file's inode: Watch it before the last descriptor goes.
func (w *Watcher) Ignore(f *os.File) error {
	return w.ignoreMark(unix.FAN_MARK_ADD|unix.FAN_MARK_IGNORE|unix.FAN_MARK_IGNORED_SURV_MODIFY, f)
}

// Watch ends an Ignore (nothing if there is none).
func (w *Watcher) Watch(f *os.File) error {
	err := w.ignoreMark(unix.FAN_MARK_REMOVE|unix.FAN_MARK_IGNORE, f)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}

func (w *Watcher) ignoreMark(flags uint, f *os.File) error {
	// An empty path marks the object of the descriptor itself.
	if err := unix.FanotifyMark(w.fan, flags, mask, int(f.Fd()), ""); err != nil {
		return fmt.Errorf("hsm: ignore mark %s: %w", f.Name(), err)
	}
	return nil
}

// Drain handles every event queued now: an access that returned to its
// application before the call has been told to the handler when it returns.
func (w *Watcher) Drain() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.readAll()
}

// Close stops the loop and the watch; descriptors opened through OpenFile
// stay usable (and stop reporting).
func (w *Watcher) Close() error {
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	unix.Write(w.stop, one[:])
	<-w.done
	w.closeFDs()
	return nil
}

func (w *Watcher) closeFDs() {
	for _, fd := range []*int{&w.fan, &w.stop, &w.tree} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}

func (w *Watcher) loop() {
	defer close(w.done)
	fds := []unix.PollFd{{Fd: int32(w.fan), Events: unix.POLLIN}, {Fd: int32(w.stop), Events: unix.POLLIN}}
	for {
		fds[0].Revents, fds[1].Revents = 0, 0
		if _, err := unix.Poll(fds, -1); err != nil && err != unix.EINTR {
			return
		}
		if fds[1].Revents != 0 {
			return
		}
		w.mu.Lock()
		err := w.readAll()
		w.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// readAll reads and handles events until none is queued. Called with mu held.
func (w *Watcher) readAll() error {
	for {
		n, err := unix.Read(w.fan, w.buf)
		if err == unix.EAGAIN || err == unix.EINTR {
			return nil
		}
		if err != nil {
			return fmt.Errorf("hsm: read events: %w", err)
		}
		for off := 0; off+unix.FAN_EVENT_METADATA_LEN <= n; {
			m := (*unix.FanotifyEventMetadata)(unsafe.Pointer(&w.buf[off]))
			if m.Event_len < unix.FAN_EVENT_METADATA_LEN || off+int(m.Event_len) > n {
				break
			}
			w.handle(m, w.buf[off+int(m.Metadata_len):off+int(m.Event_len)])
			off += int(m.Event_len)
		}
	}
}

// handle tells the handler about one event and answers a permission event
// (allowed unless the handler's Pre refused it: the handler acts before the
// answer).
func (w *Watcher) handle(m *unix.FanotifyEventMetadata, info []byte) {
	if m.Fd < 0 {
		return // FAN_NOFD: a queue overflow (the caller would have to rescan)
	}
	fd := int(m.Fd)
	defer unix.Close(fd)
	var deny unix.Errno
	var st unix.Stat_t
	if unix.Fstat(fd, &st) == nil {
		switch {
		case m.Mask&unix.FAN_PRE_ACCESS != 0:
			var o, c uint64
			for len(info) >= 4 {
				typ, l := info[0], int(binary.NativeEndian.Uint16(info[2:]))
				if l < 4 || l > len(info) {
					break
				}
				if typ == unix.FAN_EVENT_INFO_TYPE_RANGE && l >= 24 {
					o, c = binary.NativeEndian.Uint64(info[8:]), binary.NativeEndian.Uint64(info[16:])
				}
				info = info[l:]
			}
			deny = w.h.Pre(st.Ino, m.Pid, o, c)
		case m.Mask&unix.FAN_ACCESS_PERM != 0:
			w.h.Read(st.Ino, m.Pid)
		case m.Mask&unix.FAN_MODIFY != 0:
			w.h.Wrote(st.Ino, m.Pid)
		}
	}
	if m.Mask&(unix.FAN_PRE_ACCESS|unix.FAN_ACCESS_PERM) != 0 {
		r := unix.FanotifyResponse{Fd: m.Fd, Response: unix.FAN_ALLOW}
		if deny != 0 {
			// FAN_DENY_ERRNO (Linux 6.14+, pre-content groups).
			r.Response = unix.FAN_DENY | (uint32(deny)&unix.FAN_ERRNO_MASK)<<unix.FAN_ERRNO_SHIFT
		}
		unix.Write(w.fan, (*[unsafe.Sizeof(r)]byte)(unsafe.Pointer(&r))[:])
	}
}
