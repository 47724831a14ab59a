package sunrpc

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Server serves registered programs. Configure the exported fields before the
// first Register (which applies the defaults and sizes the worker pool).
type Server struct {
	MaxRecord   int          // largest record accepted on TCP; default 4 MiB + 64 KiB
	MaxInFlight int          // calls executing at once across all connections; default 128
	Logger      *slog.Logger // default slog.Default()
	Observer    Observer     // optional
	DRC         *DRC         // optional duplicate request cache
	// SpinPoll is how long a TCP connection whose calls arrive close together
	// polls its socket before parking (see pollread.go); 0 means
	// DefaultSpinPoll, negative means never poll.
	SpinPoll time.Duration

	// Per-connection bounds (see Conn): ConnMemory is the budget of request and
	// reply buffers one connection may hold before it stops being read (default
	// 16 MiB, and at least MaxRecord); ConnInFlight is the share of MaxInFlight
	// one connection's calls may use at once (default half); ReplyTimeout is how
	// long a reply write may make no progress before the connection is dropped
	// (default 30 s).
	ConnMemory   int
	ConnInFlight int
	ReplyTimeout time.Duration

	initOnce sync.Once
	d        *dispatcher
	spinGate *spinGate
	ctx      context.Context // handlers' base context, cancelled by Shutdown
	cancel   context.CancelFunc

	mu        sync.Mutex
	closing   bool                   // guarded by mu
	listeners map[io.Closer]struct{} // guarded by mu
	conns     map[*Conn]struct{}     // guarded by mu
	wg        sync.WaitGroup         // serve loops, connections and in-flight calls
}

func (s *Server) init() {
	s.initOnce.Do(func() {
		if s.MaxRecord == 0 {
			s.MaxRecord = 4<<20 + 64<<10
		}
		if s.MaxInFlight == 0 {
			s.MaxInFlight = 128
		}
		if s.Logger == nil {
			s.Logger = slog.Default()
		}
		if s.ConnMemory == 0 {
			s.ConnMemory = 16 << 20
		}
		s.ConnMemory = max(s.ConnMemory, s.MaxRecord)
		if s.ConnInFlight == 0 {
			s.ConnInFlight = max(1, s.MaxInFlight/2)
		}
		if s.ReplyTimeout == 0 {
			s.ReplyTimeout = 30 * time.Second
		}
		s.d = newDispatcher(s.MaxInFlight, s.Logger, s.Observer, s.DRC)
		if s.SpinPoll == 0 {
			s.SpinPoll = DefaultSpinPoll
		}
		s.spinGate = newSpinGate()
		s.ctx, s.cancel = context.WithCancel(context.Background())
		s.listeners = map[io.Closer]struct{}{}
		s.conns = map[*Conn]struct{}{}
	})
}

// Register adds a program. Call before serving, after setting Observer.
func (s *Server) Register(p *Program) {
	s.init()
	s.d.register(p)
}

// track records a listener being served, and counts its serving loop in wg
// (under mu, as Shutdown sets closing: an Add after Shutdown's Wait began
// would race it); the caller calls wg.Done when the loop ends. false: the
// server is shutting down, nothing was counted.
func (s *Server) track(l io.Closer) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.listeners[l] = struct{}{}
	s.wg.Add(1)
	return true
}

// ServeTCP accepts connections on ln until Shutdown. It returns nil after Shutdown.
func (s *Server) ServeTCP(ln net.Listener) error {
	s.init()
	if !s.track(ln) {
		ln.Close()
		return nil
	}
	defer s.wg.Done()
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return err
		}
		if tc, ok := nc.(*net.TCPConn); ok {
			tc.SetNoDelay(true)
		}
		s.ServeConn(nc)
	}
}

// ServeConn serves calls arriving on nc, a stream connection however it was
// made (accepted, or dialled by this side), until it closes or the server shuts
// down; handlers may call the peer back on it. It returns at once.
func (s *Server) ServeConn(nc net.Conn) *Conn {
	s.init()
	c := newConn(nc, connConfig{network: "tcp", d: s.d, maxRecord: s.MaxRecord, maxMem: s.ConnMemory,
		maxWorkers: s.ConnInFlight, writeTimeout: s.ReplyTimeout, log: s.Logger, parent: s.ctx,
		reader: func(nc net.Conn, busy *atomic.Int32) io.Reader {
			return newPollReader(nc, s.spinGate, s.SpinPoll, busy)
		}})
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		closeNC(nc)
		return c
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		c.serve()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	return c
}

// ServeUDP serves datagrams on pc until Shutdown. It returns nil after Shutdown.
// UDP carries no calls back to clients.
func (s *Server) ServeUDP(pc net.PacketConn) error {
	s.init()
	if !s.track(pc) {
		pc.Close()
		return nil
	}
	defer s.wg.Done()
	var inflight sync.WaitGroup
	defer inflight.Wait()
	buf := make([]byte, 65536)
	for {
		n, addr, err := pc.ReadFrom(buf)
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing {
				return nil
			}
			if isTimeout(err) {
				continue
			}
			return err
		}
		bp := getBuf()
		*bp = append((*bp)[:0], buf[:n]...)
		s.d.sem <- struct{}{}
		inflight.Add(1)
		go func() {
			defer inflight.Done()
			defer func() { <-s.d.sem }()
			rb := getBuf()
			reply, _ := s.d.dispatch(s.ctx, *bp, origin{network: "udp", addr: addr, pc: pc}, (*rb)[:0])
			putBuf(bp)
			if reply != nil {
				pc.WriteTo(reply[4:], addr)
				*rb = reply
			}
			putBuf(rb)
		}()
	}
}

// Shutdown stops accepting, cancels handlers' contexts, lets calls already read
// finish and reply, then closes every connection. It returns ctx.Err() if ctx
// ends first (and then closes the connections at once).
func (s *Server) Shutdown(ctx context.Context) error {
	s.init()
	s.mu.Lock()
	s.closing = true
	for l := range s.listeners {
		l.Close()
	}
	for c := range s.conns {
		// Unblock the reader; calls already read still run and reply.
		c.nc.SetReadDeadline(time.Now())
	}
	s.mu.Unlock()
	s.cancel()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		return ctx.Err()
	}
}

// dispatch runs one call as if it came on a TCP connection from addr (for tests
// and fuzzing): the reply, with 4 bytes reserved for the record mark, or nil.
func (s *Server) dispatch(rec []byte, network string, addr net.Addr, buf []byte) []byte {
	s.init()
	reply, _ := s.d.dispatch(s.ctx, rec, origin{network: network, addr: addr}, buf)
	return reply
}

// inline reports whether the call in rec may run inline (Proc.Inline).
func (s *Server) inline(rec []byte) bool {
	s.init()
	return inline(s.d.lookup(rec), rec)
}
