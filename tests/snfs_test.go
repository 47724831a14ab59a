package tests

import (
	"context"
	"errors"
	"os"
	"snfs/state"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"snfs/nfs3"
	"snfs/server"
	"snfs/snfs1"
	"snfs/sunrpc"
	"snfs/xdr"
)

// protoClient is a consistency-protocol client made of the raw parts (sunrpc
// and snfs1): one connection for NFS and SNFS, serving SNFS_CB. The callbacks it
// gets are recorded; answer decides each one's reply (nil: CB_OK).
type protoClient struct {
	t      *testing.T
	rpc    *sunrpc.Client
	id     snfs1.ClientID
	answer func(args *snfs1.CallbackArgs) state.Outcome // guarded by mu

	mu        sync.Mutex
	callbacks []snfs1.CallbackArgs // guarded by mu
	// granted receives each CB_GRANTED (snfs_lock_test.go); grantAnswer is
	// its reply. Guarded by mu.
	granted     chan snfs1.GrantedArgs
	grantAnswer snfs1.GrantedStat
	connects    atomic.Int32 // connections made (REGISTER sent on each)
	dead        atomic.Bool  // a killed instance: it connects no more
}

func newProtoClient(t *testing.T, e *env, name string) *protoClient {
	t.Helper()
	return newProtoClientNull(t, e, name, func(context.Context, *sunrpc.Call, *xdr.Reader, *xdr.Writer) error { return nil })
}

// newProtoClientNull is newProtoClient with null serving CB_NULL.
func newProtoClientNull(t *testing.T, e *env, name string, null sunrpc.Handler) *protoClient {
	t.Helper()
	return newProtoClientWith(t, e, name, null)
}

// newProtoClientWith is newProtoClientNull with more options for the dial.
func newProtoClientWith(t *testing.T, e *env, name string, null sunrpc.Handler, opts ...sunrpc.DialOption) *protoClient {
	t.Helper()
	var verf snfs1.Verifier
	copy(verf[:], name)
	return newProtoClientAt(t, e.addr, name, verf, null, opts...)
}

// newProtoClientAt is newProtoClientWith dialing addr (a proxy, say), with the
// boot verifier verf (another verifier under the same name is a restarted
// instance of the client).
func newProtoClientAt(t *testing.T, addr, name string, verf snfs1.Verifier, null sunrpc.Handler, opts ...sunrpc.DialOption) *protoClient {
	t.Helper()
	p := &protoClient{t: t, granted: make(chan snfs1.GrantedArgs, 16)}
	cb := &sunrpc.Program{Name: "snfs_cb", Number: snfs1.CBProgram, Versions: map[uint32][]sunrpc.Proc{snfs1.CBVersion: {
		snfs1.CBProcNull: {Name: "CB_NULL", Handler: null},
		snfs1.CBProcCallback: {Name: "CB_CALLBACK", Handler: func(ctx context.Context, c *sunrpc.Call, r *xdr.Reader, w *xdr.Writer) error {
			var a snfs1.CallbackArgs
			if a.Decode(r) != nil {
				return sunrpc.ErrGarbageArgs
			}
			// Kept past this call: not the request buffer, which is reused.
			a.File = append(nfs3.FH(nil), a.File...)
			p.mu.Lock()
			p.callbacks = append(p.callbacks, a)
			answer := p.answer
			p.mu.Unlock()
			res := snfs1.CallbackRes{Status: state.OK}
			if answer != nil {
				res.Status = answer(&a)
			}
			res.Encode(w)
			return nil
		}},
		snfs1.CBProcGranted: {Name: "CB_GRANTED", Handler: func(ctx context.Context, c *sunrpc.Call, r *xdr.Reader, w *xdr.Writer) error {
			var a snfs1.GrantedArgs
			if a.Decode(r) != nil {
				return sunrpc.ErrGarbageArgs
			}
			p.mu.Lock()
			st := p.grantAnswer
			p.mu.Unlock()
			p.granted <- a
			(&snfs1.GrantedRes{Status: st}).Encode(w)
			return nil
		}},
	}}}
	opts = append(opts, sunrpc.WithPrograms(cb),
		sunrpc.WithOnConnect(func(ctx context.Context, conn *sunrpc.Conn) error {
			if p.dead.Load() {
				return errors.New("this instance was killed")
			}
			p.connects.Add(1)
			var res snfs1.RegisterRes
			err := conn.Call(ctx, snfs1.Program, snfs1.Version, snfs1.ProcRegister, sunrpc.OpaqueAuth{Flavor: sunrpc.AuthNone},
				&snfs1.RegisterArgs{Name: []byte(name), ClientVerf: verf}, &res)
			if err == nil && res.Status != nfs3.OK {
				err = res.Status
			}
			p.mu.Lock()
			p.id = res.Client
			p.mu.Unlock()
			return err
		}))
	c, err := sunrpc.Dial(ctx, "tcp", addr, snfs1.Program, snfs1.Version, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	p.rpc = c
	return p
}

func (p *protoClient) nfs() *sunrpc.Client { return p.rpc.Program(nfs3.Program, nfs3.Version) }

func (p *protoClient) open(fh nfs3.FH, mode state.Mode) (*snfs1.OpenRes, error) {
	p.mu.Lock()
	id := p.id
	p.mu.Unlock()
	var res snfs1.OpenRes
	err := p.rpc.Call(ctx, snfs1.ProcOpen, &snfs1.OpenArgs{Client: id, File: fh, Mode: mode}, &res)
	return &res, err
}

// openCaching opens fh and retries (closing again) until caching is granted:
// the server grants it only once the client's callback path has answered its
// probe, which runs right after REGISTER.
func (p *protoClient) openCaching(fh nfs3.FH, mode state.Mode) *snfs1.OpenRes {
	p.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := p.open(fh, mode)
		ok(p.t, "OPEN", res.Status, err)
		if res.CacheEnabled {
			return res
		}
		p.close(fh, mode, false)
		if time.Now().After(deadline) {
			p.t.Fatal("OPEN never granted caching")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *protoClient) close(fh nfs3.FH, mode state.Mode, dirty bool) {
	p.t.Helper()
	p.mu.Lock()
	id := p.id
	p.mu.Unlock()
	var res snfs1.CloseRes
	err := p.rpc.Call(ctx, snfs1.ProcClose, &snfs1.CloseArgs{Client: id, File: fh, Mode: mode, Dirty: dirty}, &res)
	ok(p.t, "CLOSE", res.Status, err)
}

func (p *protoClient) setAnswer(f func(*snfs1.CallbackArgs) state.Outcome) {
	p.mu.Lock()
	p.answer = f
	p.mu.Unlock()
}

func (p *protoClient) got() []snfs1.CallbackArgs {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]snfs1.CallbackArgs(nil), p.callbacks...)
}

// TestSNFSWriteSharing: A opens a file for writing and may cache it; when B
// opens it for reading, A is called back (write back and invalidate) before B's
// OPEN returns, and neither may cache while both have it open (WRITE_SHARED).
// After both close, a fresh OPEN may cache again, with a new version.
func TestSNFSWriteSharing(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	// A short recall back-off: openCaching below waits it out.
	const backoff = 100 * time.Millisecond
	e := newEnvWith(t, "rw,no_root_squash", func(c *server.Config) { c.Table.RecallBackoff = backoff })
	fh := e.create(e.nfs, e.root, "shared", 0o644)
	a := newProtoClient(t, e, "client-a")
	b := newProtoClient(t, e, "client-b")

	ra := a.openCaching(fh, state.Write)
	if ra.CacheVersion == 0 {
		t.Fatalf("an open must carry a version: %+v", ra.OpenOK)
	}
	// A's delayed write, which the callback makes it write back.
	a.setAnswer(func(args *snfs1.CallbackArgs) state.Outcome {
		var res nfs3.WriteRes
		err := a.nfs().Call(ctx, nfs3.ProcWrite, &nfs3.WriteArgs{File: fh, Count: 5, Stable: nfs3.FileSync, Data: []byte("hello")}, &res)
		if err != nil || res.Status != nfs3.OK {
			t.Errorf("write-back during the callback: %v %v", err, res.Status)
		}
		return state.OK
	})
	rb, err := b.open(fh, state.Read)
	ok(t, "B OPEN", rb.Status, err)
	cbs := a.got()
	if len(cbs) != 1 || cbs[0].Mode != state.WritebackInvalidate {
		t.Fatalf("A's callbacks: %+v, want one WRITEBACK_INVALIDATE", cbs)
	}
	if rb.CacheEnabled {
		t.Fatal("B may cache a write-shared file")
	}
	if rb.Attr == nil || rb.Attr.Size != 5 {
		t.Fatalf("B's OPEN attributes do not show A's write-back: %+v", rb.Attr)
	}
	if data, _ := os.ReadFile(e.path("shared")); string(data) != "hello" {
		t.Fatalf("file holds %q after the write-back", data)
	}
	a.close(fh, state.Write, false)
	b.close(fh, state.Read, false)

	// openCaching opens again until the recall back-off has passed and the
	// OPEN may cache.
	r2 := b.openCaching(fh, state.Read)
	if r2.CacheVersion != r2.OldCacheVersion || r2.CacheVersion < ra.CacheVersion {
		t.Fatalf("a read open returns the current version twice: %+v after %+v", r2.OpenOK, ra.OpenOK)
	}
	b.close(fh, state.Read, false)
}

// TestSNFSUnresponsiveClient: a client that never answers its callback makes
// the opener wait at most the jukebox bound per try; once the callback timeout
// passes, the opener's OPEN succeeds and the silent client is fenced: its
// requests on the file fail with SNFS_ERR_FENCED until it opens the file again.
func TestSNFSUnresponsiveClient(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	e.restartWith(func(c *server.Config) { c.Table.CallbackTimeout = 2 * time.Second })
	fh := e.create(e.nfs, e.root, "silent", 0o644)
	a := newProtoClient(t, e, "silent-a")
	b := newProtoClient(t, e, "opener-b")
	a.openCaching(fh, state.Write)
	block := make(chan struct{})
	defer close(block)
	a.setAnswer(func(*snfs1.CallbackArgs) state.Outcome { <-block; return state.OK })

	start := time.Now()
	jukeboxes := 0
	for {
		res, err := b.open(fh, state.Write)
		if err != nil {
			t.Fatal(err)
		}
		if res.Status == nfs3.ErrJukebox {
			jukeboxes++
			if time.Since(start) > 20*time.Second {
				t.Fatal("OPEN still answered JUKEBOX 20 s after the callback timeout")
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		ok(t, "B OPEN", res.Status, err)
		break
	}
	if jukeboxes == 0 {
		t.Fatal("the opener never got NFS3ERR_JUKEBOX while the callback was out")
	}
	var wres nfs3.WriteRes
	err := a.nfs().Call(ctx, nfs3.ProcWrite, &nfs3.WriteArgs{File: fh, Count: 1, Stable: nfs3.FileSync, Data: []byte("x")}, &wres)
	if err != nil || wres.Status != snfs1.ErrFenced {
		t.Fatalf("the fenced client's WRITE: %v %v, want SNFS_ERR_FENCED", err, wres.Status)
	}
	b.close(fh, state.Write, false)
	res, err := a.open(fh, state.Read)
	ok(t, "OPEN again by the fenced client", res.Status, err)
}

// TestSNFSStaleClientID: an id the server does not know is refused with
// SNFS_ERR_STALE_CLIENTID.
func TestSNFSStaleClientID(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	e := newEnv(t, "rw,no_root_squash")
	fh := e.create(e.nfs, e.root, "f", 0o644)
	a := newProtoClient(t, e, "client-a")
	var res snfs1.OpenRes
	err := a.rpc.Call(ctx, snfs1.ProcOpen, &snfs1.OpenArgs{Client: 99999, File: fh, Mode: state.Read}, &res)
	if err != nil || res.Status != snfs1.ErrStaleClientID {
		t.Fatalf("OPEN with an unknown id: %v %v", err, res.Status)
	}
	if !errors.Is(res.Status, snfs1.ErrStaleClientID) {
		t.Fatal("status is not an error value")
	}
}

// restartWith changes the server's configuration and restarts it.
func (e *env) restartWith(f func(*server.Config)) {
	f(&e.cfg)
	e.restart()
}
