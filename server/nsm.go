package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"snfs/nsm"
	"snfs/store"
	"snfs/sunrpc"
	"snfs/xdr"
)

// The Network Status Monitor, version 1 (XNFS chapter 11), the part a lock
// server needs. The server is its own status monitor: its state number is kept
// in StateDir/nlm/state and advanced at each start (nsm.NextState), and the
// client hosts that took an NLM lock are recorded in StateDir/nlm/sm (one file
// per host: its caller_name and address, written durably before the first
// lock is granted), as rpc.statd records the hosts its lock manager asks it
// to monitor. After a restart every recorded host is sent SM_NOTIFY (to the
// status monitor its rpcbind names), so that its lock manager reclaims its
// locks in the grace period; and an SM_NOTIFY from a client's status monitor
// (the client restarted) releases everything that host held.

// nsmState is the status monitor's state.
type nsmState struct {
	dir   string // StateDir/nlm/sm
	state int32  // this instance's state number
	log   *slog.Logger

	mu       sync.Mutex
	recorded map[string]nsmRecord // by file name; guarded by mu
	loaded   []nsmRecord          // recorded before this start: to notify
}

// nsmRecord is a recorded client host.
type nsmRecord struct{ name, ip string }

func (r nsmRecord) file() string {
	h := sha256.Sum256([]byte(r.name + "\x00" + r.ip))
	return hex.EncodeToString(h[:16])
}

// openNSM advances the state number and loads the recorded hosts.
func openNSM(stateDir string, log *slog.Logger) (*nsmState, error) {
	base := filepath.Join(stateDir, "nlm")
	n := &nsmState{dir: filepath.Join(base, "sm"), log: log, recorded: map[string]nsmRecord{}}
	if err := os.MkdirAll(n.dir, 0o700); err != nil {
		return nil, fmt.Errorf("server: NSM records: %w", err)
	}
	var err error
	if n.state, err = nsm.NextState(filepath.Join(base, "state")); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	ents, err := os.ReadDir(n.dir)
	if err != nil {
		return nil, fmt.Errorf("server: NSM records: %w", err)
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".tmp") {
			os.Remove(filepath.Join(n.dir, e.Name()))
			continue
		}
		b, err := os.ReadFile(filepath.Join(n.dir, e.Name()))
		name, ip, ok := strings.Cut(strings.TrimSuffix(string(b), "\n"), "\n")
		if err != nil || !ok {
			log.Warn("NSM: an unreadable client record is skipped", "file", e.Name(), "err", err)
			continue
		}
		r := nsmRecord{name, ip}
		n.recorded[e.Name()] = r
		n.loaded = append(n.loaded, r)
	}
	log.Info("NSM state number", "state", n.state, "clients_to_notify", len(n.loaded))
	return n, nil
}

// monitor records a client host durably, once.
func (n *nsmState) monitor(name, ip string) error {
	r := nsmRecord{name, ip}
	f := r.file()
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.recorded[f]; ok {
		return nil
	}
	if err := store.WriteFileDurable(filepath.Join(n.dir, f), []byte(name+"\n"+ip+"\n"), 0o600); err != nil {
		return err
	}
	n.recorded[f] = r
	return nil
}

// forget removes a host's record (it restarted: it holds nothing here now).
func (n *nsmState) forget(name, ip string) {
	f := nsmRecord{name, ip}.file()
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.recorded[f]; !ok {
		return
	}
	delete(n.recorded, f)
	if err := os.Remove(filepath.Join(n.dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
		n.log.Warn("NSM: cannot remove a client record", "client", name, "err", err)
	}
}

// nsmNotifyTries bounds the SM_NOTIFY calls to one host after a restart.
const nsmNotifyTries = 4

// nsmNotifyUDPWait bounds the UDP part of one SM_NOTIFY try, before TCP.
const nsmNotifyUDPWait = 2 * time.Second

// notify sends one SM_NOTIFY to the status monitor of the host at ip: over
// UDP, as rpc.statd's sm-notify does; if no answer comes, over TCP, which
// rpc.statd also serves and which crosses what passes only connections (a
// firewall that lets in TCP alone; a client behind slirp's port redirection,
// whose UDP redirection loses answers when several calls come at once).
func (n *nlmService) notify(ip string, args *nsm.StatChge) error {
	ctx, cancel := context.WithTimeout(n.ctx, nsmNotifyUDPWait)
	err := n.call(ctx, ip, "udp", nsm.Program, nsm.Version, nsm.ProcNotify, args, nil)
	cancel()
	if err == nil || n.ctx.Err() != nil {
		return err
	}
	ctx, cancel = context.WithTimeout(n.ctx, nlmCallTimeout)
	defer cancel()
	if terr := n.call(ctx, ip, "tcp", nsm.Program, nsm.Version, nsm.ProcNotify, args, nil); terr != nil {
		return fmt.Errorf("over UDP: %w; over TCP: %w", err, terr)
	}
	return nil
}

// notifyAll sends SM_NOTIFY to every host recorded before this start, each in
// a goroutine of the service's, tried nsmNotifyTries times with a growing
// pause; failures are logged.
func (n *nlmService) notifyAll() {
	for _, r := range n.nsm.loaded {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			args := nsm.StatChge{MonName: n.hostname, State: n.nsm.state}
			pause := time.Second
			for try := 1; ; try++ {
				err := n.notify(r.ip, &args)
				if err == nil {
					n.s.log.Info("NSM: SM_NOTIFY sent", "client", r.name, "addr", r.ip, "state", args.State)
					return
				}
				if try == nsmNotifyTries || n.ctx.Err() != nil {
					n.s.log.Warn("NSM: SM_NOTIFY not delivered: the client may not reclaim its locks", "client", r.name,
						"addr", r.ip, "tries", try, "err", err)
					return
				}
				select {
				case <-time.After(pause):
				case <-n.ctx.Done():
					return
				}
				pause *= 2
			}
		}()
	}
}

// nsmProgram is the NSM v1 procedure table (XNFS chapter 11; sm_inter.x).
// SM_MON, SM_UNMON and SM_UNMON_ALL are the requests of another lock manager
// on this host, which this server's own NLM does not need (it records its
// clients itself): SM_MON answers STAT_FAIL (nothing is monitored for it), the
// other two the state number. SM_SIMU_CRASH is not served (PROC_UNAVAIL).
func (s *Server) nsmProgram() *sunrpc.Program {
	state := s.nlm.nsm.state
	procs := make([]sunrpc.Proc, nsm.NumProcs)
	procs[nsm.ProcNull] = sunrpc.Proc{Name: "SM_NULL", Handler: nullProc}
	procs[nsm.ProcStat] = sunrpc.Proc{Name: "SM_STAT", Handler: func(ctx context.Context, c *sunrpc.Call, args *xdr.Reader, w *xdr.Writer) error {
		var a nsm.StatArgs
		if a.Decode(args) != nil {
			return sunrpc.ErrGarbageArgs
		}
		res := nsm.StatRes{ResStat: nsm.StatSucc, State: state}
		res.Encode(w)
		return nil
	}}
	procs[nsm.ProcMon] = sunrpc.Proc{Name: "SM_MON", Handler: func(ctx context.Context, c *sunrpc.Call, args *xdr.Reader, w *xdr.Writer) error {
		var a nsm.Mon
		if a.Decode(args) != nil {
			return sunrpc.ErrGarbageArgs
		}
		res := nsm.StatRes{ResStat: nsm.StatFail, State: state}
		res.Encode(w)
		return nil
	}}
	unmon := func(name string, d func() xdr.Decoder) sunrpc.Proc {
		return sunrpc.Proc{Name: name, Handler: func(ctx context.Context, c *sunrpc.Call, args *xdr.Reader, w *xdr.Writer) error {
			if d().Decode(args) != nil {
				return sunrpc.ErrGarbageArgs
			}
			res := nsm.Stat{State: state}
			res.Encode(w)
			return nil
		}}
	}
	procs[nsm.ProcUnmon] = unmon("SM_UNMON", func() xdr.Decoder { return new(nsm.UnmonArgs) })
	procs[nsm.ProcUnmonAll] = unmon("SM_UNMON_ALL", func() xdr.Decoder { return new(nsm.UnmonAllArgs) })
	procs[nsm.ProcNotify] = sunrpc.Proc{Name: "SM_NOTIFY", Handler: s.smNotify}
	return &sunrpc.Program{Name: "nsm", Number: nsm.Program, Versions: map[uint32][]sunrpc.Proc{nsm.Version: procs}}
}

// pruneAfter forgets, once the grace period of length g is over, the hosts
// recorded before this start that did not come back in it (no call at all,
// so no reclaim): they hold nothing here, and need no SM_NOTIFY after the next
// restart. A host that locks later is recorded again.
func (n *nlmService) pruneAfter(g time.Duration) {
	if g <= 0 || len(n.nsm.loaded) == 0 {
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		t := time.NewTimer(g)
		defer t.Stop()
		select {
		case <-t.C:
		case <-n.ctx.Done():
			return
		}
		n.mu.Lock()
		back := map[nsmRecord]bool{}
		for _, h := range n.hosts {
			back[nsmRecord{h.name, h.ip}] = true
		}
		n.mu.Unlock()
		for _, r := range n.nsm.loaded {
			if !back[r] {
				n.s.log.Info("NSM: a client did not come back in the grace period: forgotten", "client", r.name, "addr", r.ip)
				n.nsm.forget(r.name, r.ip)
			}
		}
	}()
}
