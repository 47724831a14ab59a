package faultproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// pair is one proxied connection: the accepted client side and the dialled
// server side, with a reader and a writer goroutine per direction.
type pair struct {
	p      *Proxy
	client *net.TCPConn
	done   chan struct{} // closed by shut: every goroutine of the pair returns

	mu     sync.Mutex
	server *net.TCPConn // guarded by mu; nil until dialled
	closed bool         // guarded by mu
	rst    bool         // shut by a reset (guarded by mu)
}

// chunk is bytes read from one side, waiting to be written to the other; eof
// marks the end of the direction (the reader saw an orderly close).
type chunk struct {
	data []byte
	at   time.Time
	eof  bool
}

// queue holds the chunks of one direction between its reader and writer.
type queue struct {
	mu    sync.Mutex
	items []chunk       // guarded by mu
	ready chan struct{} // capacity 1: a chunk was added
}

func newQueue() *queue { return &queue{ready: make(chan struct{}, 1)} }

func (q *queue) push(c chunk) {
	q.mu.Lock()
	q.items = append(q.items, c)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// pop returns the oldest chunk, waiting for one; false when done closes.
func (q *queue) pop(done <-chan struct{}) (chunk, bool) {
	for {
		q.mu.Lock()
		if len(q.items) > 0 {
			c := q.items[0]
			q.items = q.items[1:]
			q.mu.Unlock()
			return c, true
		}
		q.mu.Unlock()
		select {
		case <-q.ready:
		case <-done:
			return chunk{}, false
		}
	}
}

// run connects to the target (after any partition heals), then starts the
// four copying goroutines and waits for the pair to end.
func (c *pair) run() {
	p := c.p
	defer p.wg.Done()
	defer func() {
		c.shut(false)
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	stop := make(chan struct{}) // ends the watcher below when run returns
	defer close(stop)
	p.wg.Add(1)
	go func() { // Close of the proxy or reset of the pair ends the sockets
		defer p.wg.Done()
		select {
		case <-p.ctx.Done():
			c.shut(false)
		case <-c.done:
		case <-stop:
		}
	}()
	if !p.waitUsable(c.done) {
		return
	}
	var d net.Dialer
	s, err := d.DialContext(p.ctx, "tcp", p.target)
	if err != nil {
		return
	}
	c.mu.Lock()
	if c.closed {
		// Shut while dialing: a reset resets this side too.
		if c.rst {
			s.(*net.TCPConn).SetLinger(0)
		}
		c.mu.Unlock()
		s.Close()
		return
	}
	c.server = s.(*net.TCPConn)
	c.mu.Unlock()

	var wg sync.WaitGroup
	for _, dir := range []Direction{ClientToServer, ServerToClient} {
		src, dst := c.client, c.server
		if dir == ServerToClient {
			src, dst = c.server, c.client
		}
		q := newQueue()
		wg.Add(2)
		go func() { defer wg.Done(); c.read(dir, src, q) }()
		go func() { defer wg.Done(); c.write(dir, dst, q) }()
	}
	wg.Wait()
}

// read copies src into q, discarding what arrives while dir drops.
func (c *pair) read(dir Direction, src *net.TCPConn, q *queue) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			c.p.mu.Lock()
			drop := c.p.faults[dir].drop
			if drop {
				c.p.dropped[dir] += int64(n)
			}
			c.p.mu.Unlock()
			if !drop {
				q.push(chunk{data: append([]byte(nil), buf[:n]...), at: time.Now()})
			}
		}
		if err != nil {
			// An orderly end is passed on as a half close; an error (or
			// the pair's shutdown) ends the whole pair.
			if isEOF(err) {
				q.push(chunk{eof: true})
			} else {
				c.shut(false)
			}
			return
		}
	}
}

// write delivers q's chunks to dst when the faults allow.
func (c *pair) write(dir Direction, dst *net.TCPConn, q *queue) {
	p := c.p
	for {
		ch, ok := q.pop(c.done)
		if !ok {
			return
		}
		for { // wait out delay, stall and partition
			p.mu.Lock()
			f := p.faults[dir]
			part, until := p.partitionLocked(time.Now())
			changed := p.changed
			p.mu.Unlock()
			var wake time.Time
			switch {
			case part:
				wake = until
			case f.stall:
			case f.delay > 0 && time.Now().Before(ch.at.Add(f.delay)):
				wake = ch.at.Add(f.delay)
			default:
				goto deliver
			}
			if !p.sleep(c.done, changed, wake) {
				return
			}
		}
	deliver:
		if ch.eof {
			dst.CloseWrite()
			return
		}
		if _, err := dst.Write(ch.data); err != nil {
			c.shut(false)
			return
		}
	}
}

// shut closes both sockets once; with rst, with SO_LINGER 0 so that both
// peers get an RST.
func (c *pair) shut(rst bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed, c.rst = true, rst
	socks := []*net.TCPConn{c.client, c.server}
	if rst {
		// Before done is closed: a pump that sees done may close its
		// socket first, and that close must reset too, not end it.
		for _, s := range socks {
			if s != nil {
				s.SetLinger(0)
			}
		}
	}
	close(c.done)
	for _, s := range socks {
		if s != nil {
			s.Close()
		}
	}
}

func (c *pair) reset() { c.shut(true) }

func isEOF(err error) bool { return errors.Is(err, io.EOF) }
