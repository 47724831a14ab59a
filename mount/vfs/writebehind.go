package vfs

import (
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Write-behind of passthrough writers. A close must make what the kernel
// wrote durable in the cache file before it returns (snfsFlush: fdatasync);
// on a machine with much memory the kernel's own write-back starts late, so
// the close would write everything itself. The mount does not see a
// passthrough open's writes (cachedir starts the disk writes of the writes
// it sees every few MiB), so while passthrough writers are open it starts
// their cache files' disk writes (sync_file_range SYNC_FILE_RANGE_WRITE,
// which does not wait for them) every writeBehindTick: at the close, only
// what was written since is left to go.
const writeBehindTick = 5 * time.Millisecond

// writeBehind is the set of cache files passthrough writers write, and the
// goroutine that kicks their disk writes while the set is not empty.
type writeBehind struct {
	mu    sync.Mutex
	files map[*os.File]int // descriptors of cache files with passthrough writers: how many writers
	wake  chan struct{}    // a file was added to an empty set
	stop  chan struct{}
	done  chan struct{}
}

func newWriteBehind() *writeBehind {
	wb := &writeBehind{files: map[*os.File]int{}, wake: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
	go wb.loop()
	return wb
}

// add counts a passthrough writer of fd's file (fd stays open until remove).
func (wb *writeBehind) add(fd *os.File) {
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

// remove ends one add; fd may be closed when it returns.
func (wb *writeBehind) remove(fd *os.File) {
	wb.mu.Lock()
	defer wb.mu.Unlock()
	if wb.files[fd]--; wb.files[fd] <= 0 {
		delete(wb.files, fd)
	}
}

func (wb *writeBehind) close() {
	close(wb.stop)
	<-wb.done
}

func (wb *writeBehind) loop() {
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
