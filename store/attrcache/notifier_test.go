package attrcache_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"snfs/store/attrcache"
)

// recorder is a Handler that remembers what it is told.
type recorder struct {
	mu      sync.Mutex
	changed []unix.FileHandle
	self    []bool
	lost    int
	stopped int
}

func (r *recorder) Changed(typ uint32, h []byte, self bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changed = append(r.changed, unix.NewFileHandle(int32(typ), bytes.Clone(h)))
	r.self = append(r.self, self)
}

// sawBy reports whether the object with handle fh was reported changed by
// this process (self) and by another, and forgets what was reported so far.
func (r *recorder) sawBy(fh unix.FileHandle) (self, other bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, c := range r.changed {
		if c.Type() == fh.Type() && bytes.Equal(c.Bytes(), fh.Bytes()) {
			if r.self[i] {
				self = true
			} else {
				other = true
			}
		}
	}
	r.changed, r.self = nil, nil
	return self, other
}

func (r *recorder) Lost() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lost++
}

func (r *recorder) Stopped() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped++
}

// saw reports whether the object with handle fh was reported changed, and forgets
// what was reported so far.
func (r *recorder) saw(fh unix.FileHandle) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	found := false
	for _, c := range r.changed {
		if c.Type() == fh.Type() && bytes.Equal(c.Bytes(), fh.Bytes()) {
			found = true
		}
	}
	r.changed, r.self = nil, nil
	return found
}

// TestNotifierReportsChanges: a change made by any process to an object on a
// watched file system is reported, by the object's kernel handle, to a Drain
// that begins after it; after Close nothing more is reported.
func TestNotifierReportsChanges(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (fanotify)")
	}
	rec := &recorder{}
	n, err := attrcache.StartNotifier(rec)
	if err != nil {
		t.Skipf("no fanotify here: %v", err)
	}
	defer n.Close()
	// /var/tmp: a disk file system (t.TempDir may be a tmpfs without handles).
	dir, err := os.MkdirTemp("/var/tmp", "snfs-notify-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := n.Watch(dir); err != nil {
		t.Skipf("cannot watch %s: %v", dir, err)
	}
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fh, _, err := unix.NameToHandleAt(unix.AT_FDCWD, p, 0)
	if err != nil {
		t.Fatal(err)
	}
	dh, _, err := unix.NameToHandleAt(unix.AT_FDCWD, dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	n.Drain()
	rec.saw(fh) // forget the creation

	for _, c := range []struct {
		what   string
		change func() error
		obj    unix.FileHandle
	}{
		{"write", func() error { return os.WriteFile(p, []byte("data"), 0o644) }, fh},
		{"chmod", func() error { return os.Chmod(p, 0o600) }, fh},
		{"new entry", func() error { return os.WriteFile(p+"2", nil, 0o644) }, dh},
		{"rename in the directory", func() error { return os.Rename(p+"2", p+"3") }, dh},
	} {
		if err := c.change(); err != nil {
			t.Fatal(err)
		}
		n.Drain()
		if !rec.saw(c.obj) {
			t.Errorf("%s: the next Drain did not report the object", c.what)
		}
	}

	n.Close()
	rec.mu.Lock()
	stopped := rec.stopped
	rec.mu.Unlock()
	if stopped == 0 {
		t.Fatal("Close did not report Stopped")
	}
	if err := os.WriteFile(p, []byte("more"), 0o644); err != nil {
		t.Fatal(err)
	}
	n.Drain()
	if rec.saw(fh) {
		t.Fatal("a change after Close was reported")
	}
}

// TestNotifierTellsOwnChanges: a change made by this process is reported as
// its own, one made by another process (a child) as someone else's.
func TestNotifierTellsOwnChanges(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (fanotify)")
	}
	rec := &recorder{}
	n, err := attrcache.StartNotifier(rec)
	if err != nil {
		t.Skipf("no fanotify here: %v", err)
	}
	defer n.Close()
	dir, err := os.MkdirTemp("/var/tmp", "snfs-notify-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := n.Watch(dir); err != nil {
		t.Skipf("cannot watch %s: %v", dir, err)
	}
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fh, _, err := unix.NameToHandleAt(unix.AT_FDCWD, p, 0)
	if err != nil {
		t.Fatal(err)
	}
	n.Drain()
	rec.sawBy(fh)
	if err := os.WriteFile(p, []byte("ours"), 0o644); err != nil {
		t.Fatal(err)
	}
	n.Drain()
	if self, other := rec.sawBy(fh); !self || other {
		t.Errorf("a write by this process: reported as ours %v, as another's %v; want ours only", self, other)
	}
	if out, err := exec.Command("sh", "-c", "echo theirs > "+p).CombinedOutput(); err != nil {
		t.Fatalf("sh: %v: %s", err, out)
	}
	n.Drain()
	if self, other := rec.sawBy(fh); self || !other {
		t.Errorf("a write by a child process: reported as ours %v, as another's %v; want another's only", self, other)
	}
}
