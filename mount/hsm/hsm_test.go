package hsm

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

type rec struct {
	mu   sync.Mutex
	log  []string
	pre  [][2]uint64
	deny unix.Errno // Pre's answer
}

func (r *rec) Pre(ino uint64, tid int32, off, n uint64) unix.Errno {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, "pre")
	r.pre = append(r.pre, [2]uint64{off, n})
	return r.deny
}
func (r *rec) Read(ino uint64, tid int32)  { r.add("read") }
func (r *rec) Wrote(ino uint64, tid int32) { r.add("wrote") }
func (r *rec) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, s)
}
func (r *rec) take() ([]string, [][2]uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l, p := r.log, r.pre
	r.log, r.pre = nil, nil
	return l, p
}

// TestWatcher: a file opened through the watched mount reports nothing
// while ignored; once watched, the same descriptor's write is a pre event
// with its (page) range and then "wrote", a read a pre event and then
// "read"; the cache directory's own I/O through the normal path reports
// nothing.
func TestWatcher(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (fanotify pre-content events)")
	}
	dir, err := os.MkdirTemp("/var/tmp", "hsm-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "f"), make([]byte, 64<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &rec{}
	w, err := Open(dir, r)
	if errors.Is(err, ErrUnsupported) {
		t.Skipf("kernel: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	f, err := w.OpenFile(filepath.Join(dir, "f"), syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := w.Ignore(f); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 100)
	if _, err := f.WriteAt([]byte("ignored"), 0); err != nil {
		t.Fatal(err)
	}
	f.ReadAt(buf, 0)
	w.Drain()
	if l, _ := r.take(); len(l) != 0 {
		t.Fatalf("events while ignored: %v", l)
	}

	if err := w.Watch(f); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("hello"), 8192+10); err != nil {
		t.Fatal(err)
	}
	w.Drain()
	l, p := r.take()
	if len(l) != 2 || l[0] != "pre" || l[1] != "wrote" || p[0][0] > 8192+10 || p[0][0]+p[0][1] < 8192+15 {
		t.Fatalf("write: events %v ranges %v; want pre covering [8202,8207) then wrote", l, p)
	}
	f.ReadAt(buf, 20000)
	w.Drain()
	if l, p = r.take(); len(l) != 2 || l[0] != "pre" || l[1] != "read" || p[0][0] > 20000 || p[0][0]+p[0][1] < 20100 {
		t.Fatalf("read: events %v ranges %v; want pre covering [20000,20100) then read", l, p)
	}
	// The cache's own I/O goes through the normal path: silent.
	g, err := os.OpenFile(filepath.Join(dir, "f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	g.WriteAt([]byte("own"), 0)
	g.ReadAt(buf, 0)
	g.Close()
	w.Drain()
	if l, _ := r.take(); len(l) != 0 {
		t.Fatalf("events for I/O through the normal path: %v", l)
	}
	if err := w.Watch(f); err != nil {
		t.Fatalf("a second Watch: %v", err)
	}
	if _, err := w.OpenFile("/etc/passwd", syscall.O_RDONLY); err == nil {
		t.Fatal("OpenFile of a path outside the directory worked")
	}

	// A refused access fails with Pre's errno, and is neither a read nor a
	// write; the next one allowed goes on.
	r.mu.Lock()
	r.deny = unix.EIO
	r.mu.Unlock()
	if _, err := f.ReadAt(buf, 0); !errors.Is(err, unix.EIO) {
		t.Fatalf("a refused read: %v, want EIO", err)
	}
	if _, err := f.WriteAt([]byte("refused"), 0); !errors.Is(err, unix.EIO) {
		t.Fatalf("a refused write: %v, want EIO", err)
	}
	w.Drain()
	if l, _ := r.take(); len(l) != 2 || l[0] != "pre" || l[1] != "pre" {
		t.Fatalf("refused accesses: events %v, want two pre events only", l)
	}
	r.mu.Lock()
	r.deny = 0
	r.mu.Unlock()
	if _, err := f.ReadAt(buf, 0); err != nil || string(buf[:3]) != "own" {
		t.Fatalf("a read after the refusals: %v %q, want the bytes written before them", err, buf[:3])
	}
}
