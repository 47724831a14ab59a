package client

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"snfs/mount3"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/sunrpc"
	"snfs/xdr"
)

// SessionConfig configures DialSession.
type SessionConfig struct {
	// Name identifies this client instance to the server across reconnects and
	// restarts: stable, and unique among the server's clients (the FUSE client
	// uses hostname + ":" + mount point). At most snfs1.NameLen bytes. Empty
	// means the host name, which is right only for one session per host.
	Name string
	// Verifier is the client's boot verifier: the server keeps a client's state
	// across reconnects while it stays the same, and forgets it when it changes
	// (the client restarted). The zero value means a fresh random one; a client
	// that keeps its cache across restarts passes the verifier it persisted.
	Verifier snfs1.Verifier
	// Handler serves the server's callbacks; nil answers CB_STALE to every one
	// (a client that caches nothing).
	Handler CallbackHandler
	// Timeout is how long a call waits for its reply before it is sent again
	// (sunrpc.WithTimeout) and bounds the REGISTER on each new connection; 0
	// keeps sunrpc's default.
	Timeout time.Duration
	// Logger logs registrations and retries; nil means slog.Default().
	Logger *slog.Logger
	// Reclaim, if set, reports what this client holds of each file (opens by
	// mode, caching, dirty data, the version its cache holds) when a REGISTER
	// returns a server verifier other than the previous one: the server
	// restarted, and rebuilds its state from its clients' reports during its
	// grace period (docs/protocol.md, "Grace period"). The session sends the
	// items in RECLAIM calls of at most snfs1.ReclaimMax, then RECLAIM_DONE,
	// before any other call uses the new connection. Reclaim runs inside the
	// connect hook: it must not call the session. Nil reclaims nothing (the
	// session still sends RECLAIM_DONE, so the server need not wait for it).
	Reclaim func(ctx context.Context) []snfs1.ReclaimItem
	// ReclaimLocks, if set, re-sends the locks this client holds after a
	// server restart (docs/protocol.md, "LOCK" and "Server restart"), in the
	// same reclaim, before the RECLAIMs: it calls lock once per lock (a LOCK
	// with reclaim TRUE and without block, on the reclaiming connection;
	// lock fills in the client id) and learns from each answer whether the
	// server took it. verf is the new server verifier. An error from lock
	// (the connection broke) returned by ReclaimLocks leaves the reclaim
	// due, as a failed RECLAIM does: it runs again on the next connection.
	// It runs inside the connect hook: it must not call the session.
	ReclaimLocks func(ctx context.Context, verf snfs1.Verifier, lock func(a *snfs1.LockArgs) (*snfs1.LockRes, error)) error
	// ReclaimPermits, if set, reclaims the write-back permits this client
	// held before a server restart with records logged under them still
	// to be reintegrated (docs/protocol.md, "RECLAIM_PERMIT"), in the same
	// reclaim, after the RECLAIMs and before RECLAIM_DONE, and only when
	// the server took the RECLAIMs: it calls reclaim with at most
	// snfs1.ReclaimPermitMax directories at a time, which answers one
	// permit id per directory (0: not granted again); a server without
	// the procedure (PROC_UNAVAIL) grants none. An error from reclaim (the
	// connection broke) returned by ReclaimPermits leaves the reclaim due.
	// It runs inside the connect hook: it must not call the session.
	// verf is the new server verifier, as ReclaimLocks's.
	ReclaimPermits func(ctx context.Context, verf snfs1.Verifier, reclaim func(dirs []nfs3.FH) ([]uint64, error)) error
	// OnServerRestart is called after the reclaim that follows a server restart
	// (see Reclaim). refused is true when the server did not take the reclaim
	// (SNFS_ERR_NOGRACE: its grace period was over, or it did not know this
	// client): it holds no open, caching or dirty record of this client, and
	// every reclaimed item must be treated as fenced. It runs on its own
	// goroutine, owned by the session (Disconnect waits for it), so it may call
	// the session.
	OnServerRestart func(refused bool)
	// Observer, if set, is told about every call of the session (WithObserver),
	// the REGISTER on each new connection included.
	Observer sunrpc.Observer
	// NotRespondingAfter is LogServerState's after, on Logger: 0 is
	// NotRespondingAfter, < 0 logs no outage.
	NotRespondingAfter time.Duration
	// CallGate, if set, passes every call of the session through it
	// (sunrpc.WithCallGate: a mount's disconnected operation); the
	// REGISTER and reclaim of a connect hook do not pass.
	CallGate sunrpc.CallGate
}

// Session is a client of the snfs consistency protocol: one connection to the
// server carrying NFSv3, MOUNT and SNFS calls, and the server's callbacks back
// (served through SessionConfig.Handler). It registers on every new connection
// (the first call on it, so callbacks follow the client after a reconnect)
// with the same name and verifier. It is safe for concurrent use.
type Session struct {
	rpc       *sunrpc.Client // the SNFS program; owns the connection, its views share it
	name      string
	verf      snfs1.Verifier
	auth      sunrpc.OpaqueAuth // as rpc's: AUTH_SYS of this process
	timeout   time.Duration
	log       *slog.Logger
	onRestart func(refused bool)
	reclaim   func(ctx context.Context) []snfs1.ReclaimItem
	reclaimLk func(ctx context.Context, verf snfs1.Verifier, lock func(a *snfs1.LockArgs) (*snfs1.LockRes, error)) error
	reclaimPm func(ctx context.Context, verf snfs1.Verifier, reclaim func(dirs []nfs3.FH) ([]uint64, error)) error
	reg       chan struct{}   // capacity 1: held while re-registering after STALE_CLIENTID
	obs       sunrpc.Observer // may be nil
	reach     *Reach          // whether the server is reached (Reach)
	handBacks handBackGate    // hand-back answers decided, not yet queued (handback.go)

	mu         sync.Mutex
	registered bool           // a REGISTER succeeded; guarded by mu
	id         snfs1.ClientID // guarded by mu
	serverVerf snfs1.Verifier // guarded by mu
	cbTimeout  time.Duration  // guarded by mu
	// reclaimDue: the server restarted and this client has not finished its
	// reclaim (the connection broke during it): the next REGISTER reclaims
	// even though the server verifier is no longer new. Guarded by mu.
	reclaimDue bool
	closed     bool           // guarded by mu: no new OnServerRestart goroutines
	restarts   sync.WaitGroup // OnServerRestart calls; Add under mu while !closed

	// probe: the connection whose REGISTER's probe (CB_NULL) the session
	// waits for, and closed once it answered one (waitProbe).
	probeMu   sync.Mutex
	probeConn *sunrpc.Conn  // guarded by probeMu
	probeDone chan struct{} // guarded by probeMu

	lost     chan struct{}               // capacity 1: a connection that registered closed
	connLost atomic.Uint64               // registered connections closed (ConnectionsLost, dirs.go)
	cur      atomic.Pointer[sunrpc.Conn] // the latest connection REGISTER was answered on (CallbacksServing)
	keepStop context.CancelFunc          // stops keepConnected (Disconnect)
	keepDone chan struct{}               // closed when keepConnected returned
}

// DialSession connects to the snfs server at addr over network (TCP: callbacks
// need a connection) and registers. The session reconnects by itself when the
// connection breaks; Disconnect ends it.
func DialSession(ctx context.Context, network, addr string, cfg SessionConfig) (*Session, error) {
	s := &Session{name: cfg.Name, verf: cfg.Verifier, timeout: cfg.Timeout, log: cfg.Logger,
		onRestart: cfg.OnServerRestart, reclaim: cfg.Reclaim, reclaimLk: cfg.ReclaimLocks, reclaimPm: cfg.ReclaimPermits, reg: make(chan struct{}, 1), lost: make(chan struct{}, 1), obs: cfg.Observer,
		reach: NewReach(addr)}
	host, herr := os.Hostname()
	if s.name == "" {
		if herr != nil {
			return nil, fmt.Errorf("snfs session: no client name: %w", herr)
		}
		if host == "" {
			return nil, errors.New("snfs session: no client name and an empty host name")
		}
		s.name = host
	}
	if len(s.name) > snfs1.NameLen {
		return nil, fmt.Errorf("snfs session: client name of %d bytes (at most %d)", len(s.name), snfs1.NameLen)
	}
	if s.verf == (snfs1.Verifier{}) {
		if _, err := io.ReadFull(rand.Reader, s.verf[:]); err != nil {
			return nil, fmt.Errorf("snfs session: client verifier: %w", err)
		}
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	// As sunrpc.Dial's default credential, so that the REGISTER the hook sends
	// and the calls made through s.rpc carry the same identity.
	s.auth = sunrpc.EncodeAuthSys(sunrpc.AuthSysParams{MachineName: host, UID: uint32(os.Getuid()), GID: uint32(os.Getgid())})
	opts := []sunrpc.DialOption{sunrpc.WithPrograms(callbackProgram(cfg.Handler, s.probed, &s.handBacks)), sunrpc.WithOnConnect(s.onConnect)}
	if cfg.Timeout > 0 {
		opts = append(opts, sunrpc.WithTimeout(cfg.Timeout))
	}
	if cfg.Observer != nil {
		opts = append(opts, WithObserver(cfg.Observer))
	}
	opts = append(opts, TrackServerState(s.log, addr, cfg.NotRespondingAfter, s.reach))
	if cfg.CallGate != nil {
		opts = append(opts, sunrpc.WithCallGate(cfg.CallGate))
	}
	c, err := sunrpc.Dial(ctx, network, addr, snfs1.Program, snfs1.Version, opts...)
	if err != nil {
		// sunrpc.Dial's errors name the address already.
		return nil, fmt.Errorf("snfs session %q: %w", s.name, err)
	}
	s.rpc = c
	kctx, stop := context.WithCancel(context.Background())
	s.keepStop, s.keepDone = stop, make(chan struct{})
	go s.keepConnected(kctx)
	return s, nil
}

// onConnect registers on a new connection before any other call uses it: the
// server moves this client's callback path to it. If the server restarted, the
// client reclaims its state on it first.
func (s *Session) onConnect(ctx context.Context, c *sunrpc.Conn) error {
	call := func(ctx context.Context, proc uint32, args xdr.Encoder, res xdr.Decoder) error {
		if s.timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, s.timeout)
			defer cancel()
		}
		start := time.Now()
		err := c.Call(ctx, snfs1.Program, snfs1.Version, proc, s.auth, args, res)
		if s.obs != nil && err == nil {
			s.obs.ObserveCall("snfs", snfs1.Version, snfs1.ProcNames[proc], time.Since(start))
		}
		return err
	}
	probe := s.expectProbe(c)
	var res snfs1.RegisterRes
	err := call(ctx, snfs1.ProcRegister, &snfs1.RegisterArgs{Name: []byte(s.name), ClientVerf: s.verf}, &res)
	if err != nil {
		return fmt.Errorf("snfs REGISTER %q: %w", s.name, err)
	}
	if res.Status != nfs3.OK {
		return &StatusError{Proc: "REGISTER", Status: res.Status}
	}
	s.cur.Store(c)
	if s.registeredAs(&res, c.ID()) {
		if err := s.reclaimAll(ctx, res.Client, call); err != nil {
			return err
		}
	}
	waitProbe(ctx, c, probe)
	s.reach.connOpened(c)
	c.OnClose(func() {
		s.connLost.Add(1)
		select {
		case s.lost <- struct{}{}:
		default:
		}
	})
	return nil
}

// keepConnected connects again as soon as the connection breaks, not at the
// next call: an idle client must learn of a server restart (and reclaim in the
// grace period) and move its callback path without waiting for its
// application. It backs off up to keepBackoff between attempts and ends with
// Disconnect.
func (s *Session) keepConnected(ctx context.Context) {
	defer close(s.keepDone)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.lost:
		}
		wait := 20 * time.Millisecond
		for {
			err := s.Null(ctx)
			if err == nil || ctx.Err() != nil {
				break
			}
			s.reach.failed(err)
			s.log.Debug("snfs session: reconnecting", "name", s.name, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, keepBackoff)
		}
	}
}

// keepBackoff bounds the wait between two reconnection attempts.
const keepBackoff = time.Second

// probeWait bounds how long a new connection's first calls wait for the
// server's probe of the callback path (waitProbe).
const probeWait = 2 * time.Second

// expectProbe makes c the connection whose next CB_NULL the session waits
// for (its REGISTER, about to be sent, makes the server probe it), and
// returns the channel closed when it came.
func (s *Session) expectProbe(c *sunrpc.Conn) chan struct{} {
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	s.probeConn, s.probeDone = c, make(chan struct{})
	return s.probeDone
}

// probed is told of each CB_NULL the session answered (callbackProgram),
// its reply already handed to conn.
func (s *Session) probed(conn *sunrpc.Conn) {
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	if conn == s.probeConn && s.probeDone != nil {
		close(s.probeDone)
		s.probeConn, s.probeDone = nil, nil
	}
}

// waitProbe waits, at most probeWait, for the CB_NULL the server sends on a
// connection after answering its REGISTER (docs/protocol.md section 7).
// Until the session has answered it, the server answers every OPEN without
// caching and refuses every GET_PERMIT and directory promise: without the
// wait, a mount's first calls after it started, or after a reconnection,
// often overtook the probe (under load, always), and a refused GET_PERMIT
// is not asked again for a while. A server that does not probe costs each
// connection probeWait once; a connection that goes meanwhile (the server
// stopped before it probed) ends the wait.
func waitProbe(ctx context.Context, c *sunrpc.Conn, probed <-chan struct{}) {
	t := time.NewTimer(probeWait)
	defer t.Stop()
	select {
	case <-probed:
	case <-c.Done():
	case <-t.C:
	case <-ctx.Done():
	}
}

// reregister sends REGISTER again (on the current connection) after a call
// with client id stale got SNFS_ERR_STALE_CLIENTID. Concurrent callers wait for
// one REGISTER; a caller whose id was already replaced sends none.
func (s *Session) reregister(ctx context.Context, stale snfs1.ClientID) error {
	select {
	case s.reg <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.reg }()
	if s.ClientID() != stale {
		return nil
	}
	var res snfs1.RegisterRes
	err := s.rpc.Call(ctx, snfs1.ProcRegister, &snfs1.RegisterArgs{Name: []byte(s.name), ClientVerf: s.verf}, &res)
	if err != nil {
		return fmt.Errorf("snfs REGISTER %q: %w", s.name, err)
	}
	if res.Status != nfs3.OK {
		return &StatusError{Proc: "REGISTER", Status: res.Status}
	}
	if s.registeredAs(&res, 0) {
		return s.reclaimAll(ctx, res.Client, func(ctx context.Context, proc uint32, args xdr.Encoder, res xdr.Decoder) error {
			return s.rpc.Call(ctx, proc, args, res)
		})
	}
	return nil
}

// registeredAs records a successful REGISTER's result (conn: the connection's
// ID, 0 if not known) and reports whether the client must reclaim: the server
// verifier changed, or an earlier reclaim did not finish.
func (s *Session) registeredAs(res *snfs1.RegisterRes, conn uint64) (reclaim bool) {
	s.mu.Lock()
	restarted := s.registered && res.ServerVerf != s.serverVerf
	reclaim = restarted || s.reclaimDue
	s.reclaimDue = reclaim
	old := s.id
	s.registered, s.id, s.serverVerf = true, res.Client, res.ServerVerf
	s.cbTimeout = time.Duration(res.CallbackTimeoutMs) * time.Millisecond
	s.mu.Unlock()
	s.log.Debug("snfs registered", "name", s.name, "clientid", res.Client, "conn", conn,
		"callback_timeout_ms", res.CallbackTimeoutMs)
	switch {
	case restarted:
		s.reach.restarted()
		s.log.Info("snfs server restarted: reclaiming this client's state", "name", s.name,
			"old_clientid", old, "clientid", res.Client)
	case old != 0 && old != res.Client:
		s.log.Warn("snfs client id changed", "name", s.name, "old_clientid", old, "clientid", res.Client)
	}
	return reclaim
}

// reclaimAll sends the locks ReclaimLocks holds (LOCK with reclaim TRUE),
// what Reclaim reports in RECLAIM calls of at most snfs1.ReclaimMax items,
// then RECLAIM_DONE, through call, and then starts OnServerRestart. A call
// that fails leaves the reclaim due, for the next connection (the server
// ignores items it already has from this client, and a lock reclaimed again
// by its owner replaces itself).
func (s *Session) reclaimAll(ctx context.Context, id snfs1.ClientID,
	call func(ctx context.Context, proc uint32, args xdr.Encoder, res xdr.Decoder) error) error {
	// The locks go first: a RECLAIM of a file with dirty data takes a lease
	// on it, which the server's open for a lock would break with a
	// callback to this client, in the middle of its reclaim.
	if s.reclaimLk != nil {
		verf := s.ServerVerifier()
		err := s.reclaimLk(ctx, verf, func(a *snfs1.LockArgs) (*snfs1.LockRes, error) {
			a.Client, a.Reclaim, a.Block = id, true, false
			var res snfs1.LockRes
			if err := call(ctx, snfs1.ProcLock, a, &res); err != nil {
				return nil, fmt.Errorf("snfs LOCK (reclaim): %w", err)
			}
			return &res, nil
		})
		if err != nil {
			return err
		}
	}
	var items []snfs1.ReclaimItem
	if s.reclaim != nil {
		items = s.reclaim(ctx)
	}
	refused := false
	send := func(proc uint32, args xdr.Encoder) error {
		var res snfs1.StatusRes
		err := call(ctx, proc, args, &res)
		var re *sunrpc.RPCError
		switch {
		case errors.As(err, &re) && re.Accept == sunrpc.ProcUnavail:
			refused = true // a server without crash recovery kept nothing
		case err != nil:
			return fmt.Errorf("snfs %s: %w", snfs1.ProcNames[proc], err)
		case res.Status == snfs1.ErrNoGrace:
			refused = true
		case res.Status != nfs3.OK:
			return &StatusError{Proc: snfs1.ProcNames[proc], Status: res.Status}
		}
		return nil
	}
	for i := 0; i < len(items) && !refused; i += snfs1.ReclaimMax {
		if err := send(snfs1.ProcReclaim, &snfs1.ReclaimArgs{Client: id, Items: items[i:min(i+snfs1.ReclaimMax, len(items))]}); err != nil {
			return err
		}
	}
	if !refused && s.reclaimPm != nil {
		reclaim := func(dirs []nfs3.FH) ([]uint64, error) { return reclaimPermits(ctx, id, dirs, call) }
		if err := s.reclaimPm(ctx, s.ServerVerifier(), reclaim); err != nil {
			return err
		}
	}
	if !refused {
		if err := send(snfs1.ProcReclaimDone, &snfs1.ReclaimDoneArgs{Client: id}); err != nil {
			return err
		}
	}
	if refused {
		s.log.Warn("snfs server refused the reclaim (its grace period is over, or it did not know this client): "+
			"every open and cached file of this client is fenced", "name", s.name, "items", len(items))
	} else {
		s.log.Info("snfs reclaim done", "name", s.name, "items", len(items))
	}
	s.mu.Lock()
	s.reclaimDue = false
	if s.onRestart != nil && !s.closed {
		s.restarts.Add(1)
		recovered := s.reach.recovered()
		go func() {
			defer s.restarts.Done()
			defer recovered()
			s.onRestart(refused)
		}()
	} else {
		s.reach.recovered()()
	}
	s.mu.Unlock()
	return nil
}

// Unregister is UNREGISTER (docs/protocol.md, "UNREGISTER"), for a clean
// unmount once everything is written back and closed: the server forgets this
// client, durably, so that it does not wait for it after a restart. The
// session is not to be used afterwards but to Disconnect.
func (s *Session) Unregister(ctx context.Context) error {
	id := s.ClientID()
	var res snfs1.UnregisterRes
	if err := s.rpc.Call(ctx, snfs1.ProcUnregister, &snfs1.UnregisterArgs{Client: id}, &res); err != nil {
		return fmt.Errorf("snfs UNREGISTER: %w", err)
	}
	switch res.Status {
	case nfs3.OK, snfs1.ErrStaleClientID: // already forgotten
		return nil
	}
	return &StatusError{Proc: "UNREGISTER", Status: res.Status}
}

// ClientID is the id of the latest successful REGISTER.
func (s *Session) ClientID() snfs1.ClientID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id
}

// ServerVerifier is the server verifier of the latest successful REGISTER.
func (s *Session) ServerVerifier() snfs1.Verifier {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.serverVerf
}

// ClientVerifier is the boot verifier the session registers with.
func (s *Session) ClientVerifier() snfs1.Verifier { return s.verf }

// Name is the client name the session registers with.
func (s *Session) Name() string { return s.name }

// CallbackTimeout is how long the server waits for the answer to a callback
// before it fences this client for the file (from the latest REGISTER).
func (s *Session) CallbackTimeout() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cbTimeout
}

// NFS returns an NFSv3 client on the session's connection. Do not Close it:
// Disconnect closes the connection.
func (s *Session) NFS() *NFS { return &NFS{s.rpc.Program(nfs3.Program, nfs3.Version)} }

// Mount returns a MOUNT v3 client on the session's connection. Do not Close it:
// Disconnect closes the connection.
func (s *Session) Mount() *Mounter { return &Mounter{s.rpc.Program(mount3.Program, mount3.Version)} }

// CallbacksServing reports the server's calls (callbacks) read on the
// latest registered connection and not yet answered. A reply read on that
// connection followed every callback the server wrote before it; once this
// is 0 after the reply, all of them have been served (the leases of
// docs/protocol.md 10 and 20.4: a client must have acted on them before it
// relies on the reply).
func (s *Session) CallbacksServing() int {
	if c := s.cur.Load(); c != nil {
		return c.Serving()
	}
	return 0
}

// Null calls the SNFS program's NULL procedure (a ping).
func (s *Session) Null(ctx context.Context) error {
	if err := s.rpc.Call(ctx, snfs1.ProcNull, nil, nil); err != nil {
		return fmt.Errorf("snfs NULL: %w", err)
	}
	return nil
}

// Disconnect closes the connection (calls in flight fail with
// sunrpc.ErrClientClosed), waits for the callbacks being served and for
// OnServerRestart calls, and ends the session. It sends no CLOSE: the server
// keeps the client's opens until the client registers with another verifier.
func (s *Session) Disconnect() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.keepStop()
	<-s.keepDone
	err := s.rpc.Close()
	s.restarts.Wait()
	return err
}

// StatusError is an SNFS reply whose status is not OK. It unwraps to the
// status (an nfs3.Status, snfs1's own included), so errors.Is(err,
// snfs1.ErrFenced) or errors.Is(err, nfs3.ErrStale) tests for one.
type StatusError struct {
	Proc   string  // "OPEN", "OPEN_NAME", "CLOSE", "REGISTER", "RECLAIM", ...
	File   nfs3.FH // the handle (the directory's for OPEN_NAME); nil for REGISTER
	Name   string  // OPEN_NAME's name
	Status snfs1.Status
}

func (e *StatusError) Error() string {
	s := "snfs " + e.Proc
	if e.File != nil {
		s += " " + shortFH(e.File)
	}
	if e.Name != "" {
		s += fmt.Sprintf(" %q", e.Name)
	}
	return s + ": " + snfs1.StatusName(e.Status)
}

// Unwrap returns the status.
func (e *StatusError) Unwrap() error { return e.Status }

// shortFH formats a handle for messages: hex, its middle elided when long.
func shortFH(fh nfs3.FH) string {
	if len(fh) <= 8 {
		return fmt.Sprintf("fh %x", []byte(fh))
	}
	return fmt.Sprintf("fh %x…%x", []byte(fh[:4]), []byte(fh[len(fh)-4:]))
}
