package store

import "sync"

// background runs the store's deferred work in one goroutine, after the replies
// that gave rise to it:
//
//   - closing removed objects. The last close of an inode that has lost its last
//     link is what frees it: the file system truncates it, releases its blocks
//     and, when mounted with discard, trims them, which costs more than the unlink
//     itself. The store keeps a descriptor of every object it removes
//     (Store.victim), so that work lands here instead of inside REMOVE, RMDIR or
//     RENAME. It never delays what a client can see: the name is gone when
//     unlinkat returns, and a handle to the object is stale from then on (Resolve
//     checks the link count). Only the space comes back a moment later.
//   - refreshing attribute-cache entries that a listing served past half their
//     lifetime (attrcache.go), so that a directory listed again and again stays
//     served from the cache instead of being read entry by entry each time its
//     entries expire.
//
// The queue is bounded: a close that does not fit is done by the caller, a
// refresh that does not fit is dropped.
type background struct {
	ch   chan func()
	done chan struct{}

	mu      sync.Mutex
	stopped bool // guarded by mu; once set, later refuses
}

// backgroundQueue bounds the jobs waiting.
const backgroundQueue = 1024

// newBackground starts the goroutine; stop ends it.
func newBackground() *background {
	b := &background{ch: make(chan func(), backgroundQueue), done: make(chan struct{})}
	go b.run()
	return b
}

func (b *background) run() {
	defer close(b.done)
	for fn := range b.ch {
		fn()
	}
}

// later queues fn, or reports false if the queue is full or stopped.
func (b *background) later(fn func()) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped {
		return false
	}
	select {
	case b.ch <- fn:
		return true
	default:
		return false
	}
}

// stop runs what is queued and ends the goroutine.
func (b *background) stop() {
	b.mu.Lock()
	if b.stopped {
		b.mu.Unlock()
		return
	}
	b.stopped = true
	close(b.ch)
	b.mu.Unlock()
	<-b.done
}

// closeLater closes a removed object's descriptors in the background, or now.
func (s *Store) closeLater(e *entry) {
	if !s.bg.later(e.close) {
		e.close()
	}
}
