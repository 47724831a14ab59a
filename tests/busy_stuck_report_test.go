package tests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// heldFlushFile is a file whose FLUSH waits until release is closed.
type heldFlushFile struct {
	fs.Inode
	release chan struct{}
	once    sync.Once
	flushes chan struct{} // one send per FLUSH begun
}

var (
	_ fs.NodeOpener  = (*heldFlushFile)(nil)
	_ fs.NodeFlusher = (*heldFlushFile)(nil)
)

func (f *heldFlushFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return nil, fuse.FOPEN_DIRECT_IO, 0
}

func (f *heldFlushFile) Flush(ctx context.Context, fh fs.FileHandle) syscall.Errno {
	select {
	case f.flushes <- struct{}{}:
	default:
	}
	<-f.release
	return 0
}

// mountHeldFlush mounts, served by this process, a directory holding one
// file, f, whose FLUSHes wait until release is called (the test's cleanup
// calls it, then unmounts).
func mountHeldFlush(t *testing.T) (dir string, file *heldFlushFile, release func()) {
	t.Helper()
	file = &heldFlushFile{release: make(chan struct{}), flushes: make(chan struct{}, 1)}
	root := &fs.Inode{}
	dir = t.TempDir()
	// mount(2) itself (root's): no fusermount forked from this process.
	srv, err := fs.Mount(dir, root, &fs.Options{
		MountOptions: fuse.MountOptions{Name: "snfs-stuck-test", DirectMount: true, DirectMountStrict: true},
		OnAdd: func(ctx context.Context) {
			root.AddChild("f", root.NewPersistentInode(ctx, file, fs.StableAttr{Mode: syscall.S_IFREG}), false)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	release = func() { file.once.Do(func() { close(file.release) }) }
	t.Cleanup(func() {
		release()
		srv.Unmount()
	})
	return dir, file, release
}

// TestStuckReportNamesForkedChild: busyHolders' scan of /proc, which does not
// end while a child of this process is stuck in its execve, names what CI's
// busy unmounts could not (stuckReport): the child of
// this process stuck in its execve, closing its copy of a descriptor on a
// FUSE mount whose FLUSH waits, the mount's connection with a request
// waiting, and the FLUSH being served here. The child is real (exec of
// true while a descriptor of a mount served by this process is open).
func TestStuckReportNamesForkedChild(t *testing.T) {
	requireFUSE(t)
	// Serial: a child of this process forked by a parallel test meanwhile
	// would be held by the same FLUSH.
	dir, file, release := mountHeldFlush(t)
	f, err := os.Open(filepath.Join(dir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("true") //snfs:fork-in-process the defect reproduced: a child forked from here
	started := make(chan error, 1)
	go func() { started <- cmd.Run() }()
	// The child's close-on-exec sends the FLUSH of its copy of f.
	select {
	case <-file.flushes:
	case err := <-started:
		t.Fatalf("true ended (%v) without a FLUSH of its copy", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no FLUSH from the forked child within 30 s")
	}
	got := busyHoldersWithin(dir, nil, 5*time.Second, os.Readlink)
	release()
	if err := <-started; err != nil {
		t.Fatalf("true: %v", err)
	}
	f.Close()
	pid := strconv.Itoa(cmd.Process.Pid)
	for _, want := range []string{
		"(the scan of /proc did not end within 5s, at /proc/" + pid + ": a process stuck?)",
		"child " + pid + " of this process not exec'd yet",
		"(mounted on " + dir + "): 1 requests waiting",
		"a FLUSH being served:",
		"heldFlushFile).Flush(",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("stuckReport lacks %q:\n%s", want, got)
		}
	}
}
