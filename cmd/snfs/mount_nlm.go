package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"snfs/client"
	"snfs/mount/vfs"
	"snfs/nlm4"
	"snfs/nsm"
	"snfs/portmap"
	"snfs/sunrpc"
)

// nlmConfig is nfs mode's lock setting (docs/mount.md, "Locks in nfs mode"):
// nil with --locks=local (the kernel's locks, on this machine only); else the
// server's NLM: at --nlm-port, or where the server's rpcbind says, or on the
// NFS port (snfs serve answers NLM there, with or without rpcbind). A server
// with no NLM at all still mounts: its lock requests fail with ENOLCK, as on
// a Linux NFS mount whose server runs no lockd, and the log says so once.
//
// The caller_name is HOSTNAME:MOUNTPOINT: a mount is a lock manager of its
// own (the server keeps its locks apart from other mounts' on this host),
// and a mount restarted after a crash on the same mount point frees the dead
// one's locks (FREE_ALL at start).
func nlmConfig(ctx context.Context, log *slog.Logger, f mountFlags, host, nfsAddr, dir string) (*vfs.NLMConfig, error) {
	if f.locks == "local" {
		return nil, nil
	}
	hostname, err := os.Hostname()
	if err != nil {
		return nil, err
	}
	name := hostname + ":" + dir
	if len(name) > nlm4.MaxStrLen {
		sum := sha256.Sum256([]byte(dir))
		name = hostname + ":" + hex.EncodeToString(sum[:16])
	}
	cfg := &vfs.NLMConfig{CallerName: name, PeerDir: filepath.Join(runDir(), "nlm"), RPCBind: net.JoinHostPort("127.0.0.1", strconv.Itoa(f.rpcbindPort))}
	switch {
	case f.nlmPort != 0:
		cfg.Addr = net.JoinHostPort(host, strconv.Itoa(f.nlmPort))
	default:
		addr, err := client.FindNLM(ctx, host, f.rpcbindPort)
		if err != nil {
			log.Debug("no NLM through the server's rpcbind", "err", err)
			if nlmAt(ctx, nfsAddr) {
				addr, err = nfsAddr, nil
			}
		}
		if err != nil {
			log.Warn("the server runs no lock manager (NLM): fcntl and flock locks fail with ENOLCK; --locks=local keeps them on this machine", "err", err)
		}
		cfg.Addr = addr
	}
	if cfg.Addr != "" {
		cfg.NSMAddr = nsmAddr(ctx, log, host, f.rpcbindPort, cfg.Addr)
	}
	return cfg, nil
}

// nsmAddr is where the server's status monitor (NSM) answers, whose state
// number tells the mount that the server restarted (docs/mount.md, "Locks
// after a server restart"): beside its NLM if it answers there (snfs serve
// answers NSM on the port of its NLM), else where the server's rpcbind says
// (rpc.statd beside knfsd or nfs-ganesha); "" if nowhere.
func nsmAddr(ctx context.Context, log *slog.Logger, host string, rpcbindPort int, nlmAddr string) string {
	if c, err := sunrpc.Dial(ctx, "tcp", nlmAddr, nsm.Program, nsm.Version); err == nil {
		ok := c.Call(ctx, nsm.ProcNull, nil, nil) == nil
		c.Close()
		if ok {
			return nlmAddr
		}
	}
	if rpcbindPort == 0 {
		rpcbindPort = 111
	}
	if pm, err := sunrpc.Dial(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(rpcbindPort)), portmap.Program, portmap.Version,
		sunrpc.WithTimeout(5*time.Second)); err == nil {
		port, err := portmap.GetPort(ctx, pm, nsm.Program, nsm.Version, portmap.ProtoTCP)
		pm.Close()
		if err == nil && port != 0 {
			return net.JoinHostPort(host, strconv.Itoa(int(port)))
		}
	}
	log.Warn("the server's status monitor (NSM) was not found: locks are not reclaimed after a server restart")
	return ""
}

// nlmAt reports whether an NLM v4 answers NULL at addr.
func nlmAt(ctx context.Context, addr string) bool {
	c, err := sunrpc.Dial(ctx, "tcp", addr, nlm4.Program, nlm4.Version)
	if err != nil {
		return false
	}
	defer c.Close()
	return c.Call(ctx, nlm4.ProcNull, nil, nil) == nil
}
