package sunrpc

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"snfs/xdr"
)

// Handler decodes a call's arguments from args, does the work and encodes the
// results into res. It returns nil for SUCCESS, ErrGarbageArgs when the arguments do
// not decode, an AuthError to reject the credential, or any other error for
// SYSTEM_ERR. Handlers must not keep args' bytes after returning.
type Handler func(ctx context.Context, call *Call, args *xdr.Reader, res *xdr.Writer) error

// Proc is one entry of a program's procedure table.
type Proc struct {
	Name    string  // upper case, as in the protocol's RFC; used in metrics
	Cache   bool    // non-idempotent: replies go through the duplicate request cache
	Handler Handler // nil means the procedure does not exist (PROC_UNAVAIL)
	// Inline, given the call's encoded arguments, says whether this call never
	// waits for anything slow (no fsync, no lock held by another call): such a call
	// runs on the TCP connection's reader goroutine when no other request is already
	// waiting, saving a goroutine handoff (and, on an idle server, a thread wakeup)
	// per call for clients that send one call at a time. It is a hint: it must be
	// cheap, must not trust args (they are not yet checked), and a wrong answer
	// costs only concurrency. nil means never inline.
	Inline func(args []byte) bool

	observe func(time.Duration) // from Server.Observer's CallResolver at Register; may be nil
}

// Always is a Proc.Inline for procedures that never wait: run every call inline.
func Always([]byte) bool { return true }

// Program is an RPC program: its number, name and a procedure table per version.
type Program struct {
	Name     string
	Number   uint32
	Versions map[uint32][]Proc
}

// Call is what a handler learns about the call it serves.
type Call struct {
	CallHeader
	Auth    AuthSysParams // Flavor AuthNone or AuthSys
	Network string        // "tcp" or "udp"
	Addr    net.Addr      // the client's address

	// NoCache, set by a handler, keeps this reply out of the duplicate request
	// cache: a "try again later" answer (NFS3ERR_JUKEBOX) must not be replayed to
	// the retry.
	NoCache bool
}

// ClientIP returns the caller's IP address.
func (c *Call) ClientIP() net.IP {
	switch a := c.Addr.(type) {
	case *net.TCPAddr:
		return a.IP
	case *net.UDPAddr:
		return a.IP
	}
	return nil
}

// ClientPort returns the caller's source port (0 if unknown).
func (c *Call) ClientPort() int {
	switch a := c.Addr.(type) {
	case *net.TCPAddr:
		return a.Port
	case *net.UDPAddr:
		return a.Port
	}
	return 0
}

// Errors a Handler returns to choose the RPC-level reply.
var (
	ErrGarbageArgs = errors.New("sunrpc: garbage arguments")
	ErrSystem      = errors.New("sunrpc: system error")
)

// AuthError rejects a call's credential with the given auth_stat.
type AuthError AuthStat

func (e AuthError) Error() string { return "sunrpc: auth error" }

// Observer is told about every completed call (for metrics).
type Observer interface {
	ObserveCall(program string, vers uint32, proc string, d time.Duration)
}

// CallResolver is an Observer that resolves a procedure's series once, when its
// program is registered: the request path then calls the returned function with
// no lookup.
type CallResolver interface {
	ResolveCall(program string, vers uint32, proc string) func(time.Duration)
}

// Server serves registered programs. Configure the exported fields before Serve.
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

	initOnce sync.Once
	progs    map[uint32]*Program
	sem      chan struct{}
	bufs     sync.Pool
	spinGate *spinGate

	mu        sync.Mutex
	closing   bool                     // guarded by mu
	listeners map[io.Closer]struct{}   // guarded by mu
	conns     map[*serverConn]struct{} // guarded by mu
	wg        sync.WaitGroup           // serve loops, connections and in-flight calls
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
		if s.progs == nil {
			s.progs = map[uint32]*Program{}
		}
		s.sem = make(chan struct{}, s.MaxInFlight)
		if s.SpinPoll == 0 {
			s.SpinPoll = DefaultSpinPoll
		}
		s.spinGate = newSpinGate()
		s.listeners = map[io.Closer]struct{}{}
		s.conns = map[*serverConn]struct{}{}
	})
}

// Register adds a program. Call before serving, after setting Observer.
func (s *Server) Register(p *Program) {
	s.init()
	if cr, ok := s.Observer.(CallResolver); ok {
		// A copy of the tables, so that p stays the caller's.
		q := *p
		q.Versions = make(map[uint32][]Proc, len(p.Versions))
		for v, procs := range p.Versions {
			procs = append([]Proc(nil), procs...)
			for i := range procs {
				if procs[i].Handler != nil {
					procs[i].observe = cr.ResolveCall(p.Name, v, procs[i].Name)
				}
			}
			q.Versions[v] = procs
		}
		p = &q
	}
	s.progs[p.Number] = p
}

func (s *Server) getBuf() *[]byte {
	if b, ok := s.bufs.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, 64<<10)
	return &b
}

func (s *Server) putBuf(b *[]byte) {
	if cap(*b) <= s.MaxRecord+4096 {
		*b = (*b)[:0]
		s.bufs.Put(b)
	}
}

func (s *Server) track(l io.Closer) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.listeners[l] = struct{}{}
	return true
}

// ServeTCP accepts connections on ln until Shutdown. It returns nil after Shutdown.
func (s *Server) ServeTCP(ln net.Listener) error {
	s.init()
	if !s.track(ln) {
		ln.Close()
		return nil
	}
	s.wg.Add(1)
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
		c := newServerConn(s, nc)
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			nc.Close()
			return nil
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(c)
	}
}

// serverConn is one TCP connection: its replies go out through a combiner.
type serverConn struct {
	nc net.Conn
	*combiner[*[]byte]
	async atomic.Int32 // calls running in handler goroutines (the reader does not poll meanwhile)
}

// newServerConn wraps nc; written reply buffers go back to s's pool.
func newServerConn(s *Server, nc net.Conn) *serverConn {
	bytes := func(b *[]byte) []byte { return *b }
	return &serverConn{nc: nc, combiner: newCombiner(nc, maxPendingReply, bytes, s.putBuf)}
}

// maxPendingReply bounds the replies waiting for a connection's writer: beyond it,
// a handler waits (holding its in-flight slot, as a blocked write would), so a
// client that stops reading replies cannot make the server buffer without end.
const maxPendingReply = 4 << 20

func (s *Server) serveConn(c *serverConn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	br := bufio.NewReaderSize(newPollReader(c.nc, s.spinGate, s.SpinPoll, &c.async), 64<<10)
	addr := c.nc.RemoteAddr()
	var inflight sync.WaitGroup
	defer c.nc.Close()
	defer inflight.Wait()
	for {
		bp := s.getBuf()
		rec, err := readRecord(br, *bp, s.MaxRecord)
		*bp = rec
		if err != nil {
			s.putBuf(bp)
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !isTimeout(err) {
				s.Logger.Debug("rpc connection closed", "remote", addr, "err", err)
			}
			return
		}
		send := func(rb *[]byte) {
			putMarker(*rb, len(*rb)-4)
			if err := c.write(rb); err != nil {
				s.Logger.Debug("rpc reply write failed", "remote", addr, "err", err)
			}
		}
		if br.Buffered() == 0 && s.inline(rec) {
			s.serveRecord(bp, "tcp", addr, send)
			continue
		}
		s.sem <- struct{}{}
		inflight.Add(1)
		c.async.Add(1)
		go func() {
			defer inflight.Done()
			defer func() { <-s.sem }()
			s.serveRecord(bp, "tcp", addr, send)
			c.async.Add(-1)
		}()
	}
}

// serveRecord dispatches the call in *bp, returns it to the pool, and hands the
// reply (if any) to send, which owns it from then on and returns it to the pool
// once written.
func (s *Server) serveRecord(bp *[]byte, network string, addr net.Addr, send func(*[]byte)) {
	rb := s.getBuf()
	reply := s.dispatch(*bp, network, addr, *rb)
	s.putBuf(bp)
	if reply == nil {
		s.putBuf(rb)
		return
	}
	*rb = reply
	send(rb)
}

// inline reports whether the call in rec may run inline (Proc.Inline). It reads
// only as much of the header as it needs; dispatch checks the call properly.
func (s *Server) inline(rec []byte) bool {
	if len(rec) < 24 {
		return false
	}
	prog := s.progs[binary.BigEndian.Uint32(rec[12:])]
	if prog == nil {
		return false
	}
	procs := prog.Versions[binary.BigEndian.Uint32(rec[16:])]
	proc := binary.BigEndian.Uint32(rec[20:])
	if proc >= uint32(len(procs)) || procs[proc].Inline == nil {
		return false
	}
	// Skip the credential and the verifier, each a flavor, a length and a body.
	off := 24
	for range 2 {
		if len(rec) < off+8 {
			return false
		}
		n := binary.BigEndian.Uint32(rec[off+4:])
		if n > maxAuthSz {
			return false
		}
		off += 8 + int(n+3)&^3
	}
	if off > len(rec) {
		return false
	}
	return procs[proc].Inline(rec[off:])
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// ServeUDP serves datagrams on pc until Shutdown. It returns nil after Shutdown.
func (s *Server) ServeUDP(pc net.PacketConn) error {
	s.init()
	if !s.track(pc) {
		pc.Close()
		return nil
	}
	s.wg.Add(1)
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
		bp := s.getBuf()
		*bp = append((*bp)[:0], buf[:n]...)
		s.sem <- struct{}{}
		inflight.Add(1)
		go func() {
			defer inflight.Done()
			defer func() { <-s.sem }()
			s.serveRecord(bp, "udp", addr, func(rb *[]byte) {
				pc.WriteTo((*rb)[4:], addr)
				s.putBuf(rb)
			})
		}()
	}
}

// Shutdown stops accepting, lets in-flight calls finish and reply, then closes
// every connection. It returns ctx.Err() if ctx ends first.
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
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		for c := range s.conns {
			c.nc.Close()
		}
		s.mu.Unlock()
		return ctx.Err()
	}
}

// dispatch runs one call and returns the reply, built in buf's storage, with 4 bytes
// reserved in front for the record mark, or nil when no reply must be sent.
func (s *Server) dispatch(rec []byte, network string, addr net.Addr, buf []byte) []byte {
	start := time.Now()
	r := xdr.NewReader(rec)
	w := xdr.NewWriter(buf)
	w.Uint32(0) // record mark, filled in by the TCP writer
	h, err := DecodeCall(r)
	switch {
	case errors.Is(err, errRPCMismatch):
		encodeRPCMismatch(w, h.XID)
		return w.Bytes()
	case err != nil:
		s.Logger.Debug("dropping undecodable rpc message", "remote", addr, "err", err)
		return nil
	}
	prog := s.progs[h.Prog]
	if prog == nil {
		encodeAccepted(w, h.XID, ProgUnavail)
		return w.Bytes()
	}
	procs, ok := prog.Versions[h.Vers]
	if !ok {
		lo, hi := versionRange(prog)
		encodeProgMismatch(w, h.XID, lo, hi)
		return w.Bytes()
	}
	if h.Proc >= uint32(len(procs)) || procs[h.Proc].Handler == nil {
		encodeAccepted(w, h.XID, ProcUnavail)
		return w.Bytes()
	}
	proc := &procs[h.Proc]
	call := &Call{CallHeader: h, Network: network, Addr: addr}
	switch h.Cred.Flavor {
	case AuthNone:
		call.Auth.Flavor = AuthNone
	case AuthSys:
		call.Auth, err = DecodeAuthSys(h.Cred.Body)
		if err != nil {
			encodeAuthError(w, h.XID, AuthBadCred)
			return w.Bytes()
		}
	default:
		encodeAuthError(w, h.XID, AuthBadCred)
		return w.Bytes()
	}

	var key drcKey
	if proc.Cache && s.DRC != nil {
		key = drcKey{addr: ipString(addr), xid: h.XID, prog: h.Prog, vers: h.Vers, proc: h.Proc,
			sum: crc32.Checksum(r.Rest()[:min(r.Remaining(), drcSumBytes)], castagnoli), n: uint32(r.Remaining())}
		switch st, saved := s.DRC.start(key); st {
		case drcInProgress:
			return nil
		case drcDone:
			out := make([]byte, 4+len(saved))
			copy(out[4:], saved)
			return out
		}
	}

	mark := w.Len()
	encodeAccepted(w, h.XID, Success)
	err = s.runHandler(proc, call, r, w)
	if err != nil {
		w.Truncate(mark)
		var ae AuthError
		switch {
		case errors.As(err, &ae):
			encodeAuthError(w, h.XID, AuthStat(ae))
		case errors.Is(err, ErrGarbageArgs):
			encodeAccepted(w, h.XID, GarbageArgs)
		default:
			s.Logger.Warn("rpc handler failed", "program", prog.Name, "proc", proc.Name, "err", err)
			encodeAccepted(w, h.XID, SystemErr)
		}
	}
	reply := w.Bytes()
	if proc.Cache && s.DRC != nil {
		if call.NoCache {
			s.DRC.forget(key)
		} else {
			s.DRC.finish(key, reply[4:])
		}
	}
	if proc.observe != nil {
		proc.observe(time.Since(start))
	} else if s.Observer != nil {
		s.Observer.ObserveCall(prog.Name, h.Vers, proc.Name, time.Since(start))
	}
	return reply
}

// runHandler calls the handler, turning a panic into SYSTEM_ERR so that one bad
// request can never take the server down.
func (s *Server) runHandler(proc *Proc, call *Call, r *xdr.Reader, w *xdr.Writer) (err error) {
	defer func() {
		if p := recover(); p != nil {
			s.Logger.Error("rpc handler panic", "proc", proc.Name, "panic", p)
			err = ErrSystem
		}
	}()
	return proc.Handler(context.Background(), call, r, w)
}

func versionRange(p *Program) (lo, hi uint32) {
	vs := make([]uint32, 0, len(p.Versions))
	for v := range p.Versions {
		vs = append(vs, v)
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i] < vs[j] })
	return vs[0], vs[len(vs)-1]
}

func ipString(a net.Addr) string {
	switch a := a.(type) {
	case *net.TCPAddr:
		return a.IP.String()
	case *net.UDPAddr:
		return a.IP.String()
	}
	return a.String()
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// drcSumBytes is how much of a call's arguments the reply cache checksums (with
// their total length), as Linux nfsd does with its first 256 bytes: enough to tell
// apart two calls that share an xid, without hashing every WRITE's megabyte.
const drcSumBytes = 1024
