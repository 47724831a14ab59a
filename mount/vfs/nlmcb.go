package vfs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"snfs/nfs3"
	"snfs/nlm4"
	"snfs/portmap"
	"snfs/sunrpc"
	"snfs/xdr"
)

// The nfs mode mount's own lock manager, the part a server calls (XNFS
// chapter 10): GRANTED and GRANTED_MSG, which grant a blocked LOCK
// (nlmGranted). The server finds it through this host's rpcbind
// (NLMConfig.RPCBind) at the address the LOCK came from; it listens on TCP
// and UDP on one port, as Linux's lockd.

type nlmCallback struct {
	srv      *sunrpc.Server
	port     int
	rpcbind  string // where it was registered ("": nowhere)
	peerFile string // its listing for this host's other mounts ("": none)
	wg       sync.WaitGroup
}

// Passing GRANTED on (NLMConfig.PeerDir): the server calls the one lock
// manager the host's rpcbind lists, which may be another mount's. Each mount
// lists its callback port in PeerDir, in a file named by a hash of its
// caller_name; a GRANTED for another caller_name is passed on to that mount's
// service on 127.0.0.1, and its answer returned.

func peerFileName(dir, callerName string) string {
	sum := sha256.Sum256([]byte(callerName))
	return filepath.Join(dir, hex.EncodeToString(sum[:16]))
}

// listPeer writes this service's port under callerName in dir.
func (cb *nlmCallback) listPeer(dir, callerName string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f := peerFileName(dir, callerName)
	tmp := f + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(cb.port)+"\n"), 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, f); err != nil {
		return err
	}
	cb.peerFile = f
	return nil
}

// unlistPeer removes the listing if it is still this service's.
func (cb *nlmCallback) unlistPeer() {
	if cb.peerFile == "" {
		return
	}
	if b, err := os.ReadFile(cb.peerFile); err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(cb.port) {
		os.Remove(cb.peerFile)
	}
}

// nlmGrantedHere answers a GRANTED: this mount's own (nlmGranted), or another
// mount's on this host, passed on to it; Denied when there is no such mount.
func (fs *FS) nlmGrantedHere(ctx context.Context, a *nlm4.TestArgs) nlm4.Stat {
	nl := fs.nl
	if a.Lock.CallerName == nl.cfg.CallerName || nl.cfg.PeerDir == "" {
		return fs.nlmGranted(a)
	}
	b, err := os.ReadFile(peerFileName(nl.cfg.PeerDir, a.Lock.CallerName))
	if err != nil {
		return nlm4.Denied
	}
	port, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || port == nl.cb.port {
		return nlm4.Denied
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := sunrpc.Dial(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nlm4.Program, nlm4.Version,
		sunrpc.WithTimeout(5*time.Second))
	if err != nil {
		return nlm4.Denied
	}
	defer c.Close()
	var res nlm4.Res
	if err := c.Call(ctx, nlm4.ProcGranted, a, &res); err != nil {
		fs.log.Info("NLM: passing a GRANTED on to another mount", "caller_name", a.Lock.CallerName, "err", err)
		return nlm4.Denied
	}
	return res.Stat
}

func (fs *FS) startNLMCallback(ctx context.Context) (*nlmCallback, error) {
	nl := fs.nl
	addr := nl.cfg.CallbackAddr
	if addr == "" {
		addr = ":0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("vfs: the NLM callback service: %w", err)
	}
	pc, err := net.ListenPacket("udp", ln.Addr().String())
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("vfs: the NLM callback service: %w", err)
	}
	cb := &nlmCallback{srv: &sunrpc.Server{Logger: fs.log, SpinPoll: -1}, port: ln.Addr().(*net.TCPAddr).Port}
	procs := make([]sunrpc.Proc, nlm4.NumProcs)
	procs[nlm4.ProcNull] = sunrpc.Proc{Name: "NULL", Handler: func(context.Context, *sunrpc.Call, *xdr.Reader, *xdr.Writer) error { return nil }}
	procs[nlm4.ProcGranted] = sunrpc.Proc{Name: "GRANTED", Handler: func(ctx context.Context, c *sunrpc.Call, args *xdr.Reader, w *xdr.Writer) error {
		var a nlm4.TestArgs
		if a.Decode(args) != nil {
			return sunrpc.ErrGarbageArgs
		}
		res := nlm4.Res{Cookie: a.Cookie, Stat: fs.nlmGrantedHere(ctx, &a)}
		res.Encode(w)
		return nil
	}}
	// GRANTED_MSG (Linux's lockd and nfs-ganesha grant this way): the answer
	// goes back as GRANTED_RES on the connection to the server's NLM.
	procs[nlm4.ProcGrantedMsg] = sunrpc.Proc{Name: "GRANTED_MSG", Handler: func(ctx context.Context, c *sunrpc.Call, args *xdr.Reader, w *xdr.Writer) error {
		var a nlm4.TestArgs
		if a.Decode(args) != nil {
			return sunrpc.ErrGarbageArgs
		}
		a.Lock.FH = append(nfs3.FH(nil), a.Lock.FH...)
		a.Lock.OH = append([]byte(nil), a.Lock.OH...)
		a.Lock.CallerName = strings.Clone(a.Lock.CallerName)
		cookie := append([]byte(nil), a.Cookie...)
		cb.wg.Add(1)
		go func() { // owned by cb.wg, bounded by the timeout and nl.life
			defer cb.wg.Done()
			rctx, cancel := context.WithTimeout(nl.life, 10*time.Second)
			defer cancel()
			st := fs.nlmGrantedHere(rctx, &a)
			if err := nl.c.GrantedRes(rctx, cookie, st); err != nil {
				fs.log.Info("NLM: answering the server's GRANTED_MSG", "err", err)
			}
		}()
		return nil
	}}
	cb.srv.Register(&sunrpc.Program{Name: "nlm", Number: nlm4.Program, Versions: map[uint32][]sunrpc.Proc{nlm4.Version: procs}})
	if nl.cfg.PeerDir != "" {
		if err := cb.listPeer(nl.cfg.PeerDir, nl.cfg.CallerName); err != nil {
			fs.log.Warn("NLM: cannot list the callback service for this host's other mounts: their GRANTED calls for it are not passed on", "err", err)
		}
	}
	cb.wg.Add(2)
	go func() { defer cb.wg.Done(); cb.srv.ServeTCP(ln) }()
	go func() { defer cb.wg.Done(); cb.srv.ServeUDP(pc) }()
	if nl.cfg.RPCBind != "" {
		if err := cb.register(ctx, nl.cfg.RPCBind); err != nil {
			// Blocked locks are still granted, by polling; a host without
			// rpcbind is common enough not to warn.
			fs.log.Info("NLM: the callback service is not registered with rpcbind: blocked locks wait for the next poll", "rpcbind", nl.cfg.RPCBind, "err", err)
		} else {
			cb.rpcbind = nl.cfg.RPCBind
		}
	}
	return cb, nil
}

// register lists this service as the host's NLM v4 (TCP and UDP) with the
// rpcbind at rpcbind, unless a live lock manager is listed already: the
// kernel's lockd (the host also has stock NFS mounts) or another snfs mount.
// A host has one lock manager in rpcbind: the mounts not listed get their
// blocked locks by polling. A listing whose port does not answer (a mount
// that died) is replaced.
func (cb *nlmCallback) register(ctx context.Context, rpcbind string) error {
	pm, err := sunrpc.Dial(ctx, "tcp", rpcbind, portmap.Program, portmap.Version, sunrpc.WithTimeout(5*time.Second))
	if err != nil {
		return err
	}
	defer pm.Close()
	p, err := portmap.GetPort(ctx, pm, nlm4.Program, nlm4.Version, portmap.ProtoTCP)
	if err != nil {
		return err
	}
	if p != 0 {
		host, _, _ := net.SplitHostPort(rpcbind)
		if nlmAnswers(ctx, net.JoinHostPort(host, strconv.Itoa(int(p)))) {
			return fmt.Errorf("another lock manager is listed (port %d)", p)
		}
		if _, err := portmap.Unset(ctx, pm, nlm4.Program, nlm4.Version); err != nil {
			return err
		}
	}
	for _, prot := range []uint32{portmap.ProtoTCP, portmap.ProtoUDP} {
		ok, err := portmap.Set(ctx, pm, portmap.Mapping{Prog: nlm4.Program, Vers: nlm4.Version, Prot: prot, Port: uint32(cb.port)})
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("rpcbind refused NLM v4 on port %d", cb.port)
		}
	}
	return nil
}

// nlmAnswers reports whether an NLM v4 answers NULL at addr.
func nlmAnswers(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := sunrpc.Dial(ctx, "tcp", addr, nlm4.Program, nlm4.Version, sunrpc.WithTimeout(2*time.Second))
	if err != nil {
		return false
	}
	defer c.Close()
	return c.Call(ctx, nlm4.ProcNull, nil, nil) == nil
}

// stop removes the registration if it is still this service's, and stops the
// service.
func (cb *nlmCallback) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cb.unlistPeer()
	if cb.rpcbind != "" {
		if pm, err := sunrpc.Dial(ctx, "tcp", cb.rpcbind, portmap.Program, portmap.Version, sunrpc.WithTimeout(2*time.Second)); err == nil {
			if p, err := portmap.GetPort(ctx, pm, nlm4.Program, nlm4.Version, portmap.ProtoTCP); err == nil && p == uint32(cb.port) {
				portmap.Unset(ctx, pm, nlm4.Program, nlm4.Version)
			}
			pm.Close()
		}
	}
	cb.srv.Shutdown(ctx)
	cb.wg.Wait()
}
