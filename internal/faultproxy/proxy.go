package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"
)

// Direction is one way of a proxied connection.
type Direction int

const (
	// ClientToServer carries what the accepted side (the client) sends.
	ClientToServer Direction = iota
	// ServerToClient carries what the target (the server) sends.
	ServerToClient
)

func (d Direction) String() string {
	if d == ClientToServer {
		return "client->server"
	}
	return "server->client"
}

// dirFaults are the faults set on one direction.
type dirFaults struct {
	delay time.Duration
	drop  bool
	stall bool
}

// Proxy forwards connections from Addr to its target, injecting faults.
type Proxy struct {
	target string
	ln     net.Listener
	ctx    context.Context // cancelled by Close: every goroutine returns
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine of the proxy

	mu        sync.Mutex
	faults    [2]dirFaults       // guarded by mu
	partUntil time.Time          // guarded by mu; partitioned while now < partUntil
	partOpen  bool               // guarded by mu; partitioned until Heal
	changed   chan struct{}      // guarded by mu; closed (and replaced) on every fault change
	conns     map[*pair]struct{} // guarded by mu
	accepted  int                // guarded by mu
	dropped   [2]int64           // guarded by mu: bytes discarded per direction
}

// New listens on 127.0.0.1 (an ephemeral port) and forwards to target. The
// proxy stops when ctx ends or on Close.
func New(ctx context.Context, target string) (*Proxy, error) {
	return Listen(ctx, "127.0.0.1:0", target)
}

// Listen is New on a given listen address (to take over a known port).
func Listen(ctx context.Context, addr, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{target: target, ln: ln, changed: make(chan struct{}), conns: map[*pair]struct{}{}}
	p.ctx, p.cancel = context.WithCancel(ctx)
	p.wg.Add(2)
	go p.acceptLoop()
	go func() { // closes the listener when the proxy stops, ending acceptLoop
		defer p.wg.Done()
		<-p.ctx.Done()
		ln.Close()
	}()
	return p, nil
}

// Addr is the proxy's listen address (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the proxy's listen port.
func (p *Proxy) Port() int {
	_, s, _ := net.SplitHostPort(p.Addr())
	n, _ := strconv.Atoi(s)
	return n
}

// Close stops the proxy: the listener and every connection are closed and
// every goroutine has returned when Close returns.
func (p *Proxy) Close() error {
	p.cancel()
	p.wg.Wait()
	return nil
}

// changeLocked wakes every goroutine waiting on a fault.
func (p *Proxy) changeLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// Delay delays every chunk of direction dir by d (0: none).
func (p *Proxy) Delay(dir Direction, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults[dir].delay = d
	p.changeLocked()
}

// Drop discards the bytes of direction dir from now until Restore or Heal.
func (p *Proxy) Drop(dir Direction) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults[dir].drop = true
	p.changeLocked()
}

// Stall holds the bytes of direction dir from now until Restore or Heal.
func (p *Proxy) Stall(dir Direction) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults[dir].stall = true
	p.changeLocked()
}

// Restore ends Drop and Stall of direction dir (held bytes are delivered) and
// its delay.
func (p *Proxy) Restore(dir Direction) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults[dir] = dirFaults{}
	p.changeLocked()
}

// Partition stops every byte in both directions for d, or until Heal if
// d <= 0. Bytes are held, not lost (see the package comment).
func (p *Proxy) Partition(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if d <= 0 {
		p.partOpen = true
	} else {
		p.partUntil = time.Now().Add(d)
	}
	p.changeLocked()
}

// Heal ends a partition and every per-direction fault.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.partOpen, p.partUntil = false, time.Time{}
	p.faults = [2]dirFaults{}
	p.changeLocked()
}

// Partitioned reports whether a partition is in force now.
func (p *Proxy) Partitioned() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	part, _ := p.partitionLocked(time.Now())
	return part
}

// partitionLocked reports whether the proxy is partitioned at now and, for a
// partition with a duration, when it ends.
func (p *Proxy) partitionLocked(now time.Time) (bool, time.Time) {
	if p.partOpen {
		return true, time.Time{}
	}
	if now.Before(p.partUntil) {
		return true, p.partUntil
	}
	return false, time.Time{}
}

// Reset closes every current connection with an RST to both peers
// (SO_LINGER 0) and returns how many it reset. Later connections are not
// affected.
func (p *Proxy) Reset() int {
	p.mu.Lock()
	all := make([]*pair, 0, len(p.conns))
	for c := range p.conns {
		all = append(all, c)
	}
	p.mu.Unlock()
	for _, c := range all {
		c.reset()
	}
	return len(all)
}

// Conns is the number of connections being proxied now.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Accepted is the number of connections accepted so far.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// Dropped is the number of bytes discarded in direction dir so far.
func (p *Proxy) Dropped(dir Direction) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped[dir]
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if p.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		pr := &pair{p: p, client: c.(*net.TCPConn), done: make(chan struct{})}
		p.mu.Lock()
		p.conns[pr] = struct{}{}
		p.accepted++
		p.mu.Unlock()
		p.wg.Add(1)
		go pr.run()
	}
}

// waitUsable blocks while a partition is in force; false if the proxy or
// done ended first.
func (p *Proxy) waitUsable(done <-chan struct{}) bool {
	for {
		p.mu.Lock()
		part, until := p.partitionLocked(time.Now())
		ch := p.changed
		p.mu.Unlock()
		if !part {
			return true
		}
		if !p.sleep(done, ch, until) {
			return false
		}
	}
}

// sleep waits until a fault changes, until at (if not zero), or until the
// proxy or done ends; false for the last two.
func (p *Proxy) sleep(done <-chan struct{}, changed <-chan struct{}, at time.Time) bool {
	var timer <-chan time.Time
	if !at.IsZero() {
		t := time.NewTimer(time.Until(at))
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-changed:
	case <-timer:
	case <-done:
		return false
	case <-p.ctx.Done():
		return false
	}
	return true
}
