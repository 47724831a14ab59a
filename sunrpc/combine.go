package sunrpc

import "sync"

// combiner writes messages to one stream with flat combining: messages that
// become ready while another goroutine is writing are left to that goroutine,
// which sends everything pending with one writev. A batch of replies released
// together (gathered WRITEs), or of calls made together, costs one system call and
// one wakeup of the peer instead of one each. Messages go out in the order they
// were handed over. The server uses it for replies, the client for calls.
type combiner[T any] struct {
	w       buffersWriter
	bytes   func(T) []byte // a message's bytes
	release func(T)        // called once a message is written (or dropped after an error); may be nil

	mu      sync.Mutex // guards the fields below
	pending []T        // messages left for the writer; guarded by mu
	spare   []T        // the writer's other batch slice, reused; guarded by mu
	writing bool       // a goroutine is writing and will take pending too; guarded by mu
}

// newCombiner writes through w. Bounding what is pending is the caller's
// business (a Conn stops reading calls while its replies hold its budget).
func newCombiner[T any](w buffersWriter, bytes func(T) []byte, release func(T)) *combiner[T] {
	return &combiner[T]{w: w, bytes: bytes, release: release}
}

// write hands m over to be written and takes ownership of it. If no goroutine is
// writing, this one writes m and everything handed over meanwhile, and returns the
// first write error; otherwise it returns nil at once (a failed write is then the
// writing goroutine's to report). It never waits for another goroutine's write.
func (c *combiner[T]) write(m T) error {
	c.mu.Lock()
	c.pending = append(c.pending, m)
	if c.writing {
		c.mu.Unlock()
		return nil
	}
	c.writing = true
	var err error
	var bufs [][]byte
	var zero T
	for len(c.pending) > 0 {
		batch := c.pending
		c.pending, c.spare = c.spare[:0], nil
		c.mu.Unlock()
		bufs = bufs[:0]
		for _, b := range batch {
			bufs = append(bufs, c.bytes(b))
		}
		if err == nil {
			err = c.w.writeBuffers(bufs)
		}
		for i, b := range batch {
			if c.release != nil {
				c.release(b)
			}
			batch[i] = zero
		}
		clear(bufs)
		c.mu.Lock()
		c.spare = batch[:0]
	}
	c.writing = false
	c.mu.Unlock()
	return err
}
