package cachedir

import (
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Write-behind of writers this package does not see (FUSE passthrough: the
// kernel writes the data file itself). A close must make what the kernel
// wrote durable in the cache file before it returns (the mount's fdatasync);
// on a machine with much memory the kernel's own write-back starts late, so
// the close would write everything itself. The mount does not see a
// passthrough open's writes (File.WriteAt starts the disk writes of the
// writes it sees every writeBehindEvery bytes), so while such writers are
// open WriteBehind starts
// their cache files' disk writes (sync_file_range SYNC_FILE_RANGE_WRITE,
// which does not wait for them) every writeBehindTick: at the close, only
// what was written since is left to go.
const writeBehindTick = 5 * time.Millisecond

// WriteBehind is the set of data files written by writers outside this
// package, and the goroutine that kicks their disk writes while the set is
// not empty; its owner stops it with Close.
type WriteBehind struct {
	mu    sync.Mutex
	files map[*os.File]int // descriptors of cache files with passthrough writers: how many writers
	wake  chan struct{}    // a file was added to an empty set
	stop  chan struct{}
	done  chan struct{}
}

// NewWriteBehind starts a WriteBehind's goroutine.
func NewWriteBehind() *WriteBehind {
	wb := &WriteBehind{files: map[*os.File]int{}, wake: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
	go wb.loop()
	return wb
}

// Add counts a passthrough writer of fd's file (fd stays open until Remove).
func (wb *WriteBehind) Add(fd *os.File) {
	wb.mu.Lock()
	wb.files[fd]++
	first := len(wb.files) == 1 && wb.files[fd] == 1
	wb.mu.Unlock()
	if first {
		select {
		case wb.wake <- struct{}{}:
		default:
		}
	}
}

// Remove ends one Add; fd may be closed when it returns.
func (wb *WriteBehind) Remove(fd *os.File) {
	wb.mu.Lock()
	defer wb.mu.Unlock()
	if wb.files[fd]--; wb.files[fd] <= 0 {
		delete(wb.files, fd)
	}
}

// Close stops the goroutine and waits for it.
func (wb *WriteBehind) Close() {
	close(wb.stop)
	<-wb.done
}

func (wb *WriteBehind) loop() {
	defer close(wb.done)
	t := time.NewTicker(writeBehindTick)
	defer t.Stop()
	for {
		wb.mu.Lock()
		idle := len(wb.files) == 0
		wb.mu.Unlock()
		if idle {
			select {
			case <-wb.stop:
				return
			case <-wb.wake:
			}
			continue
		}
		select {
		case <-wb.stop:
			return
		case <-t.C:
		}
		wb.mu.Lock()
		for fd := range wb.files {
			// Only a hint: an error here shows again at the fdatasync.
			_ = unix.SyncFileRange(int(fd.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
		}
		wb.mu.Unlock()
	}
}
