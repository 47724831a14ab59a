package server

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"snfs/lockmgr"
	"snfs/nfs3"
	"snfs/nlm4"
	"snfs/portmap"
	"snfs/sunrpc"
	"snfs/xdr"
)

// The Network Lock Manager, version 4 (RFC 1813 Appendix II; the Open Group's
// XNFS chapter 10): the byte-range locks of stock NFSv3 clients, served on the
// same RPC server (and so the same ports) as NFS, MOUNT and snfs, over TCP and
// UDP. Its locks live in the one lock manager (package lockd), so an NLM
// lock, an snfs mount's lock and a local process's lock on the backing file
// exclude one another.
//
// A client host is its caller_name and the IP address it calls from (Linux
// sends "(none)" when its host name is unset, so the name alone would merge
// hosts), interned as a lockmgr.ClientID with nlmClientBit set; a lock owner is
// (host, svid, oh) (lockmgr.NLMOwner); a file is its NFS handle's bytes, the
// same key the snfs protocol's locks use. No call waits: a blocking LOCK that
// conflicts is answered NLM4_BLOCKED and the grant goes to the client's lock
// manager in a GRANTED call (Granted below), whose port the client's rpcbind
// gives. The _MSG procedures are answered by calling the client's _RES
// procedure the same way.

// nlmHost is a client host as NLM knows it.
type nlmHost struct {
	id   lockmgr.ClientID
	name string // caller_name
	ip   string
}

// nlmWaiter is a blocked LOCK: what its GRANTED call needs.
type nlmWaiter struct {
	host    *nlmHost
	network string // the LOCK's transport: the callback uses the same
	args    nlm4.TestArgs
}

// nlmService is the NLM and NSM state of a server.
type nlmService struct {
	s *Server
	// rpcbindPort is the port of the clients' rpcbind (111; tests run their own).
	rpcbindPort int

	ctx    context.Context // cancelled by stop: ends the callbacks
	cancel context.CancelFunc
	wg     sync.WaitGroup // the callback goroutines

	mu      sync.Mutex
	hosts   map[string]*nlmHost           // by caller_name and IP; guarded by mu
	nextID  lockmgr.ClientID              // guarded by mu
	waiters map[lockmgr.ReqID]*nlmWaiter  // blocked LOCKs; guarded by mu
	ids     map[lockmgr.ClientID]*nlmHost // guarded by mu

	nsm      *nsmState // nsm.go
	addrs    nlmAddrs  // the clients' rpcbind answers (nlmaddr.go)
	hostname string    // the mon_name of this server's SM_NOTIFY
}

// maxNLMHosts bounds the hosts interned; past it a new host's calls fail
// (NLM4_DENIED_NOLOCKS): each host's locks are bounded by the lock manager.
const maxNLMHosts = 1 << 16

func newNLM(s *Server, cfg Config) (*nlmService, error) {
	n := &nlmService{s: s, rpcbindPort: cfg.ClientRPCBindPort, hosts: map[string]*nlmHost{},
		waiters: map[lockmgr.ReqID]*nlmWaiter{}, ids: map[lockmgr.ClientID]*nlmHost{}}
	if n.rpcbindPort == 0 {
		n.rpcbindPort = 111
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.hostname, _ = os.Hostname()
	var err error
	if n.nsm, err = openNSM(cfg.StateDir, s.log); err != nil {
		return nil, err
	}
	return n, nil
}

// stop ends the callbacks and waits for them.
func (n *nlmService) stop() {
	n.cancel()
	n.wg.Wait()
}

// host interns the client host (name, ip); nil past maxNLMHosts.
func (n *nlmService) host(name, ip string) *nlmHost {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := name + "\x00" + ip
	if h := n.hosts[k]; h != nil {
		return h
	}
	if len(n.hosts) >= maxNLMHosts {
		return nil
	}
	n.nextID++
	h := &nlmHost{id: nlmClientBit | n.nextID, name: name, ip: ip}
	n.hosts[k] = h
	n.ids[h.id] = h
	return h
}

// gone releases everything the hosts that match hold (FREE_ALL, SM_NOTIFY) and
// forgets them and their waiters.
func (n *nlmService) gone(match func(*nlmHost) bool) []*nlmHost {
	n.mu.Lock()
	var hs []*nlmHost
	for k, h := range n.hosts {
		if match(h) {
			hs = append(hs, h)
			delete(n.hosts, k)
			delete(n.ids, h.id)
		}
	}
	for r, w := range n.waiters {
		for _, h := range hs {
			if w.host == h {
				delete(n.waiters, r)
			}
		}
	}
	n.mu.Unlock()
	for _, h := range hs {
		n.s.locks.ClientGone(h.id)
	}
	return hs
}

func callerIP(c *sunrpc.Call) string {
	if ip := c.ClientIP(); ip != nil {
		return ip.String()
	}
	return ""
}

// nlmStat is the NLM status of a lock manager verdict: the one place they map.
func nlmStat(v lockmgr.Verdict) nlm4.Stat {
	switch v {
	case lockmgr.Granted:
		return nlm4.Granted
	case lockmgr.Denied:
		return nlm4.Denied
	case lockmgr.Blocked:
		return nlm4.Blocked
	case lockmgr.Deadlock:
		return nlm4.Deadlock
	case lockmgr.NoLocks:
		return nlm4.DeniedNoLocks
	case lockmgr.Grace:
		return nlm4.DeniedGracePeriod
	}
	return nlm4.Failed // Acquiring is answered by the driver before it returns
}

func nlmType(exclusive bool) lockmgr.LockType {
	if exclusive {
		return lockmgr.Write
	}
	return lockmgr.Read
}

// nlmHolder is the nlm4_holder of a conflicting lock: an NLM owner's own svid
// and oh; an snfs owner's id as the oh; a local process's none (svid 0).
func nlmHolder(r lockmgr.Result) nlm4.Holder {
	h := nlm4.Holder{Exclusive: r.Holder.Type == lockmgr.Write, Offset: r.Holder.Range.Offset(),
		Len: r.Holder.Range.Length(), OH: []byte{}}
	id := []byte(r.Holder.Owner.ID)
	switch {
	case r.Local:
	case r.Holder.Owner.Client&nlmClientBit != 0 && len(id) >= 4:
		h.Svid = int32(binary.BigEndian.Uint32(id))
		h.OH = id[4:]
	default:
		h.OH = id[:min(len(id), nlm4.MaxNetobj)]
	}
	return h
}

// nlmFile resolves an NLM lock's file handle (its MAC and the caller's right
// to the export) and checks that it is a regular file: the lock key.
func (s *Server) nlmFile(c *sunrpc.Call, fh nfs3.FH) (lockmgr.FileKey, error) {
	r, err := s.resolve(c, fh)
	if err != nil {
		return "", err
	}
	defer r.release()
	if err := regularFile(r); err != nil {
		return "", err
	}
	return lockmgr.FileKey(fh), nil
}

// nlmProc makes an NLM procedure a sunrpc.Proc: decode (GARBAGE_ARGS on
// failure), the handler, encode. With msg, the procedure is the _MSG form:
// the reply is void and the result goes to the client's resProc.
func nlmProc[A, R any, PA interface {
	*A
	xdr.Decoder
}, PR interface {
	*R
	nlm4.Result
}](s *Server, name string, msg bool, resProc uint32, h func(c *sunrpc.Call, a *A, res *R)) sunrpc.Proc {
	return sunrpc.Proc{Name: name, Handler: func(ctx context.Context, c *sunrpc.Call, args *xdr.Reader, w *xdr.Writer) error {
		raw := args.Rest()
		var a A
		if PA(&a).Decode(args) != nil {
			return sunrpc.ErrGarbageArgs
		}
		run := func(a *A, w *xdr.Writer) error {
			var res R
			h(c, a, &res)
			if !msg {
				PR(&res).Encode(w)
				return nil
			}
			s.nlm.callBack(c, resProc, PR(&res))
			return nil
		}
		fh, ok := nlmFHOf(&a)
		if !ok || !s.delegs.on() {
			return run(&a, w)
		}
		// Every NLM request about a delegated file recalls the delegation
		// first (lockdeleg.go); the reply is deferred meanwhile.
		k := lockmgr.FileKey(fh)
		var leave func()
		keep := func() { raw = append([]byte(nil), raw...) } // the request buffer is reused once the handler returns
		_, err := later(c, w, keep, func(done func(error)) {
			s.delegs.admit(k, 0, func(lv func()) {
				leave = lv
				done(nil)
			})
		}, func(w *xdr.Writer, err error, deferred bool) error {
			defer leave()
			switch {
			case w == nil:
				return nil
			case !deferred:
				return run(&a, w)
			}
			a2, err := reDecode[A, PA](raw)
			if err != nil {
				return sunrpc.ErrGarbageArgs
			}
			return run(a2, w)
		})
		return err
	}}
}

// nlmFHOf is the file an NLM request is about.
func nlmFHOf(a any) (nfs3.FH, bool) {
	switch a := a.(type) {
	case *nlm4.TestArgs:
		return a.Lock.FH, true
	case *nlm4.LockArgs:
		return a.Lock.FH, true
	case *nlm4.CancArgs:
		return a.Lock.FH, true
	case *nlm4.UnlockArgs:
		return a.Lock.FH, true
	case *nlm4.ShareArgs:
		return a.Share.FH, true
	}
	return nil, false
}

// nlmProgram is the NLM v4 procedure table (RFC 1813 Appendix II; XNFS
// chapter 10). Every handler answers at once; the replies of LOCK, UNLOCK,
// CANCEL and the share procedures go through the duplicate request cache in
// memory (locks do not survive a restart).
func (s *Server) nlmProgram() *sunrpc.Program {
	void := func(name string) sunrpc.Proc {
		return sunrpc.Proc{Name: name, Handler: func(context.Context, *sunrpc.Call, *xdr.Reader, *xdr.Writer) error { return nil }}
	}
	cached := func(p sunrpc.Proc) sunrpc.Proc { p.Cache = true; return p }
	procs := make([]sunrpc.Proc, nlm4.NumProcs)
	procs[nlm4.ProcNull] = void("NULL")
	procs[nlm4.ProcTest] = nlmProc[nlm4.TestArgs, nlm4.TestRes](s, "TEST", false, 0, s.nlmTest)
	procs[nlm4.ProcLock] = cached(nlmProc[nlm4.LockArgs, nlm4.Res](s, "LOCK", false, 0, s.nlmLock))
	procs[nlm4.ProcCancel] = cached(nlmProc[nlm4.CancArgs, nlm4.Res](s, "CANCEL", false, 0, s.nlmCancel))
	procs[nlm4.ProcUnlock] = cached(nlmProc[nlm4.UnlockArgs, nlm4.Res](s, "UNLOCK", false, 0, s.nlmUnlock))
	procs[nlm4.ProcTestMsg] = nlmProc[nlm4.TestArgs, nlm4.TestRes](s, "TEST_MSG", true, nlm4.ProcTestRes, s.nlmTest)
	procs[nlm4.ProcLockMsg] = cached(nlmProc[nlm4.LockArgs, nlm4.Res](s, "LOCK_MSG", true, nlm4.ProcLockRes, s.nlmLock))
	procs[nlm4.ProcCancelMsg] = cached(nlmProc[nlm4.CancArgs, nlm4.Res](s, "CANCEL_MSG", true, nlm4.ProcCancelRes, s.nlmCancel))
	procs[nlm4.ProcUnlockMsg] = cached(nlmProc[nlm4.UnlockArgs, nlm4.Res](s, "UNLOCK_MSG", true, nlm4.ProcUnlockRes, s.nlmUnlock))
	// The server sends GRANTED itself and waits for its reply; a GRANTED_RES
	// (a client answering a GRANTED_MSG) has nothing to match.
	procs[nlm4.ProcGrantedRes] = void("GRANTED_RES")
	procs[nlm4.ProcShare] = cached(nlmProc[nlm4.ShareArgs, nlm4.ShareRes](s, "SHARE", false, 0, s.nlmShare))
	procs[nlm4.ProcUnshare] = cached(nlmProc[nlm4.ShareArgs, nlm4.ShareRes](s, "UNSHARE", false, 0, s.nlmUnshare))
	procs[nlm4.ProcNMLock] = cached(nlmProc[nlm4.LockArgs, nlm4.Res](s, "NM_LOCK", false, 0, s.nlmNMLock))
	procs[nlm4.ProcFreeAll] = sunrpc.Proc{Name: "FREE_ALL", Handler: s.nlmFreeAll}
	return &sunrpc.Program{Name: "nlm", Number: nlm4.Program, Versions: map[uint32][]sunrpc.Proc{nlm4.Version: procs}}
}

// clientAddr asks the rpcbind of the host at ip for the port of prog/vers
// over network: where the host's lock manager or status monitor listens.
func (n *nlmService) clientAddr(ctx context.Context, ip, network string, prog, vers uint32) (string, error) {
	pm, err := sunrpc.Dial(ctx, network, net.JoinHostPort(ip, strconv.Itoa(n.rpcbindPort)), portmap.Program, portmap.Version,
		sunrpc.WithTimeout(time.Second))
	if err != nil {
		return "", fmt.Errorf("server: the rpcbind of %s: %w", ip, err)
	}
	defer pm.Close()
	prot := uint32(portmap.ProtoTCP)
	if network == "udp" {
		prot = portmap.ProtoUDP
	}
	port, err := portmap.GetPort(ctx, pm, prog, vers, prot)
	if err != nil {
		return "", fmt.Errorf("server: the rpcbind of %s: %w", ip, err)
	}
	if port == 0 {
		return "", fmt.Errorf("server: %s runs no program %d version %d over %s", ip, prog, vers, network)
	}
	return net.JoinHostPort(ip, strconv.Itoa(int(port))), nil
}

// nlmCallTimeout bounds one call to a client (a _RES or SM_NOTIFY).
const nlmCallTimeout = 10 * time.Second

// callBack sends the result of a _MSG call to the caller's _RES procedure, in
// a goroutine of the service's: a client that does not answer holds no worker.
func (n *nlmService) callBack(c *sunrpc.Call, proc uint32, res xdr.Encoder) {
	ip, network := callerIP(c), c.Network
	var w xdr.Writer
	res.Encode(&w) // the result aliases the call's buffer: encode it now
	body := rawArgs(w.Bytes())
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		ctx, cancel := context.WithTimeout(n.ctx, nlmCallTimeout)
		defer cancel()
		if err := n.call(ctx, ip, network, nlm4.Program, nlm4.Version, proc, body, nil); err != nil {
			n.s.log.Info("NLM: the result of a _MSG call was not delivered", "client", ip, "proc", nlm4.ProcNames[proc], "err", err)
		}
	}()
}

// rawArgs are arguments already encoded.
type rawArgs []byte

func (b rawArgs) Encode(w *xdr.Writer) { copy(w.Extend(len(b)), b) }

// granted sends a blocked LOCK's grant to the client's lock manager (NLM4
// GRANTED, XNFS chapter 10): nil if it took the lock. A client that cannot be
// reached, or that answers anything but NLM4_GRANTED, backs the grant out;
// Linux's client asks again with LOCK within 30 s of BLOCKED anyway.
func (n *nlmService) granted(ctx context.Context, a lockmgr.Action) error {
	n.mu.Lock()
	w := n.waiters[a.Req]
	delete(n.waiters, a.Req)
	n.mu.Unlock()
	if w == nil {
		return fmt.Errorf("server: no NLM request %d waits", a.Req)
	}
	args := w.args
	args.Cookie = binary.BigEndian.AppendUint64(nil, uint64(a.Req))
	var res nlm4.Res
	if err := n.call(ctx, w.host.ip, w.network, nlm4.Program, nlm4.Version, nlm4.ProcGranted, &args, &res); err != nil {
		return err
	}
	if res.Stat != nlm4.Granted {
		return fmt.Errorf("server: the client answered GRANTED with %v", res.Stat)
	}
	return nil
}

// wait records a blocked LOCK's request before the lock manager sees it (a
// grant may come before the LOCK returns).
func (n *nlmService) wait(req lockmgr.ReqID, h *nlmHost, network string, a *nlm4.LockArgs) {
	l := a.Lock
	l.FH = append(nfs3.FH(nil), l.FH...)
	l.OH = append([]byte{}, l.OH...)
	n.mu.Lock()
	n.waiters[req] = &nlmWaiter{host: h, network: network, args: nlm4.TestArgs{Exclusive: a.Exclusive, Lock: l}}
	n.mu.Unlock()
}

// unwait forgets a request that does not wait (any more).
func (n *nlmService) unwait(req lockmgr.ReqID) {
	n.mu.Lock()
	delete(n.waiters, req)
	n.mu.Unlock()
}
