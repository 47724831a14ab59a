package sunrpc

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"log/slog"
	"net"
	"sort"
	"sync"
	"time"

	"snfs/xdr"
)

// Handler decodes a call's arguments from args, does the work and encodes the
// results into res. It returns nil for SUCCESS, ErrGarbageArgs when the arguments do
// not decode, an AuthError to reject the credential, or any other error for
// SYSTEM_ERR. Handlers must not keep args' bytes after returning. ctx is cancelled
// when the call's connection goes away or its server shuts down.
type Handler func(ctx context.Context, call *Call, args *xdr.Reader, res *xdr.Writer) error

// Proc is one entry of a program's procedure table.
type Proc struct {
	Name  string // upper case, as in the protocol's RFC; used in metrics
	Cache bool   // non-idempotent: replies go through the duplicate request cache
	// Persist (with Cache) saves the replies in the cache's ReplyStore before
	// they are sent, so that they outlive a restart of the server (DRC.Persist):
	// for calls whose second execution gives another answer than the first.
	Persist bool
	Handler Handler // nil means the procedure does not exist (PROC_UNAVAIL)
	// Inline, given the call's encoded arguments, says whether this call never
	// waits for anything slow (no fsync, no lock held by another call): such a call
	// runs on the TCP connection's reader goroutine when no other request is already
	// waiting, saving a goroutine handoff (and, on an idle server, a thread wakeup)
	// per call for clients that send one call at a time. It is a hint: it must be
	// cheap, must not trust args (they are not yet checked), and a wrong answer
	// costs only concurrency. nil means never inline.
	Inline func(args []byte) bool
	// MaxReply is the largest reply this procedure sends, RPC header included,
	// in bytes (0: small). A connection reserves it from its memory budget while
	// the call runs, as nfsd reserves pc_xdrressize, so that a client pipelining
	// calls with large replies (READ) is stopped before their replies are built,
	// not after; and the reply is built in a buffer of that size.
	MaxReply int

	observe func(time.Duration) // from the Observer's CallResolver at Register; may be nil
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
	Addr    net.Addr      // the caller's address
	// Conn is the connection the call came on (nil for UDP): a handler may keep
	// it to send calls back to the caller later (Conn.Call), and learn when it
	// goes away (Conn.Done, Conn.OnClose).
	Conn *Conn

	// NoCache, set by a handler, keeps this reply out of the duplicate request
	// cache: a "try again later" answer (NFS3ERR_JUKEBOX) must not be replayed to
	// the retry.
	NoCache bool
	// SaveLater, set by a handler of a Proc.Persist procedure, lets the reply
	// go before it is saved (it is saved within 50 ms): for a call whose
	// own effect is not durable when it is answered (an export written
	// asynchronously), which need not wait for a flush its operation skipped.
	SaveLater bool
	// Intent is what SaveIntent saved in an earlier attempt of this call (the
	// same xid, address and arguments), loaded after a restart of the server
	// and resolved by DRC.Intents, when no reply followed it: the first
	// attempt may have taken effect, and the handler must find out from the
	// intent instead of doing it again. Nil for a call seen the first time.
	Intent []byte

	from     origin
	deferred *Deferred // set by Defer
	finish   finisher  // set by dispatch, for Defer
}

// origin is where a call came from, and so where its reply goes.
type origin struct {
	network string
	addr    net.Addr
	conn    *Conn          // TCP
	held    int            // the connection budget the call holds
	pc      net.PacketConn // UDP
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

// SaveIntent makes b durable as this call's intent before it returns: a
// handler of a Proc.Persist procedure calls it before its change, when
// executing the call twice would do the change twice (an append) and its
// effect can be recognised afterwards. A retransmission after a restart that
// finds the intent and no reply gets it as Call.Intent (after DRC.Intents).
// Without a reply store (or for another procedure) it does nothing: nothing
// survives a restart then.
func (c *Call) SaveIntent(b []byte) error {
	f := &c.finish
	if f.proc == nil || !f.proc.Persist || f.d.drc == nil || f.d.drc.persist == nil {
		return nil
	}
	return f.d.drc.persist.save(SavedReply{Key: f.key, At: f.d.drc.now(), Reply: b, Intent: true}, true)
}

// Defer takes the reply out of the handler's hands: the handler returns (its
// results and error are ignored), its worker is free for other calls, and the
// reply goes out when the returned Deferred's Reply is called, from any
// goroutine, as nfsd's svc_defer lets a thread drop a request it cannot answer
// yet. The call keeps its share of its connection's budget (and its reply
// cache entry stays in progress) until then: every Deferred must end with
// Reply or Drop.
func (c *Call) Defer() *Deferred {
	if c.deferred == nil {
		c.deferred = &Deferred{call: c}
	}
	return c.deferred
}

// Deferred is a call whose reply is sent later (Call.Defer).
type Deferred struct {
	call *Call
	once sync.Once
}

// finisher is what dispatch knows to complete a reply: the program, the
// procedure, the reply cache key and the start time.
type finisher struct {
	d     *dispatcher
	prog  *Program
	proc  *Proc
	key   DRCKey
	start time.Time
}

// Reply sends the call's reply: encode writes the results, and returns nil or
// an error as a Handler does. Only the first Reply or Drop counts.
func (d *Deferred) Reply(encode func(w *xdr.Writer) error) {
	d.once.Do(func() {
		rb := getBuf()
		w := xdr.NewWriter((*rb)[:0])
		w.Uint32(0)
		mark := w.Len()
		encodeAccepted(w, d.call.XID, Success)
		reply := d.call.finish.complete(d.call, w, mark, encode(w))
		*rb = reply
		d.call.from.send(rb)
	})
}

// Drop ends the call without a reply (its client is gone).
func (d *Deferred) Drop() {
	d.once.Do(func() {
		f := &d.call.finish
		if f.proc.Cache && f.d.drc != nil {
			f.d.drc.forget(f.key)
		}
		d.call.from.send(nil)
	})
}

// send delivers a reply (nil: none) of a deferred call to where it came from.
func (o *origin) send(rb *[]byte) {
	switch {
	case o.conn != nil:
		o.conn.sendReply(rb, o.held)
	case rb != nil && o.pc != nil:
		o.pc.WriteTo((*rb)[4:], o.addr)
		putBuf(rb)
	case rb != nil:
		putBuf(rb)
	}
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

// dispatcher is a table of programs and what serving them needs: the worker
// bound, the reply cache and the observer. A Server has one for its listeners;
// a Client has one for the calls its server sends back.
type dispatcher struct {
	progs    map[uint32]*Program // written only before serving
	sem      chan struct{}       // calls executing at once, across connections
	log      *slog.Logger
	observer Observer
	drc      *DRC // may be nil
}

func newDispatcher(maxInFlight int, log *slog.Logger, obs Observer, drc *DRC) *dispatcher {
	return &dispatcher{progs: map[uint32]*Program{}, sem: make(chan struct{}, maxInFlight),
		log: log, observer: obs, drc: drc}
}

// register adds p, resolving its per-procedure observers once.
func (d *dispatcher) register(p *Program) {
	if cr, ok := d.observer.(CallResolver); ok {
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
	d.progs[p.Number] = p
}

// lookup returns the procedure a call record names, reading only the fixed
// header (dispatch checks the call properly), or nil.
func (d *dispatcher) lookup(rec []byte) *Proc {
	if len(rec) < 24 {
		return nil
	}
	prog := d.progs[binary.BigEndian.Uint32(rec[12:])]
	if prog == nil {
		return nil
	}
	procs := prog.Versions[binary.BigEndian.Uint32(rec[16:])]
	proc := binary.BigEndian.Uint32(rec[20:])
	if proc >= uint32(len(procs)) {
		return nil
	}
	return &procs[proc]
}

// inline reports whether the call in rec, for procedure p (from lookup), may run
// inline (Proc.Inline).
func inline(p *Proc, rec []byte) bool {
	if p == nil || p.Inline == nil {
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
	return p.Inline(rec[off:])
}

// dispatch runs one call and returns the reply, built in buf's storage, with 4 bytes
// reserved in front for the record mark, or nil when no reply must be sent now
// (deferred is true when the handler deferred it).
func (d *dispatcher) dispatch(ctx context.Context, rec []byte, from origin, buf []byte) (reply []byte, deferred bool) {
	start := time.Now()
	network, addr := from.network, from.addr
	r := xdr.NewReader(rec)
	w := xdr.NewWriter(buf)
	w.Uint32(0) // record mark, filled in by the TCP writer
	h, err := DecodeCall(r)
	switch {
	case errors.Is(err, errRPCMismatch):
		encodeRPCMismatch(w, h.XID)
		return w.Bytes(), false
	case err != nil:
		d.log.Debug("dropping undecodable rpc message", "remote", addr, "err", err)
		return nil, false
	}
	prog := d.progs[h.Prog]
	if prog == nil {
		encodeAccepted(w, h.XID, ProgUnavail)
		return w.Bytes(), false
	}
	procs, ok := prog.Versions[h.Vers]
	if !ok {
		lo, hi := versionRange(prog)
		encodeProgMismatch(w, h.XID, lo, hi)
		return w.Bytes(), false
	}
	if h.Proc >= uint32(len(procs)) || procs[h.Proc].Handler == nil {
		encodeAccepted(w, h.XID, ProcUnavail)
		return w.Bytes(), false
	}
	proc := &procs[h.Proc]
	call := &Call{CallHeader: h, Network: network, Addr: addr, Conn: from.conn, from: from}
	switch h.Cred.Flavor {
	case AuthNone:
		call.Auth.Flavor = AuthNone
	case AuthSys:
		call.Auth, err = DecodeAuthSys(h.Cred.Body)
		if err != nil {
			encodeAuthError(w, h.XID, AuthBadCred)
			return w.Bytes(), false
		}
	default:
		encodeAuthError(w, h.XID, AuthBadCred)
		return w.Bytes(), false
	}

	var key DRCKey
	if proc.Cache && d.drc != nil {
		key = DRCKey{Addr: ipString(addr), XID: h.XID, Prog: h.Prog, Vers: h.Vers, Proc: h.Proc,
			Sum: crc32.Checksum(r.Rest()[:min(r.Remaining(), drcSumBytes)], castagnoli), Len: uint32(r.Remaining())}
		switch st, saved := d.drc.start(key); st {
		case drcInProgress:
			return nil, false
		case drcDone:
			out := make([]byte, 4+len(saved))
			copy(out[4:], saved)
			return out, false
		case drcIntent:
			call.Intent = saved
		}
	}

	call.finish = finisher{d: d, prog: prog, proc: proc, key: key, start: start}
	mark := w.Len()
	encodeAccepted(w, h.XID, Success)
	err = d.runHandler(ctx, proc, call, r, w)
	if call.deferred != nil {
		return nil, true
	}
	return call.finish.complete(call, w, mark, err), false
}

// complete finishes a reply whose results (or error) the handler wrote after
// mark: the RPC-level error, the reply cache, the observer.
func (f *finisher) complete(call *Call, w *xdr.Writer, mark int, err error) []byte {
	xid := call.XID
	if err != nil {
		w.Truncate(mark)
		var ae AuthError
		switch {
		case errors.As(err, &ae):
			encodeAuthError(w, xid, AuthStat(ae))
		case errors.Is(err, ErrGarbageArgs):
			encodeAccepted(w, xid, GarbageArgs)
		default:
			f.d.log.Warn("rpc handler failed", "program", f.prog.Name, "proc", f.proc.Name, "err", err)
			encodeAccepted(w, xid, SystemErr)
		}
	}
	reply := w.Bytes()
	if f.proc.Cache && f.d.drc != nil {
		if call.NoCache {
			f.d.drc.forget(f.key)
		} else {
			at, saved := f.d.drc.finish(f.key, reply[4:])
			if f.proc.Persist && f.d.drc.persist != nil && saved != nil {
				// The reply waits until it is durable: sent first, a crash
				// before the save would let the retransmission run again.
				err := f.d.drc.persist.save(SavedReply{Key: f.key, At: at, Reply: saved}, !call.SaveLater)
				if err != nil && !errors.Is(err, errDRCClosed) {
					f.d.log.Error("cannot save a reply for replay after a restart", "program", f.prog.Name,
						"proc", f.proc.Name, "err", err)
				}
			}
		}
	}
	if f.proc.observe != nil {
		f.proc.observe(time.Since(f.start))
	} else if f.d.observer != nil {
		f.d.observer.ObserveCall(f.prog.Name, call.Vers, f.proc.Name, time.Since(f.start))
	}
	return reply
}

// runHandler calls the handler, turning a panic into SYSTEM_ERR so that one bad
// request can never take the server down.
func (d *dispatcher) runHandler(ctx context.Context, proc *Proc, call *Call, r *xdr.Reader, w *xdr.Writer) (err error) {
	defer func() {
		if p := recover(); p != nil {
			d.log.Error("rpc handler panic", "proc", proc.Name, "panic", p)
			err = ErrSystem
		}
	}()
	return proc.Handler(ctx, call, r, w)
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

// Record buffers. Calls are read into pooled buffers and replies built in them;
// a buffer larger than maxPooledBuf (a rare huge record) is left to the
// collector rather than kept.
var bufPool sync.Pool

const (
	defaultBufSize = 64 << 10
	maxPooledBuf   = 4<<20 + 128<<10
)

func getBuf() *[]byte {
	if b, ok := bufPool.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, defaultBufSize)
	return &b
}

func putBuf(b *[]byte) {
	if cap(*b) <= maxPooledBuf {
		*b = (*b)[:0]
		bufPool.Put(b)
	}
}
