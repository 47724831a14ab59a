package store

import "sync"

// closer closes the descriptors of removed objects off the reply path. The last
// close of an inode that has lost its last link is what frees it: the file system
// truncates it, releases its blocks and, when mounted with discard, trims them,
// which costs more than the unlink itself. The store keeps a descriptor of every
// object it removes (Store.victim), so that work lands here, after the reply to
// REMOVE, RMDIR or RENAME has gone, instead of inside it.
//
// It never delays what a client can see: the name is gone when unlinkat returns,
// and a handle to the object is stale from then on (Resolve checks the link
// count). Only the space comes back a moment later.
type closer struct {
	ch   chan *entry
	done chan struct{}

	mu      sync.Mutex
	stopped bool // guarded by mu; once set, later closes inline
}

// closerQueue bounds the descriptors waiting to be closed; past it, the remover
// closes its own.
const closerQueue = 1024

// newCloser starts the closer's goroutine; stop ends it.
func newCloser() *closer {
	c := &closer{ch: make(chan *entry, closerQueue), done: make(chan struct{})}
	go c.run()
	return c
}

func (c *closer) run() {
	defer close(c.done)
	for e := range c.ch {
		e.close()
	}
}

// later closes e's descriptors in the closer's goroutine, or now if its queue is
// full or it has stopped.
func (c *closer) later(e *entry) {
	c.mu.Lock()
	if !c.stopped {
		select {
		case c.ch <- e:
			c.mu.Unlock()
			return
		default:
		}
	}
	c.mu.Unlock()
	e.close()
}

// stop closes what is queued and ends the goroutine.
func (c *closer) stop() {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return
	}
	c.stopped = true
	close(c.ch)
	c.mu.Unlock()
	<-c.done
}
