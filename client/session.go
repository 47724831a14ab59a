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
	"time"

	"snfs/mount3"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/sunrpc"
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
	// OnServerRestart is called when a REGISTER returns a server verifier other
	// than the previous one: the server restarted and lost every open of this
	// client, which must open its files again. It runs on its own goroutine,
	// owned by the session (Disconnect waits for it), so it may call the session.
	OnServerRestart func()
	// Observer, if set, is told about every call of the session (WithObserver),
	// the REGISTER on each new connection included.
	Observer sunrpc.Observer
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
	onRestart func()
	reg       chan struct{}   // capacity 1: held while re-registering after STALE_CLIENTID
	obs       sunrpc.Observer // may be nil

	mu         sync.Mutex
	registered bool           // a REGISTER succeeded; guarded by mu
	id         snfs1.ClientID // guarded by mu
	serverVerf snfs1.Verifier // guarded by mu
	cbTimeout  time.Duration  // guarded by mu
	closed     bool           // guarded by mu: no new OnServerRestart goroutines
	restarts   sync.WaitGroup // OnServerRestart calls; Add under mu while !closed
}

// DialSession connects to the snfs server at addr over network (TCP: callbacks
// need a connection) and registers. The session reconnects by itself when the
// connection breaks; Disconnect ends it.
func DialSession(ctx context.Context, network, addr string, cfg SessionConfig) (*Session, error) {
	s := &Session{name: cfg.Name, verf: cfg.Verifier, timeout: cfg.Timeout, log: cfg.Logger,
		onRestart: cfg.OnServerRestart, reg: make(chan struct{}, 1), obs: cfg.Observer}
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
	opts := []sunrpc.DialOption{sunrpc.WithPrograms(callbackProgram(cfg.Handler)), sunrpc.WithOnConnect(s.onConnect)}
	if cfg.Timeout > 0 {
		opts = append(opts, sunrpc.WithTimeout(cfg.Timeout))
	}
	if cfg.Observer != nil {
		opts = append(opts, WithObserver(cfg.Observer))
	}
	c, err := sunrpc.Dial(ctx, network, addr, snfs1.Program, snfs1.Version, opts...)
	if err != nil {
		return nil, fmt.Errorf("snfs session %q to %s: %w", s.name, addr, err)
	}
	s.rpc = c
	return s, nil
}

// onConnect registers on a new connection before any other call uses it: the
// server moves this client's callback path to it.
func (s *Session) onConnect(ctx context.Context, c *sunrpc.Conn) error {
	if s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	var res snfs1.RegisterRes
	start := time.Now()
	err := c.Call(ctx, snfs1.Program, snfs1.Version, snfs1.ProcRegister, s.auth,
		&snfs1.RegisterArgs{Name: []byte(s.name), ClientVerf: s.verf}, &res)
	if s.obs != nil && err == nil {
		s.obs.ObserveCall("snfs", snfs1.Version, snfs1.ProcNames[snfs1.ProcRegister], time.Since(start))
	}
	if err != nil {
		return fmt.Errorf("snfs REGISTER %q: %w", s.name, err)
	}
	if res.Status != nfs3.OK {
		return &StatusError{Proc: "REGISTER", Status: res.Status}
	}
	s.registeredAs(&res, c.ID())
	return nil
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
	s.registeredAs(&res, 0)
	return nil
}

// registeredAs records a successful REGISTER's result (conn: the connection's
// ID, 0 if not known) and starts OnServerRestart if the server verifier changed.
func (s *Session) registeredAs(res *snfs1.RegisterRes, conn uint64) {
	s.mu.Lock()
	restarted := s.registered && res.ServerVerf != s.serverVerf
	old := s.id
	s.registered, s.id, s.serverVerf = true, res.Client, res.ServerVerf
	s.cbTimeout = time.Duration(res.CallbackTimeoutMs) * time.Millisecond
	if restarted && s.onRestart != nil && !s.closed {
		s.restarts.Add(1)
		go func() {
			defer s.restarts.Done()
			s.onRestart()
		}()
	}
	s.mu.Unlock()
	s.log.Debug("snfs registered", "name", s.name, "clientid", res.Client, "conn", conn,
		"callback_timeout_ms", res.CallbackTimeoutMs)
	switch {
	case restarted:
		s.log.Info("snfs server restarted: its opens of this client are lost", "name", s.name,
			"old_clientid", old, "clientid", res.Client)
	case old != 0 && old != res.Client:
		s.log.Warn("snfs client id changed", "name", s.name, "old_clientid", old, "clientid", res.Client)
	}
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
	err := s.rpc.Close()
	s.restarts.Wait()
	return err
}

// StatusError is an SNFS reply whose status is not OK. It unwraps to the
// status (an nfs3.Status, snfs1's own included), so errors.Is(err,
// snfs1.ErrFenced) or errors.Is(err, nfs3.ErrStale) tests for one.
type StatusError struct {
	Proc   string  // "OPEN", "OPEN_NAME", "CLOSE", "REGISTER"
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
